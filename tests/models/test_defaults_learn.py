"""Defaults that learn: every zoo model, trained by ``amp-notebook train`` with its defaults (optimizer,
learning rate, update frequencies, keys in flight) on a smaller budget of its embedded data, gets better.

Each case runs two epochs through the command line itself and checks that the training loss falls from
the first epoch to the second and that validation accuracy clears chance by a margin. The bars sit below
what the budgets reached in runs on this project's shared 2-core machine (in each comment: two seeds), so
scheduling noise does not fail them; the full-size figures are in the docs' command-line page (docs/cli.md).
"""

from __future__ import annotations

import json

import pytest

from amp_notebook.cli import main

CASES = [
    # digits in keys of 25, Adam 1e-3 decaying 0.7 per epoch: 0.93-0.94 after two epochs; chance 0.1
    ("mlp", [], 0.8),
    # 5,000 lists: 0.33-0.37 after two epochs; chance 0.1 (the task needs ~100k lists x 10 epochs for 0.97)
    ("rnn", ["--n-train", "5000", "--n-val", "500"], 0.25),
    # 200 trees, node accuracy: 0.87-0.88; the majority class (neutral) is about 0.5 of the nodes
    ("tree-lstm", ["--n-train", "200", "--n-val", "60"], 0.7),
    # 100 bAbI-15 graphs, node selection: 0.93-1.0; chance 1/8 (one of 8 nodes)
    ("ggsnn", ["--n-train", "100", "--n-val", "40"], 0.6),
    # 200 sentences, token accuracy: 0.96-0.97; always answering O gives 0.71-0.72
    ("bilstm-tagger", ["--n-train", "200", "--n-val", "60"], 0.85),
]


@pytest.mark.slow
@pytest.mark.parametrize(("model", "extra", "bar"), CASES, ids=[c[0] for c in CASES])
def test_train_defaults_learn(model: str, extra: list[str], bar: float, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--model", model, "--epochs", "2", "--json", "--quiet", *extra]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    first, second = out["train_loss"]
    assert second < first, f"{model}: training loss did not fall ({first:.3f} -> {second:.3f})"
    assert out["val_accuracy"][-1] >= bar, f"{model}: validation accuracy {out['val_accuracy']} below {bar}"
