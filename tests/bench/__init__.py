from __future__ import annotations

from typing import Any


def scaling_json(main: Any, capsys: Any) -> tuple[dict[str, Any], str]:
    """``bench scaling`` on the Tree-LSTM alone, native, 3 rounds, round robin, no ceiling, waits or bound (the
    benchmark's runs replaced by the caller's fakes): its JSON and its report."""
    import json

    argv = ["bench", "scaling", "--json", "--models", "tree", "--engines", "native", "--repeats", "3",
            "--placement", "round_robin", "--no-ceiling", "--no-waits", "--no-bound"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out.strip().splitlines()[-1]), captured.err
