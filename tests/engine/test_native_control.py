"""A native run behaves as a Python one from the outside: errors, numerics, live knobs, stop, threads, watchdog.

* An error inside a node (a native kernel's, an expression's, a Python op's run through the bridge) reaches
  the caller as the NodeError the Python engine raises for it, word for word where the op's own message is
  Python's; NaN/inf are found where the Python engine finds them.
* A background native run pauses, resumes, takes new knobs (``max_bundle``, ``min_update_frequency``,
  ``max_active_keys``) while it goes, stops within a second, and leaves no native thread behind.
* A run that stops making progress is diagnosed: what each worker is inside, what is queued and in flight.
"""

from __future__ import annotations

import gc
import threading
import time
import warnings
import weakref
from typing import Any

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.data import Batch, Dataset
from amp_notebook.engine import assemble as assemble_module
from amp_notebook.ir.graph import Graph, Ref
from amp_notebook.ir.message import State
from amp_notebook.ir.ops import Identity, Linear, NodeContext
from amp_notebook.runtime.numerics import NonFiniteError
from amp_notebook.runtime.run import Run
from amp_notebook.runtime.train import train
from amp_notebook.runtime.watchdog import StuckRunError
from amp_notebook.runtime.worker import NodeError
from tests.conftest import digits_dataset, native_threads

DEADLINE_S = 20.0
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value encountered")


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return digits_dataset(batch_size=20)


class Refuses(Identity):
    """A user's op (no native kernel: it runs through the bridge) that raises on one key."""

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Any:
        if state["key"] == 5:
            raise ValueError(f"refusing key {state['key']}")
        return [("out", x, state)]


class Sleeps(Identity):
    """A user's op that takes its time on one key (a stuck step, as the watchdog sees it)."""

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Any:
        if state["key"] == 3:
            time.sleep(1.5)
        return [("out", x, state)]


def mlp_with(op: Identity, name: str = "custom") -> Graph:
    g = Graph("mlp_custom")
    h = g.relu(g.linear(g.input("x", width=64), 16, name="linear1"))
    h = Ref(g.add_node(op, [h], name=name).name)
    g.softmax_cross_entropy(g.linear(h, 10, name="linear2"), g.input("target", dtype="int"), name="loss")
    return g


def both_engines(fn: Any) -> dict[str, BaseException]:
    errors = {}
    for engine in ("python", "native"):
        with pytest.raises(Exception) as info:
            fn(engine)
        errors[engine] = info.value
    return errors


def test_a_python_op_that_raises_in_a_native_run_is_the_same_node_error(digits):
    # one message per step on both engines: a bundle's error names its keys, and bundles form by timing
    errors = both_engines(
        lambda engine: train(mlp_with(Refuses()), digits, engine=engine, workers=2, epochs=1, max_bundle=1)
    )
    native, python = errors["native"], errors["python"]
    assert isinstance(native, NodeError) and type(native) is type(python)
    assert (native.node, native.kind, native.direction, native.port) == ("custom", "Refuses", "fwd", "in")
    assert str(native) == str(python)
    assert isinstance(native.__cause__, ValueError) and str(native.__cause__) == "refusing key 5"


@pytest.mark.parametrize("predicate", ["key < missing_field", "1 // (key - key) > 0"])
def test_an_expression_that_fails_natively_raises_what_python_raises(digits, predicate):
    def run(engine: str) -> None:
        g = Graph("mlp_cond")
        h = g.relu(g.linear(g.input("x", width=64), 16, name="linear1"))
        yes, no = g.cond(g.linear(h, 10, name="linear2"), predicate, name="check")
        g.softmax_cross_entropy(g.phi(yes, no, name="merge"), g.input("target", dtype="int"), name="loss")
        train(g, digits, engine=engine, workers=1, mode="sync", epochs=1)

    errors = both_engines(run)
    assert str(errors["native"]) == str(errors["python"])
    assert type(errors["native"].__cause__) is type(errors["python"].__cause__)


def test_a_native_kernel_error_names_the_node_and_port(digits):
    bad = Dataset("bad", [Batch({"x": b.inputs["x"], "target": b.inputs["target"] + 10}, b.size) for b in digits.train],
                  [], 10)  # class ids beyond the logits: the loss refuses them  # fmt: skip
    errors = both_engines(lambda engine: train(models.mlp(input_width=64, hidden=16), bad, engine=engine, epochs=1))
    native = errors["native"]
    assert isinstance(native, NodeError) and native.node == "loss" and native.direction == "fwd"
    assert "class ids must lie in [0, 10)" in str(native) and "class ids" in str(errors["python"])


@pytest.mark.parametrize("on_nonfinite", ["raise", "skip"])
def test_nan_losses_and_gradients_are_found_as_python_finds_them(digits, on_nonfinite):
    # finite inputs 1e300 times too large on key 4: plain SGD then takes weights near 1e298, and the next keys'
    # logits overflow float64 by hundreds of orders of magnitude (certain on any BLAS)
    def bad_data() -> Dataset:
        keys = [Batch({"x": b.inputs["x"] * (1e300 if i == 4 else 1.0), "target": b.inputs["target"]}, b.size)
                for i, b in enumerate(digits.train[:12])]  # fmt: skip
        return Dataset("overflow", keys, [], 10)

    results = {}
    for engine in ("python", "native"):
        try:
            r = train(models.mlp(input_width=64, hidden=16), bad_data(), engine=engine, workers=2, mode="sync",
                      epochs=1, dtype="float64", on_nonfinite=on_nonfinite,
                      optimizer={"name": "sgd", "lr": 0.1})  # fmt: skip
            results[engine] = r.nonfinite_skipped
        except NonFiniteError as exc:
            results[engine] = str(exc)
    assert results["native"] == results["python"]
    assert (isinstance(results["native"], str)) == (on_nonfinite == "raise")


def background(digits: Dataset, **options: Any) -> Run:
    settings = {"workers": 2, "mode": "amp", "max_active_keys": 4, "epochs": 10_000, "validate": False,
                "engine": "native", "optimizer": {"name": "sgd", "lr": 0.02}, **options}  # fmt: skip
    run = train(models.mlp(input_width=64, hidden=16), digits, background=True, **settings)
    assert isinstance(run, Run)
    return run


def until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for: {what}"
        time.sleep(0.005)


def test_a_background_native_run_is_live_and_stops_within_a_second(digits):
    run = background(digits)
    try:
        until(lambda: run.status["keys_done"] > 20, "keys done")
        assert len(native_threads()) == 2
        seen = len(run.trace.events()["end"])
        until(lambda: len(run.trace.events()["end"]) > seen, "the live trace to grow")
        run.pause()
        assert run.state == "paused"
        run.resume()
        run.set_max_bundle(None, 8)
        run.set_max_active_keys(16)
        until(lambda: int(run.trace.events()["messages"].max()) > 1, "bundles after max_bundle 8")
        updates_before = int(np.sum(run.trace.events()["phase"] == 2))
        run.set_min_update_frequency(None, 10**9)  # no node sees that many gradients in this test
        time.sleep(0.3)
        frozen = int(np.sum(run.trace.events()["phase"] == 2))
        time.sleep(0.3)
        assert int(np.sum(run.trace.events()["phase"] == 2)) - frozen <= 8  # a few that were due at the change
        assert frozen >= updates_before
    finally:
        t0 = time.perf_counter()
        run.stop()
        stopped_s = time.perf_counter() - t0
    assert run.state == "finished" and stopped_s < 1.0, stopped_s
    assert native_threads() == []
    result = run.wait()
    assert result.engine == "native" and result.train_instances > 0


def test_a_failing_run_joins_its_native_threads(digits):
    before = threading.active_count()
    with pytest.raises(NodeError):
        train(mlp_with(Refuses()), digits, engine="native", workers=3, epochs=1)
    assert native_threads() == [] and threading.active_count() == before


def test_the_watchdog_says_what_a_native_worker_is_inside(digits):
    with pytest.raises(StuckRunError) as info:
        train(
            mlp_with(Sleeps(), "slow"), digits, engine="native", workers=2, epochs=1, watchdog_s=0.4, max_bundle=1
        )  # one key per step, so the worker is inside key 3 itself
    diagnosis = info.value.diagnosis
    assert any(w.startswith("inside Sleeps 'slow' fwd for key 3") for w in diagnosis.workers), diagnosis.workers
    assert 3 in diagnosis.keys_in_flight
    assert len(diagnosis.queue_depth) == 2
    assert native_threads() == []


def test_the_summary_says_which_nodes_went_through_python(digits):
    result = train(mlp_with(Identity(), "plain"), digits, engine="native", epochs=1, workers=1)
    assert result.summary()["engine_used"] == "native" and result.python_nodes == ()
    result = train(mlp_with(Refuses(), "mine"), Dataset("d", digits.train[:3], [], 10), engine="native", epochs=1)
    assert result.python_nodes == ("mine",)


def test_the_recorded_queue_depth_never_dips_below_zero() -> None:
    # Every hop of the no-op chain crosses to the other worker, which may drain and take a posted message at
    # once: the poster must count it before it becomes visible. Counted after, 6 such runs recorded 118
    # negative depths here.
    from amp_notebook.bench.common import constant_dataset
    from amp_notebook.runtime.costs import noop_chain

    g, data = noop_chain(workers=2), constant_dataset(3000, 1)
    for _ in range(4):
        r = train(g, data, workers=2, engine="native", mode="amp", max_active_keys=16, validate=False,
                  max_bundle=1, optimizer={"name": "sgd", "lr": 0.01})  # fmt: skip
        depth = np.asarray(r.trace.events()["depth"])
        assert len(depth) > 100_000 and depth.min() >= 0, f"{int((depth < 0).sum())} negative depths"


@pytest.mark.parametrize("spin_us", [(0.0, 0.0), (25.0, 25.0), (1000.0, 1000.0)])
def test_how_long_an_idle_worker_spins_changes_no_result(digits, monkeypatch, spin_us) -> None:
    """The spin only decides when an idle worker goes to sleep: sleeping at once (every hand-off a wake-up), a
    fixed spin, and the default adaptive one end a sync run on 2 workers at the same parameters, bit for bit."""
    data = Dataset("d", digits.train[:8], digits.val[:2], 10)
    graph = models.mlp(input_width=64, hidden=32, layers=2)
    settings = {"engine": "native", "workers": 2, "mode": "sync", "epochs": 2, "seed": 3, "dtype": "float64",
                "optimizer": {"name": "adam", "lr": 1e-3}}  # fmt: skip
    default = train(graph, data, **settings)
    monkeypatch.setattr(assemble_module, "SPIN_US", spin_us)
    other = train(graph, data, **settings)
    assert set(other.trace.events()["worker"]) == {0, 1} and other.history[-1].train_instances == 160
    assert default.params.keys() == other.params.keys()
    for node, arrays in default.params.items():
        for name, value in arrays.items():
            assert np.array_equal(value, other.params[node][name]), (node, name)


@pytest.mark.parametrize("spin_us", [(400.0, 25.0), (-1.0, 25.0), (25.0, 2e6)])
def test_spin_bounds_out_of_order_or_range_are_refused(digits, monkeypatch, spin_us) -> None:
    monkeypatch.setattr(assemble_module, "SPIN_US", spin_us)
    with pytest.raises(ValueError, match=r"0 <= spin_min_us <= spin_max_us <= 1e6"):
        train(models.mlp(input_width=64, hidden=16), Dataset("d", digits.train[:2], [], 10), engine="native", epochs=1)
    assert native_threads() == []


class MyLinear(Linear):
    """A user's subclass of a native op: it runs through the bridge, and its update runs in Python."""


@pytest.mark.parametrize("backend", ["threads", "simulated"])
def test_a_finished_run_whose_updates_run_in_python_is_collected(digits, backend: str) -> None:
    """The engine holds the Python update, a closure over the session, which holds the backend, which holds the
    engine: the collector must see the engine's side of that cycle, or every such run stays in memory."""
    g = Graph("bridged_update")
    h = g.add_node(MyLinear(64, 10), [g.input("x", width=64)], name="mine")
    g.softmax_cross_entropy(Ref(h.name), g.input("target", dtype="int"), name="loss")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # one heavy node for 2 workers
        result = train(g, digits, engine="native", backend=backend, epochs=1, workers=2)
    assert result.python_nodes == ("mine",)
    session = weakref.ref(result.session)
    del result
    gc.collect()
    assert session() is None
