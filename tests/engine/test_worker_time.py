"""Where a native worker's time went (``TrainResult.worker_time``): counted by the worker loops themselves.

The ops' share is the same clock reads as the trace rows, so it equals the rows' spans; the messages and
bundles equal the rows' counts; waiting never exceeds the loop's life, nor the CPU time the life awake; a
worker with nothing to do waits, sleeps and burns little CPU; a restarted run keeps the times of the engine
it replaced; other engines report none.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.data import Dataset
from amp_notebook.ir.message import PHASES
from amp_notebook.runtime.train import train
from tests.conftest import digits_dataset

UPDATE = PHASES.index("update")


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return digits_dataset(batch_size=20)


def test_the_ops_share_is_the_trace_rows_and_the_parts_add_up_to_the_loop(digits) -> None:
    graph = models.mlp(input_width=64, hidden=32, layers=3)
    r = train(graph, digits, engine="native", workers=2, mode="amp", max_active_keys=8, epochs=2,
              trace=True, trace_capacity=None, optimizer={"name": "sgd", "lr": 0.01})  # fmt: skip
    times = r.worker_time
    assert times is not None and [t["worker"] for t in times] == [0, 1]
    ev = r.trace.events()
    worker, phase = np.asarray(ev["worker"]), np.asarray(ev["phase"])
    span = np.asarray(ev["end"]) - np.asarray(ev["start"])
    for t in times:
        mine = worker == t["worker"]
        assert t["ops_s"] == pytest.approx(float(span[mine].sum()), rel=1e-9, abs=1e-12)
        assert t["bundles"] == int((mine & (phase != UPDATE)).sum()) > 0
        steps = mine & (phase != UPDATE)
        assert t["messages"] == int(np.asarray(ev["messages"])[steps].sum())
        assert t["ops_s"] > 0.0 and t["waiting_s"] > 0.0 and 0.0 <= t["asleep_s"] <= t["waiting_s"]
        assert t["ops_s"] + t["waiting_s"] <= t["loop_s"] * (1 + 1e-9)
        assert t["engine_s"] == pytest.approx(t["loop_s"] - t["ops_s"] - t["waiting_s"])
        # the thread's CPU time: some, at most its life awake (the clocks differ in resolution: 1 ms slack)
        assert 0.0 < t["cpu_s"] <= t["loop_s"] - t["asleep_s"] + 1e-3
        assert t["no_core_s"] == pytest.approx(max(0.0, t["loop_s"] - t["asleep_s"] - t["cpu_s"]))
    assert sum(t["messages"] for t in times) == sum(int(n) for n in np.asarray(ev["messages"])[phase != UPDATE])
    assert r.summary()["worker_time"] == times


def test_a_worker_without_a_node_only_waits_and_falls_asleep(digits) -> None:
    graph = models.mlp(input_width=64, hidden=16, layers=1)  # 1 heavy node for 2 workers: one gets none
    # 30 epochs, about 30 ms: an epoch of this graph takes about 1 ms, and a run of 2 could end before a loaded
    # machine gave the idle worker the 25 us of spinning that precede its first sleep
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        r = train(graph, digits, engine="native", workers=2, epochs=30, optimizer={"name": "sgd", "lr": 0.01})
    idle = [t for t in r.worker_time if t["messages"] == 0]
    assert len(idle) == 1
    t = idle[0]
    assert t["ops_s"] == 0.0 and t["bundles"] == 0 and t["sleeps"] >= 1
    assert t["waiting_s"] >= 0.9 * t["loop_s"] and t["asleep_s"] >= 0.5 * t["loop_s"]
    assert t["cpu_s"] <= 0.5 * t["loop_s"]  # asleep, it burns no CPU


def test_a_restarted_run_keeps_the_times_of_the_engine_it_replaced() -> None:
    from amp_notebook.testing.faults import Fault
    from amp_notebook.testing.restarts import WAIT_S, _start
    from amp_notebook.testing.runs import Setup

    setup = Setup("mlp", "sync")
    clean, _ = _start(setup, "native", None)
    clean_result = clean.wait(timeout=WAIT_S)
    fault = Fault("glue", k=3, worker=1)
    lossy, _ = _start(setup, "native", fault)
    result = lossy.wait(timeout=WAIT_S)
    assert fault.fired_at is not None and len(result.restarts) == 1, (fault, result.restarts)
    # the new engine handles only what follows the checkpoint; the lost engine's messages count too, and the
    # work redone after the checkpoint makes the sum larger than a clean run's
    handled = [t["messages"] for t in result.worker_time]
    clean_handled = [t["messages"] for t in clean_result.worker_time]
    assert sum(handled) > sum(clean_handled), (handled, clean_handled, result.restarts)


def test_a_report_of_a_running_run_counts_no_cpu_time_yet(digits) -> None:
    from amp_notebook.runtime.result import worker_time_text
    from amp_notebook.runtime.run import Run

    run = train(models.mlp(input_width=64, hidden=16), digits, background=True, workers=2, epochs=10_000,
                validate=False, engine="native", optimizer={"name": "sgd", "lr": 0.02})  # fmt: skip
    assert isinstance(run, Run)
    try:
        deadline = time.monotonic() + 20.0
        while run.status["keys_done"] < 20:
            assert time.monotonic() < deadline, "the run made no progress"
            time.sleep(0.005)
        so_far = run.report().result.worker_time
        assert so_far is not None and all(t["ops_s"] > 0 for t in so_far)
        live = run.status["worker_time"]  # the same count, in the status a dashboard reads
        assert [t["worker"] for t in live] == [0, 1] and all(t["cpu_s"] is None for t in live)
        assert all(t["ops_s"] >= s["ops_s"] and t["loop_s"] >= s["loop_s"] for t, s in zip(live, so_far, strict=True))
        # a loop's CPU time is read as it ends: unknown while it runs, and the text leaves it out
        assert all(t["cpu_s"] is None and t["no_core_s"] is None for t in so_far)
        assert "no core" not in worker_time_text(so_far)
    finally:
        run.stop()
    ended = run.wait().worker_time
    assert all(t["cpu_s"] > 0 and t["no_core_s"] is not None for t in ended)
    assert "no core" in worker_time_text(ended)
    assert run.status["worker_time"] == ended


def test_other_engines_report_no_worker_time(digits) -> None:
    data = Dataset("d", digits.train[:4], [], 10)
    graph = models.mlp(input_width=64, hidden=16, layers=1)
    python = train(graph, data, engine="python", workers=1, epochs=1)
    simulated = train(graph, data, engine="native", backend="simulated", workers=1, epochs=1)
    assert python.worker_time is None and python.summary()["worker_time"] is None
    assert simulated.worker_time is None
    run = train(graph, data, engine="python", workers=1, epochs=1, background=True)
    run.wait()
    assert run.status["worker_time"] is None
