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


# ------------------------------------------------------------------ replicas validate the averaged model


def with_val(n_train: int, n_val: int) -> Dataset:
    batches = [Batch({"x": np.full((1, 1), float(i))}, 1) for i in range(n_train + n_val)]
    return Dataset("toy", batches[:n_train], batches[n_train:])


def test_validation_waits_for_the_training_keys_and_an_average_once_per_epoch() -> None:
    c = Controller(with_val(3, 2), "amp", max_active_keys=2, epochs=2, shuffle=False, average_before_validation=True)
    assert admitted(c.start()) == [0, 1]
    assert admitted(c.on_key_complete(0)) == [2]  # the last training key
    assert c.on_key_complete(1) == []  # the next key validates: the training keys drain first
    assert c.resume() == [] and c.set_max_active_keys(3) == []
    assert c.on_key_complete(2) == [Average()]
    assert admitted(c.on_average_complete()) == [3, 4]  # the validation keys, all at once (one average per epoch)
    assert c.on_key_complete(3) == []
    assert isinstance(c.on_key_complete(4)[-1], EpochEnd)
    assert admitted(c.on_epoch_end()) == [5, 6, 7]  # the next epoch's training keys, max_active_keys 3
    for key in (5, 6):
        assert c.on_key_complete(key) == []
    assert c.on_key_complete(7) == [Average()]  # and again before that epoch's validation


def test_without_replicas_validation_runs_alongside_training() -> None:
    c = Controller(with_val(3, 2), "amp", max_active_keys=2, epochs=1, shuffle=False)
    assert admitted(c.start()) == [0, 1]
    assert admitted(c.on_key_complete(0)) == [2]
    assert admitted(c.on_key_complete(1)) == [3]  # a validation key while training key 2 is in flight


def test_a_position_inside_validation_has_averaged_already() -> None:
    def restored(pending: list[int]) -> Controller:
        """A fresh controller put at a checkpoint whose not-yet-admitted keys are ``pending`` (training keys
        0-2, validation keys 3 and 4)."""
        first = Controller(with_val(3, 2), "amp", max_active_keys=2, epochs=1, shuffle=False)
        first.start()
        infos = {info.key: info for info in first.remaining()}
        c = Controller(with_val(3, 2), "amp", max_active_keys=2, epochs=1, shuffle=False,
                       average_before_validation=True)  # fmt: skip
        c.restore(0, [infos[k] for k in pending], 5, 0, first.rng.bit_generator.state)
        return c

    assert restored([3, 4]).start() == [Average()]  # no validation key ran yet: the average may not have either
    assert admitted(restored([4]).start()) == [4]  # key 3 validated already, after the average


def test_the_epoch_end_leaves_equal_replicas_as_they_are() -> None:
    from amp_notebook.optim import average_parameters

    class Ctx:
        def __init__(self, w: np.ndarray) -> None:
            self.params = {"W": w}
            self.opt_state: dict = {}

    value = np.array([0.8132702112197876, 0.5], dtype=np.float32)
    assert np.mean([value] * 3, axis=0)[0] != value[0]  # the float mean of three equal values can round away
    ctxs = [Ctx(value.copy()) for _ in range(3)]
    average_parameters(ctxs)
    assert all(c.params["W"].tobytes() == value.tobytes() for c in ctxs)
    changed = value.copy()
    changed[1] = 0.25
    ctxs[0].params["W"][...] = changed
    average_parameters(ctxs)
    expected = np.mean([changed, value, value], axis=0)
    assert all(c.params["W"].tobytes() == expected.tobytes() for c in ctxs)


def test_replicas_average_their_optimizer_memory_too() -> None:
    from amp_notebook.optim import average_parameters

    rng = np.random.default_rng(0)

    class Ctx:
        def __init__(self, t: int) -> None:
            self.params = {"W": rng.standard_normal(3), "b": rng.standard_normal(1)}
            self.opt_state = {"t": t, **{f"{k}{s}": rng.standard_normal(p.shape) for k, p in self.params.items()
                                         for s in (".m", ".v", ".scratch")}}  # fmt: skip

    ctxs = [Ctx(3), Ctx(5), Ctx(8)]
    del ctxs[2].opt_state["b.m"]  # as if this replica had no memory of b yet: it counts as zeros
    before = [{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in c.opt_state.items()} for c in ctxs]
    held = [dict(c.opt_state) for c in ctxs]
    average_parameters(ctxs)
    for key in ("W.m", "W.v", "b.v"):
        mean = np.mean([b[key] for b in before], axis=0)
        for c, h in zip(ctxs, held, strict=True):
            assert c.opt_state[key].tobytes() == mean.tobytes() and c.opt_state[key] is h[key]  # in place
    for key in ("W.scratch", "b.scratch", "t"):  # scratch space and Adam's step count: each replica's own
        assert all(np.array_equal(c.opt_state[key], b[key]) for c, b in zip(ctxs, before, strict=True))
    mean = np.mean([before[0]["b.m"], before[1]["b.m"], np.zeros(1)], axis=0)
    assert all(c.opt_state["b.m"].tobytes() == mean.tobytes() for c in ctxs)
    velocity = [Ctx(1) for _ in range(2)]
    for c in velocity:
        c.opt_state = {"W": rng.standard_normal(3)}  # momentum's velocity: keyed by the parameter's name
    expected = np.mean([c.opt_state["W"] for c in velocity], axis=0)
    average_parameters(velocity)
    assert all(c.opt_state["W"].tobytes() == expected.tobytes() for c in velocity)


def test_a_replica_that_never_updated_takes_the_mean_on_every_engine() -> None:
    """Three replicas and two keys an epoch, numbered on across epochs: the first epoch trains replicas 0
    and 1 only. At its end replica 2 holds no Adam memory on the Python engine (made at a first step) and
    zeros on the native engine (made with the engine); both count it as zeros and hand it the mean, so in
    the second epoch (keys 2 and 3: replicas 2 and 0) every engine gives the interpreter's parameters."""
    from amp_notebook.ir.interpret import Interpreter
    from amp_notebook.runtime.reference import train_reference

    data = list_reduction_dataset(n_train=200, n_val=0, seed=0)
    keys = Dataset(data.name, data.train[:2], [], data.num_classes, data.meta)
    graph = rnn(replicas=3, hidden=8)
    start = graph.init_params(1, np.float64)
    opt = {"name": "adam", "lr": 1e-2}
    interp = Interpreter(graph, params=start, dtype=np.float64, optimizer=opt)
    train_reference(interp, keys, epochs=2, seed=1, shuffle=False, validate=False)
    expected = interp.params()
    assert not np.array_equal(expected["step2"]["W"], start["step2"]["W"])
    for backend, engine in ENGINES:
        config = RunConfig(workers=2, mode="sync", dtype="float64", backend=backend, engine=engine, seed=1,
                           epochs=2, validate=False, shuffle=False, optimizer=opt)  # fmt: skip
        session, _ = build_session(graph, keys, config, params=start)
        backend_for(session).run()
        params = session.params()
        for node, arrays in expected.items():
            for k, v in arrays.items():
                np.testing.assert_allclose(params[node][k], v, rtol=1e-12, atol=1e-14, err_msg=f"{engine} {node}.{k}")


@pytest.mark.parametrize(("backend", "engine"), ENGINES)
def test_replicas_end_a_run_as_one_learner(backend: str, engine: str) -> None:
    """Adam's moments of the replicas are averaged with their parameters (each replica saw other keys), so
    after a run's last epoch end the copies hold one state, parameters and moments alike."""
    data = list_reduction_dataset(n_train=200, n_val=0, seed=0)
    config = RunConfig(workers=2, mode="amp", max_active_keys=4, dtype="float64", backend=backend, engine=engine,
                       seed=1, epochs=2, validate=False, optimizer={"name": "adam", "lr": 1e-3})  # fmt: skip
    session, _ = build_session(rnn(replicas=2, hidden=16), data, config)
    backend_for(session).run()
    first, second = (session.contexts[session.plan.index[n]] for n in ("step0", "step1"))
    moments = [k for k in first.opt_state if k.endswith((".m", ".v"))]
    assert sorted(moments) == ["W.m", "W.v", "b.m", "b.v"]
    for k in moments:
        assert np.any(first.opt_state[k] != 0) and first.opt_state[k].tobytes() == second.opt_state[k].tobytes(), k
    assert all(first.params[k].tobytes() == second.params[k].tobytes() for k in first.params)


@pytest.mark.parametrize(("backend", "engine"), ENGINES)
def test_a_replicated_run_validates_the_model_it_hands_over(backend: str, engine: str) -> None:
    from amp_notebook.ir.interpret import Interpreter
    from amp_notebook.runtime.session import EpochStats

    data = list_reduction_dataset(n_train=300, n_val=60, seed=0)
    graph = rnn(replicas=2, hidden=16)
    config = RunConfig(workers=2, mode="amp", max_active_keys=4, dtype="float64", backend=backend, engine=engine,
                       seed=1, optimizer={"name": "sgd", "lr": 0.05})  # fmt: skip
    session, _ = build_session(graph, data, config)
    backend_for(session).run()
    final = session.params()
    assert all(np.array_equal(final["step0"][k], final["step1"][k]) for k in final["step0"])
    # the validation keys, each on the replica its key picks, with the parameters the run ended with
    interpreter = Interpreter(graph, params=final, dtype=np.float64)
    stats = EpochStats(0)
    first_val = len(data.train)  # keys are numbered in admission order: an epoch's training keys, then its validation
    for i, batch in enumerate(data.val):
        for report in interpreter.run_key(batch, key=first_val + i, train=False):
            stats.add(False, report)
    stats.finish(0.0)
    run = session.history[-1]
    assert run.val_instances == stats.val_instances
    assert run.val_loss == pytest.approx(stats.val_loss, rel=1e-12)
    assert run.val_accuracy == stats.val_accuracy
    assert session.replica_averages == 1  # the one before validation (the epoch's end found them equal)
