"""Checkpoints: what they hold, resuming bit for bit in sync mode, saving mid-run, refusing what does not fit.

Bit-identity claims are made where the runtime is deterministic (``sync`` and ``pipeline`` mode, float64);
``amp`` mode only promises that a checkpoint taken mid-run loads and trains on.
"""

from __future__ import annotations

import json
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.data import Batch, Dataset
from amp_notebook.runtime import checkpoint_file
from amp_notebook.runtime.checkpoint import capture, graph_differences, load_checkpoint, restore
from amp_notebook.runtime.checkpoint_file import CheckpointError
from amp_notebook.runtime.credits import Credits
from amp_notebook.runtime.run import Run
from amp_notebook.runtime.session import RunConfig, Session
from amp_notebook.runtime.train import TrainResult, resume, train
from amp_notebook.runtime.worker import NodeError
from tests.conftest import digits_dataset

SETTINGS = {"workers": 2, "seed": 0, "dtype": "float64", "optimizer": {"name": "adam", "lr": 3e-3, "lr_decay": 0.7}}


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return digits_dataset(batch_size=50)  # 29 training keys, 8 validation keys


def mlp():
    return models.mlp(input_width=64, hidden=16)


def fit(graph, data, **options) -> TrainResult:
    result = train(graph, data, **{**SETTINGS, **options})
    assert isinstance(result, TrainResult)
    return result


def assert_same_params(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for node in a:
        assert a[node].keys() == b[node].keys()
        for k in a[node]:
            assert np.array_equal(a[node][k], b[node][k]), f"{node}.{k} differs"


def figures(result: TrainResult) -> list[tuple]:
    return [(e.train_loss, e.val_loss, e.val_accuracy, e.train_instances) for e in result.history]


@pytest.mark.parametrize("mode", ["sync", "pipeline"])
def test_resuming_between_epochs_repeats_the_uninterrupted_run_bit_for_bit(digits, tmp_path, mode):
    whole = fit(mlp(), digits, mode=mode, epochs=2)
    first = fit(mlp(), digits, mode=mode, epochs=1)
    path = first.save_checkpoint(tmp_path / "ckpt.npz")
    ckpt = load_checkpoint(path)
    assert ckpt.epochs_completed == 1 and not ckpt.position.remaining
    resumed = fit(mlp(), digits, mode=mode, epochs=2, resume=ckpt)
    assert_same_params(resumed.params, whole.params)
    assert figures(resumed) == figures(whole)  # the history includes the checkpoint's epoch
    assert resumed.train_instances == digits.train_instances  # this run's own work: one epoch


def test_resume_with_the_checkpoints_own_settings(digits, tmp_path):
    whole = fit(mlp(), digits, mode="sync", epochs=2)
    fit(mlp(), digits, mode="sync", epochs=1, checkpoint=tmp_path / "c.npz")
    resumed = resume(tmp_path / "c.npz", digits, epochs=2)  # graph, mode, dtype, optimizer from the file
    assert_same_params(resumed.params, whole.params)


def test_a_run_saved_mid_epoch_goes_on_and_its_checkpoint_resumes_bit_for_bit(digits, tmp_path):
    whole = fit(mlp(), digits, mode="sync", epochs=2)
    done: list[int] = []

    def slow_after_10(info) -> None:  # the whole run takes a few ms: leave the test time to save in the middle
        done.append(info.key)
        if len(done) >= 10:
            time.sleep(0.002)

    run = train(mlp(), digits, mode="sync", epochs=2, background=True, on_key_done=slow_after_10, **SETTINGS)
    assert isinstance(run, Run)
    deadline = time.monotonic() + 20
    while run.status["keys_done"] < 10 and not run.done:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    path = run.save(tmp_path / "mid.npz", meta={"note": "mid-run"})
    after = run.wait()  # the run went on after the save, unchanged
    assert_same_params(after.params, whole.params)
    ckpt = load_checkpoint(path)
    assert ckpt.meta == {"note": "mid-run"}
    resumed = fit(mlp(), digits, mode="sync", epochs=2, resume=ckpt)
    assert_same_params(resumed.params, whole.params)
    assert figures(resumed) == figures(whole)


def test_a_stopped_run_resumes_with_the_keys_it_did_not_admit(digits, tmp_path):
    whole = fit(mlp(), digits, mode="sync", epochs=2)
    stopped: list[int] = []
    asked = threading.Event()

    def hold_after_10(info) -> None:  # the driver waits here until the test has asked the run to stop
        stopped.append(info.key)
        if len(stopped) == 10:
            asked.wait(20)

    run = train(mlp(), digits, mode="sync", epochs=2, background=True, on_key_done=hold_after_10, **SETTINGS)
    deadline = time.monotonic() + 20
    while len(stopped) < 10:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    run.stop(wait=False)
    asked.set()
    ckpt = run.wait().checkpoint()
    assert 0 < len(ckpt.position.remaining) < len(digits.train) + len(digits.val)
    resumed = fit(mlp(), digits, mode="sync", epochs=2, resume=ckpt)
    assert_same_params(resumed.params, whole.params)


def test_amp_mode_saves_mid_run_and_trains_on_from_it(digits, tmp_path):
    options = {"mode": "amp", "min_update_frequency": 3, "validate": False, **SETTINGS}
    with train(mlp(), digits, epochs=10_000, background=True, **options) as run:
        while run.status["keys_done"] < 40:
            time.sleep(0.005)
        path = run.save(tmp_path / "amp.npz")
        assert run.state == "running"
    ckpt = load_checkpoint(path)
    epochs = ckpt.position.epoch + 2
    resumed = train(mlp(), digits, epochs=epochs, resume=ckpt, **options)
    assert len(resumed.history) == epochs


def test_saving_a_paused_run_leaves_it_paused(digits, tmp_path):
    run = train(mlp(), digits, mode="amp", epochs=10_000, background=True, validate=False, **SETTINGS)
    try:
        run.pause()
        path = run.save(tmp_path / "p.npz")
        assert run.state == "paused"
        assert load_checkpoint(path).position.epoch >= 0
        run.resume()
        assert run.state == "running"
    finally:
        run.stop()


def test_state_round_trips_through_the_file(digits, tmp_path):
    """Versions, optimizer moments and gradients held toward the next update (amp mode) all come back."""
    momentum = {"name": "momentum", "lr": 0.01}
    result = fit(mlp(), digits, mode="amp", epochs=1, min_update_frequency=7, optimizer=momentum)
    session = result.session
    assert any(ctx.n_grads for ctx in session.contexts)  # 29 keys, updates every 7: some are held at the end
    path = result.save_checkpoint(tmp_path / "s.npz")
    config = RunConfig(workers=2, mode="amp", epochs=2, min_update_frequency=7, dtype="float64")
    ckpt = load_checkpoint(path)
    fresh = Session(mlp(), digits, config, session.plan.optimizers[session.plan.index["linear1"]], ckpt.params)
    restore(fresh, ckpt)
    for old, new in zip(session.contexts, fresh.contexts, strict=True):
        assert (old.version, old.n_grads, old.grad_keys) == (new.version, new.n_grads, new.grad_keys)
        assert old.opt_state.keys() == new.opt_state.keys()
        for k in old.opt_state:
            assert np.array_equal(old.opt_state[k], new.opt_state[k])
        if old.n_grads:
            for k in old.grads:
                assert np.array_equal(old.grads[k], new.grads[k])
    assert fresh.controller.epoch == 0 and fresh.history[0].val_loss == result.history[0].val_loss


def test_a_checkpoint_that_does_not_fit_lists_every_mismatch_and_changes_nothing(digits, tmp_path):
    path = fit(mlp(), digits, mode="sync", epochs=1).save_checkpoint(tmp_path / "c.npz")
    other = models.mlp(input_width=64, hidden=24)  # every hidden Linear changes shape
    before = json.dumps(graph_differences(other, other))
    params_before = other.init_params(0)
    with pytest.raises(CheckpointError) as err:
        fit(other, digits, mode="sync", epochs=2, resume=path)
    problems = err.value.problems
    assert any("linear1" in p and "out_features" in p for p in problems)
    assert any("linear2" in p and "in_features" in p for p in problems)
    assert len(problems) >= 4  # one line per differing setting, not just the first
    assert json.dumps(graph_differences(other, other)) == before
    assert_same_params(other.init_params(0), params_before)


def test_other_data_other_optimizer_and_no_epochs_left_are_all_listed(digits, tmp_path):
    path = fit(mlp(), digits, mode="sync", epochs=2).save_checkpoint(tmp_path / "c.npz")
    other_data = digits_dataset(batch_size=25)
    with pytest.raises(CheckpointError) as err:
        fit(mlp(), other_data, mode="sync", epochs=2, optimizer="sgd", resume=path)
    text = str(err.value)
    assert "dataset: train has" in text and "optimizer=" in text and "epochs=2" in text


def test_capture_refuses_a_session_with_keys_in_flight(digits):
    session = Session(mlp(), digits, RunConfig(workers=1, mode="amp"))
    session.carry_out(session.controller.start(), _Sink())
    with pytest.raises(CheckpointError, match="in flight"):
        capture(session)


class _Sink:
    ledger = Credits()

    def admit(self, infos) -> list[bool]:
        return [True] * len(infos)

    def inject(self, msgs) -> None:
        pass

    def now(self) -> float:
        return 0.0


def test_periodic_checkpoints_and_the_final_one(digits, tmp_path):
    seen: list[int] = []
    path = tmp_path / "every.npz"

    def look(stats) -> None:
        if path.exists():
            seen.append(load_checkpoint(path).epochs_completed)

    fit(mlp(), digits, mode="sync", epochs=3, checkpoint=path, checkpoint_every=2, on_epoch=look)
    assert seen == [2]  # saved after epoch 2 (the callback runs before the save, so epoch 3 sees it)
    assert load_checkpoint(path).epochs_completed == 3  # and when the run ended


def test_the_file_is_an_npz_with_a_manifest_and_plain_arrays(digits, tmp_path):
    path = fit(mlp(), digits, mode="sync", epochs=1).save_checkpoint(tmp_path / "c.npz")
    with np.load(path, allow_pickle=False) as npz:
        assert "params/linear1/W" in npz.files
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
    assert manifest["format"] == "amp_notebook.checkpoint" and manifest["config"]["mode"] == "sync"


def test_a_save_that_fails_midway_leaves_the_previous_checkpoint(digits, tmp_path, monkeypatch):
    result = fit(mlp(), digits, mode="sync", epochs=1)
    path = result.save_checkpoint(tmp_path / "c.npz", meta={"generation": 1})
    calls = [0]
    real = np.lib.format.write_array

    def failing(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 3:
            raise OSError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoint_file.np.lib.format, "write_array", failing)
    with pytest.raises(OSError, match="disk full"):
        result.save_checkpoint(path, meta={"generation": 2})
    assert load_checkpoint(path).meta == {"generation": 1}
    assert [p.name for p in Path(tmp_path).iterdir()] == ["c.npz"]  # no temporary file left


def test_checkpoints_of_failed_runs_are_refused(digits):
    first = digits.train[0]
    target = first.inputs["target"].copy()
    target[0] = 99  # not a class: the loss node raises a NodeError
    bad = Dataset(digits.name, [Batch({**first.inputs, "target": target}, first.size)], [])
    run = train(mlp(), bad, mode="amp", epochs=1, background=True, **SETTINGS)
    with pytest.raises(NodeError):
        run.wait()
    with pytest.raises(RuntimeError, match="failed"):
        run.checkpoint()


def test_a_malicious_pickle_is_refused_and_nothing_runs(digits, tmp_path):
    from amp_notebook.testing.fuzz_checkpoint import object_npy, pickle_payload, read_members, write_members

    sentinel = tmp_path / "SENTINEL"
    good = fit(mlp(), digits, mode="sync", epochs=1).save_checkpoint(tmp_path / "good.npz").read_bytes()
    whole_pickle = tmp_path / "pickle.npz"
    whole_pickle.write_bytes(pickle_payload(sentinel))
    members = read_members(good)
    object_member = tmp_path / "object.npz"
    object_member.write_bytes(write_members([(n, object_npy(sentinel) if "linear1/W" in n else d, c)
                                             for n, d, c in members]))  # fmt: skip
    pickled_manifest = tmp_path / "manifest.npz"
    pickled_manifest.write_bytes(write_members([(n, pickle_payload(sentinel) if n == "manifest.json" else d, c)
                                                for n, d, c in members]))  # fmt: skip
    for path, reason in ((whole_pickle, "pickle, which is refused"), (object_member, "dtype '|O' refused"),
                         (pickled_manifest, "not valid JSON")):  # fmt: skip
        with pytest.raises(CheckpointError, match=reason):
            load_checkpoint(path)
    assert not sentinel.exists()  # unpickling any of them would have created it


@pytest.mark.slow  # 100 mutated checkpoints, a few seconds; the 1000-case run is a command
def test_fuzzed_checkpoints_give_only_checkpoint_errors():
    from amp_notebook.testing.fuzz_checkpoint import campaign

    report = campaign(100, seed=3)
    assert report.only_amp_errors, report.failures
