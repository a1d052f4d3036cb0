"""``amp-notebook bench numerics-overhead --quick --json``: the JSON contract (its figures mean nothing quick)."""

from __future__ import annotations

import json

import pytest

from amp_notebook.cli import main


@pytest.mark.slow
def test_numerics_overhead_quick_json(capsys):
    assert main(["bench", "numerics-overhead", "--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"rnn_ratio", "mlp_ratio", "rnn_checked_per_s", "mlp_unchecked_per_s", "repeats"} <= out.keys()
    assert out["rnn_ratio"] > 0 and len(out["repeats"]["mlp_checked"]) == 3
