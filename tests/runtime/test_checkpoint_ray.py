"""Checkpoints with the Ray backend: resuming on Ray from a threads checkpoint repeats the threads run in sync
float64, and a background Ray run saved mid-run holds the actors' state (not the driver's stale copy)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.runtime.checkpoint import load_checkpoint
from amp_notebook.runtime.train import train
from tests.conftest import digits_dataset

pytestmark = pytest.mark.slow  # Ray actors take seconds to start
SETTINGS = {"workers": 2, "seed": 0, "dtype": "float64", "optimizer": {"name": "adam", "lr": 3e-3, "lr_decay": 0.7}}


def mlp():
    return models.mlp(input_width=64, hidden=16)


def test_a_threads_checkpoint_resumes_on_ray_like_the_uninterrupted_run(ray_cluster, tmp_path):
    data = digits_dataset(batch_size=50)
    whole = train(mlp(), data, mode="sync", epochs=2, **SETTINGS)
    train(mlp(), data, mode="sync", epochs=1, checkpoint=tmp_path / "c.npz", **SETTINGS)
    resumed = train(mlp(), data, mode="sync", epochs=2, resume=tmp_path / "c.npz", backend="ray",
                    address=ray_cluster.address, **SETTINGS)  # fmt: skip
    for node, params in whole.params.items():
        for k, v in params.items():
            np.testing.assert_allclose(resumed.params[node][k], v, rtol=1e-12, atol=1e-14)
    assert resumed.history[0].val_loss == whole.history[0].val_loss  # the checkpoint's epoch, carried over


def test_a_ray_run_saved_mid_run_holds_the_actors_state(ray_cluster, tmp_path):
    data = digits_dataset(batch_size=50)
    run = train(mlp(), data, mode="sync", epochs=10_000, validate=False, background=True, backend="ray",
                address=ray_cluster.address, **SETTINGS)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while run.status["keys_done"] < 12:
            assert time.monotonic() < deadline, "the Ray run made no progress"
            time.sleep(0.01)
        path = run.save(tmp_path / "ray.npz")
        assert run.state == "running"
    finally:
        run.stop()
    ckpt = load_checkpoint(path)
    done = ckpt.progress["keys_done"]
    assert done >= 12
    assert {n.version for n in ckpt.nodes.values()} == {done}  # sync: one update per training key so far
    assert not all(np.array_equal(ckpt.params[n]["W"], mlp().init_params(0)[n]["W"]) for n in ckpt.nodes)
