"""``amp-notebook --help`` loads none of the heavy modules: the package and the parser import lazily.

Not a timed test (timing on a shared machine is noise): it checks what a fresh interpreter has imported once
``--help`` has printed, which is what made it slow (numpy, the JSON Schema validators with their
``rfc3987_syntax`` grammar, the runtime).
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "numpy", "scipy", "jsonschema", "networkx", "sklearn", "tqdm", "threadpoolctl",
    "amp_notebook.runtime", "amp_notebook.ir", "amp_notebook.data", "amp_notebook.models", "amp_notebook.bench",
    "amp_notebook.ui",
)  # fmt: skip

PROBE = """
import contextlib, io, json, sys
from amp_notebook.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(sys.argv[1:])
    except SystemExit as exit_:
        code = exit_.code
print(json.dumps({"code": code, "help": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def imported_by(*argv: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(proc.stdout)


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_help_imports_no_heavy_module() -> None:
    probe = imported_by("--help")
    assert probe["code"] == 0 and "train" in probe["help"] and "validate" in probe["help"]
    assert heavy(probe["modules"]) == []


def test_importing_the_package_imports_nothing_heavy() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import json, sys, amp_notebook; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert heavy(json.loads(proc.stdout)) == []


def test_the_lazy_package_still_has_every_name() -> None:
    import amp_notebook as amp

    for name in amp.__all__:
        assert getattr(amp, name) is not None
    assert set(amp.__all__) <= set(dir(amp))
