"""The dashboard's Python side for reliability: the checkpoint button, the watchdog's diagnosis and the count of
keys skipped for NaN/inf in the frames the browser gets (frames captured instead of sent)."""

from __future__ import annotations

import numpy as np
import pytest

from amp_notebook.data import Batch, Dataset
from amp_notebook.runtime.checkpoint import load_checkpoint
from amp_notebook.runtime.watchdog import StuckRunError
from amp_notebook.testing import faults, runs
from amp_notebook.testing.faults import Fault, Setup
from tests.conftest import digits_dataset
from tests.ui.test_dashboard_feed import DEADLINE_S, Captured, background, until


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return digits_dataset(batch_size=20)


def test_the_checkpoint_button_saves_the_live_run_and_it_goes_on(digits, tmp_path):
    run = background(digits)
    dash = Captured(run, rate_hz=2, checkpoint_path=tmp_path / "live.npz")
    try:
        assert dash.controls["checkpoint"] is True
        until(lambda: run.status["keys_done"] > 10, "10 keys")
        dash._on_msg(dash, {"type": "checkpoint"}, [])
        saved = next(m for m in dash.messages if m.get("type") == "checkpointed")
        assert saved["path"] == str((tmp_path / "live.npz").resolve()) and saved["bytes"] > 0
        assert load_checkpoint(saved["path"]).progress["keys_done"] > 10
        assert run.state == "running"
    finally:
        run.stop()
        dash.close()


def test_a_stuck_run_shows_its_diagnosis(monkeypatch):
    monkeypatch.setattr(runs, "WATCHDOG_S", 0.3)
    run, _ = faults.start(Setup("mlp", "amp"), faults.installer(Fault("drop", k=3, node="linear2", phase="bwd")))
    dash = Captured(run, rate_hz=10)
    with pytest.raises(StuckRunError):
        run.wait(timeout=DEADLINE_S)
    assert dash.wait_feed(DEADLINE_S)
    status = dash.frames[-1].content["meta"]["status"]
    assert status["state"] == "failed" and status["diagnosis"]["keys_in_flight"]
    assert any(h["node"] == "linear2" for h in status["diagnosis"]["held"])
    dash.close()


def test_keys_skipped_for_nan_show_in_the_status(digits):
    batch = digits.train[0]
    x = batch.inputs["x"].copy()
    x[0, 0] = np.nan
    data = Dataset(digits.name, [Batch({**batch.inputs, "x": x}, batch.size), *digits.train[1:]], digits.val)
    run = background(data, epochs=2, on_nonfinite="skip")
    dash = Captured(run, rate_hz=10)
    run.wait()
    assert dash.wait_feed(DEADLINE_S)
    assert dash.frames[-1].content["meta"]["status"]["nonfinite_skipped"] == 2
    epochs = [e for f in dash.frames if f.content.get("meta") for e in f.content["meta"]["epochs"]]
    assert [e["nonfinite_skipped"] for e in epochs] == [1, 1]
    dash.close()
