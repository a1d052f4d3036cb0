"""Checkpoints written before RunConfig declared its settings still load and resume.

The fixtures were written by the code of commit a6dc09b (manifest format version 1), whose checkpoints
kept ``placement`` (a dict, empty for none) beside ``placement_strategy``:

* ``checkpoint_v1_amp.npz``: a finished one-epoch ``amp`` run of ``models.mlp(input_width=64, hidden=16)`` on
  ``digits_dataset(batch_size=50)`` with node overrides, per-node ``max_bundle``, Adam and gradients pending
  toward each node's next update (``min_update_frequency=4``);
* ``checkpoint_v1_sync_mid_epoch.npz``: a two-epoch ``sync`` run with the ``balanced`` strategy, saved by
  ``Run.checkpoint`` in the middle of its first epoch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.runtime.checkpoint import load_checkpoint
from amp_notebook.runtime.config import RunConfig
from amp_notebook.runtime.train import TrainResult, resume
from tests.conftest import digits_dataset

FIXTURES = Path(__file__).parent / "fixtures"
ADAM = {"name": "adam", "lr": 3e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "clip_norm": None, "lr_decay": 0.7}


@pytest.fixture(scope="module")
def digits():
    return digits_dataset(batch_size=50)


def test_an_old_amp_checkpoint_loads_with_every_setting(digits) -> None:
    ckpt = load_checkpoint(FIXTURES / "checkpoint_v1_amp.npz")
    assert ckpt.meta == {"written_by": "amp_notebook a6dc09b"}
    assert not ckpt.problems(models.mlp(input_width=64, hidden=16), digits)
    assert ckpt.run_config() == RunConfig(
        workers=2, mode="amp", max_active_keys=3, min_update_frequency=4, epochs=1, seed=5, dtype="float64",
        optimizer=ADAM, placement={"linear1": 1, "linear2": 0, "linear3": 1, "linear4": 0}, priority="fifo",
        order="arrival", max_bundle={"linear2": 2}, watchdog_s=30.0, on_nonfinite="skip", trace_capacity=5000,
    )  # fmt: skip
    assert all(node.gradient_count == 1 for node in ckpt.nodes.values())
    r = resume(ckpt, digits, epochs=2)
    assert isinstance(r, TrainResult)
    assert len(r.history) == 2 and np.isfinite(r.history[-1].train_loss)
    assert r.config == ckpt.run_config().replace(epochs=2)


def test_an_old_mid_epoch_checkpoint_resumes_the_same_way_each_time(digits, tmp_path) -> None:
    ckpt = load_checkpoint(FIXTURES / "checkpoint_v1_sync_mid_epoch.npz")
    config = ckpt.run_config()
    assert (config.mode, config.placement, config.epochs, config.seed) == ("sync", "balanced", 2, 1)
    assert ckpt.position.remaining and ckpt.position.epoch == 0
    a, b = resume(ckpt, digits, epochs=2), resume(ckpt, digits, epochs=2)
    assert isinstance(a, TrainResult) and isinstance(b, TrainResult)
    assert [e.train_loss for e in a.history] == [e.train_loss for e in b.history] and len(a.history) == 2
    for node, group in a.params.items():
        for k, v in group.items():
            assert np.array_equal(v, b.params[node][k]), (node, k)
    # written again by this code, it holds the placement as one setting and reads back the same
    again = load_checkpoint(a.save_checkpoint(tmp_path / "again.npz"))
    assert again.config["placement"] == "balanced" and "placement_strategy" not in again.config
    assert again.run_config() == config


def test_the_published_schema_holds_the_declared_settings() -> None:
    from amp_notebook.runtime.checkpoint import RESUMED_SETTINGS, config_schema
    from amp_notebook.runtime.checkpoint_file import manifest_schema

    published = manifest_schema()["$defs"]["config"]
    assert published == config_schema(), (
        "checkpoint.schema.json's $defs.config differs from the settings' declarations; replace it with "
        "amp_notebook.runtime.checkpoint.config_schema()"
    )
    assert set(published["properties"]) == {*RESUMED_SETTINGS, "placement_strategy"} - {"optimizer"}
