"""``amp-notebook train --checkpoint DIR [--checkpoint-every N] [--resume]``: 2 epochs in one go, and 1 epoch then
``--epochs 2 --resume``, print the same JSON figures in sync mode."""

from __future__ import annotations

import json

import pytest

from amp_notebook.cli import main

FIGURES = ("val_loss", "val_accuracy", "train_loss")


def train_json(capsys, *args: str) -> dict:
    code = main(["train", "--model", "mlp", "--mode", "sync", "--quiet", "--json", *args])
    assert code == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.slow  # the CLI's mlp (784 hidden) for 5 epochs in all: seconds; the API twin is in tests/runtime
def test_two_epochs_equal_one_epoch_then_resume(capsys, tmp_path):
    whole = train_json(capsys, "--epochs", "2")
    train_json(capsys, "--epochs", "1", "--checkpoint", str(tmp_path))
    assert (tmp_path / "checkpoint.npz").exists()
    resumed = train_json(capsys, "--epochs", "2", "--checkpoint", str(tmp_path), "--resume")
    assert {k: resumed[k] for k in FIGURES} == {k: whole[k] for k in FIGURES}
    assert len(resumed["val_loss"]) == 2


def test_resume_without_a_checkpoint_says_so(capsys, tmp_path):
    assert main(["train", "--model", "mlp", "--epochs", "2", "--checkpoint", str(tmp_path), "--resume", "--quiet"]) == 2
    assert "--resume: no checkpoint" in capsys.readouterr().err
    assert main(["train", "--model", "mlp", "--resume", "--quiet"]) == 2
    assert "--resume needs --checkpoint DIR" in capsys.readouterr().err


def test_a_damaged_checkpoint_exits_2_with_a_message(capsys, tmp_path):
    (tmp_path / "checkpoint.npz").write_bytes(b"PK\x03\x04 not really a zip")
    code = main(["train", "--model", "mlp", "--epochs", "2", "--checkpoint", str(tmp_path), "--resume", "--quiet"])
    assert code == 2
    assert "damaged archive" in capsys.readouterr().err
