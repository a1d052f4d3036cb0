"""The watchdog: a run that can make no more progress stops with a diagnosis, on threads and in the simulator.

Faults come from the fault-injection harness (``amp_notebook.testing.faults``). No test asserts how long
anything took; ``Run.wait(timeout=...)`` only guards against a hang.
"""

from __future__ import annotations

import time

import pytest

from amp_notebook import models
from amp_notebook.ir.message import BWD
from amp_notebook.runtime.backends.simulated import SimulatedBackend
from amp_notebook.runtime.backends.threads import ThreadedBackend
from amp_notebook.runtime.session import RunConfig, Session
from amp_notebook.runtime.train import train
from amp_notebook.runtime.watchdog import StuckRunError, Watchdog
from amp_notebook.testing import faults, runs
from amp_notebook.testing.faults import Fault, Setup
from tests.conftest import digits_dataset

HANG_GUARD_S = 30.0


@pytest.fixture(autouse=True)
def quick_watchdog(monkeypatch):
    monkeypatch.setattr(runs, "WATCHDOG_S", 0.3)


def stuck_error(setup: Setup, fault: Fault) -> StuckRunError:
    run, _ = faults.start(setup, faults.installer(fault))
    with pytest.raises(StuckRunError) as err:
        run.wait(timeout=HANG_GUARD_S)
    assert fault.fired_at is not None
    return err.value


def test_a_dropped_backward_message_is_diagnosed():
    error = stuck_error(Setup("mlp", "amp"), Fault("drop", k=3, node="linear3", phase="bwd"))
    d = error.diagnosis
    assert "no message handled" in d.reason and "a message was lost" in d.conclusion
    assert "Linear 'linear3' still waits" in d.conclusion  # the node the lost gradient was for
    (key,) = d.keys_in_flight
    assert d.queue_depth == [0, 0] and d.workers == ["idle", "idle"]
    holders = {h.node for h in d.held if h.key == key}
    assert {"linear1", "linear2", "linear3"} <= holders  # each waits for the backward that never came
    assert f"holds key {key}: waits for its backward message" in str(error)


def test_a_dropped_forward_message_leaves_a_join_waiting():
    error = stuck_error(Setup("mlp", "sync"), Fault("drop", k=2, node="target", phase="fwd"))
    waiting = [h for h in error.diagnosis.held if h.node == "loss"]
    assert waiting and waiting[0].what == "join waits for its other inputs"


def test_the_simulator_that_runs_out_of_events_gives_the_same_diagnosis():
    session = Session(models.mlp(input_width=64, hidden=16), digits_dataset(batch_size=50), RunConfig(workers=2))
    backend = SimulatedBackend(session)
    real_from, target, dropped = backend._deliver_from, session.plan.index["linear3"], []

    def deliver_from(w):
        real = real_from(w)

        def deliver(msgs, at):
            keep = [m for m in msgs if dropped or not (m.node == target and m.direction == BWD and m.key == 2)]
            dropped.extend(m for m in msgs if m not in keep)
            real(keep, at)

        return deliver

    backend._deliver_from = deliver_from
    with pytest.raises(StuckRunError, match="ran out of events") as err:
        backend.run()
    d = err.value.diagnosis
    assert list(d.keys_in_flight) == [2] and "Linear 'linear3' still waits for key 2" in d.conclusion


def test_a_worker_thread_that_ends_without_a_word_stops_the_run_as_a_lost_worker():
    from amp_notebook.runtime.restart import WorkerLostError

    fault = Fault("vanish", k=5, worker=1)
    run, _ = faults.start(Setup("mlp", "amp"), faults.installer(fault))
    with pytest.raises(WorkerLostError) as err:  # max_failures=N would restart the run instead
        run.wait(timeout=HANG_GUARD_S)
    assert fault.fired_at is not None
    assert err.value.worker == 1 and "its thread ended while the run was going" in str(err.value)


def test_status_carries_the_diagnosis():
    run, _ = faults.start(Setup("mlp", "sync"), faults.installer(Fault("drop", k=2, node="linear2", phase="fwd")))
    with pytest.raises(StuckRunError):
        run.wait(timeout=HANG_GUARD_S)
    status = run.status
    assert status["state"] == "failed" and status["error"].startswith("StuckRunError")
    assert status["diagnosis"]["keys_in_flight"] and status["diagnosis"]["queue_depth"] == [0, 0]


def test_a_paused_run_does_not_trip_the_watchdog():
    run = train(models.mlp(input_width=64, hidden=16), digits_dataset(batch_size=50), epochs=10_000, validate=False,
                watchdog_s=0.2, background=True)  # fmt: skip
    try:
        run.pause()
        time.sleep(0.6)  # three watchdog periods with forward work held on purpose
        assert run.state == "paused" and run.error is None
    finally:
        run.stop()


def test_watchdog_none_disables_it_and_bad_values_are_refused():
    session = Session(models.mlp(input_width=64, hidden=16), digits_dataset(batch_size=50), RunConfig(watchdog_s=None))
    assert ThreadedBackend(session).watchdog is None
    for bad in (0, -1.0, "10", True):
        with pytest.raises(ValueError, match="watchdog_s"):
            train(models.mlp(input_width=64, hidden=16), digits_dataset(batch_size=50), watchdog_s=bad)


def test_the_watchdog_counts_idle_time_only_with_messages_in_flight_and_not_paused():
    w = Watchdog(1.0)
    assert not w.stuck(progress=5, in_flight=True, paused=False, now=0.0)
    assert not w.stuck(5, True, False, 0.9)
    assert w.stuck(5, True, False, 1.0)
    assert not w.stuck(6, True, False, 1.5)  # progress resets the clock
    assert not w.stuck(6, False, False, 5.0)  # nothing in flight: an idle run is not stuck
    assert not w.stuck(6, True, True, 10.0)  # paused: forward work is held on purpose
    assert not w.stuck(6, True, False, 10.5) and w.stuck(6, True, False, 11.0)


@pytest.mark.slow  # an op that sleeps longer than the watchdog: about a second
def test_an_op_that_does_not_return_is_reported_as_busy():
    from amp_notebook.ir.ops import Linear

    class Slow(Linear):
        def forward(self, ctx, port, x, state):
            if state["key"] == 3:
                time.sleep(1.0)
            return super().forward(ctx, port, x, state)

    graph = models.mlp(input_width=64, hidden=16)
    node = graph.nodes["linear2"]
    node.op.__class__ = Slow
    with pytest.raises(StuckRunError) as err:
        train(graph, digits_dataset(batch_size=50), mode="sync", watchdog_s=0.3)
    assert any(w.startswith("inside Slow 'linear2' fwd for key 3") for w in err.value.diagnosis.workers)
    assert "still inside one step" in err.value.diagnosis.conclusion
