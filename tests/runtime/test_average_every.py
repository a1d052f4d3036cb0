"""``average_every=N``: replicas also average after every N training keys of an epoch, drained like a flush.

The controller's side is a pure state machine (admission holds, the keys in flight drain, ``Average``, then
admission goes on); a session's side averages the replicas, and every backend and engine gives the same
parameters for the same run in sync mode (float64)."""

from __future__ import annotations

import numpy as np
import pytest

from amp_notebook.data import Batch, Dataset
from amp_notebook.data.list_reduction import list_reduction_dataset
from amp_notebook.engine import available as native_available
from amp_notebook.models.rnn import rnn
from amp_notebook.runtime.config import RunConfig
from amp_notebook.runtime.controller import Admit, Average, Controller, EpochEnd
from amp_notebook.runtime.launch import backend_for, build_session


def toy(n_train: int) -> Dataset:
    return Dataset("toy", [Batch({"x": np.full((1, 1), float(i))}, 1) for i in range(n_train)], [])


def admitted(actions: list) -> list[int]:
    return [a.info.key for a in actions if isinstance(a, Admit)]


def test_average_holds_admission_until_the_keys_in_flight_drain() -> None:
    c = Controller(toy(7), "amp", max_active_keys=2, epochs=1, shuffle=False, validate=False, average_every=3)
    assert admitted(c.start()) == [0, 1]
    assert admitted(c.on_key_complete(0)) == [2]
    assert admitted(c.on_key_complete(1)) == [3]
    assert c.on_key_complete(2) == []  # the third training key: an average is due, admission holds
    assert c.set_max_active_keys(4) == [] and c.resume() == []
    assert c.on_key_complete(3) == [Average()]  # drained: average, once
    assert c.set_max_active_keys(4) == []  # nothing is admitted while the average is under way
    assert admitted(c.on_average_complete()) == [4, 5, 6]
    with pytest.raises(ValueError, match="no average is under way"):
        c.on_average_complete()
    assert c.on_key_complete(4) == [] and admitted(c.on_key_complete(5)) == []  # the 6th: no key left, no average
    assert isinstance(c.on_key_complete(6)[-1], EpochEnd)  # the epoch's end averages anyway


def test_the_count_restarts_each_epoch_and_follows_a_restored_position() -> None:
    c = Controller(toy(4), "sync", max_active_keys=1, epochs=2, shuffle=False, validate=False, average_every=2)
    c.start()
    c.trained_in_epoch = 3
    c.on_epoch_end()
    assert c.trained_in_epoch == 0 and c.epoch == 1
    restored = Controller(toy(4), "amp", max_active_keys=1, epochs=1, shuffle=False, validate=False, average_every=2)
    pending = c.remaining()[1:]  # as if one key of the epoch had completed before a checkpoint
    restored.restore(0, pending, c.next_key, c.next_flush, c.rng.bit_generator.state)
    assert restored.trained_in_epoch == 1


def test_a_stop_cancels_a_due_average() -> None:
    c = Controller(toy(6), "amp", max_active_keys=2, epochs=1, shuffle=False, validate=False, average_every=1)
    c.start()
    assert c.on_key_complete(0) == []  # due, key 1 still in flight
    c.stop()
    assert c.on_key_complete(1)[-1].__class__.__name__ == "Finish"


def session_run(backend: str, engine: str, average_every: int | None) -> tuple[dict, int]:
    data = list_reduction_dataset(n_train=600, n_val=0, seed=0)
    config = RunConfig(workers=2, mode="sync", dtype="float64", backend=backend, engine=engine, validate=False,
                       shuffle=False, average_every=average_every, optimizer={"name": "sgd", "lr": 0.05})  # fmt: skip
    session, _ = build_session(rnn(replicas=2, hidden=16), data, config)
    backend_for(session).run()
    return session.params(), session.replica_averages


ENGINES = [("simulated", "python"), ("threads", "python")] + ([("threads", "native")] if native_available() else [])


def test_every_backend_averages_the_same_way() -> None:
    keys = len(list_reduction_dataset(n_train=600, n_val=0, seed=0).train)
    runs = {(b, e): session_run(b, e, average_every=2) for b, e in ENGINES}
    reference, averages = runs[ENGINES[0]]
    assert averages == (keys - 1) // 2  # after every second key, but not after the last
    for params, count in runs.values():
        assert count == averages
        for node, arrays in reference.items():
            for name, value in arrays.items():
                np.testing.assert_allclose(params[node][name], value, rtol=1e-12, atol=1e-12)
    without, none = session_run("simulated", "python", average_every=None)
    assert none == 0
    assert any(not np.allclose(without[n][k], v) for n, a in reference.items() for k, v in a.items())


def test_ray_refuses_average_every() -> None:
    from amp_notebook.errors import SettingError

    with pytest.raises(SettingError, match="a Ray run averages them at each epoch's end only"):
        RunConfig(backend="ray", average_every=10)
