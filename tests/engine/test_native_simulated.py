"""The simulated backend on the native engine against the Python simulator.

Both run the same algorithm (``runtime/backends/simulated.py``): the same graph, data, seed and cost model give
the same trace (every event row: worker, node, phase, key, depth, start, end), the same makespan and link use,
bit for bit, and parameters equal to the last bits the kernels' sums may differ in. Errors inside a native
simulation surface as the Python simulator raises them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from amp_notebook.errors import SettingError
from amp_notebook.ir.message import State
from amp_notebook.ir.ops import Identity, NodeContext
from amp_notebook.models import zoo
from amp_notebook.runtime.costs import CostModel, CostTable, noop_chain
from amp_notebook.runtime.train import TrainResult, train
from amp_notebook.runtime.worker import NodeError
from tests.conftest import digits_dataset
from tests.engine.test_native_control import Refuses, mlp_with
from tests.engine.test_native_runs import few_keys, relative_error

COSTS = CostModel.tflops_device(message_overhead_s=1e-6, latency_s=1e-6, bandwidth_bits_per_s=10e9)
COLUMNS = ("worker", "node", "phase", "key", "depth", "messages", "start", "end")


def both(graph, data, **settings) -> tuple[TrainResult, TrainResult]:
    settings = {"backend": "simulated", "costs": COSTS, "dtype": "float64", **settings}
    python = train(graph, data, engine="python", **settings)
    native = train(graph, data, engine="native", **settings)
    assert (python.engine, native.engine) == ("python", "native")
    return python, native


def assert_same_run(python: TrainResult, native: TrainResult) -> None:
    a, b = python.trace.events(), native.trace.events()
    assert len(a["end"]) == len(b["end"]) > 0
    for column in COLUMNS:
        assert np.array_equal(np.asarray(a[column]), np.asarray(b[column])), column
    assert native.wall_s == python.wall_s
    stats = {k: v for k, v in native.backend_stats.items() if k not in ("engine", "python_nodes")}
    assert stats == python.backend_stats
    assert relative_error(native.params, python.params) <= 1e-12
    for x, y in zip(native.history, python.history, strict=True):
        assert x.train_loss == pytest.approx(y.train_loss, rel=1e-12)
        assert (x.train_accuracy, x.val_accuracy) == (y.train_accuracy, y.val_accuracy)


@pytest.mark.parametrize("mode", ["amp", "sync"])
@pytest.mark.parametrize("name", list(zoo.ZOO))
def test_every_zoo_model_simulates_alike_on_both_engines(name: str, mode: str) -> None:
    entry = zoo.get(name)
    data = few_keys(entry.dataset("small", seed=0), 12, 4)
    graph = entry.graph(data)
    optimizer = {"name": "sgd", "lr": 1e-4 if name == "ggsnn-regression" else 0.01}
    python, native = both(graph, data, workers=3, mode=mode, epochs=2, seed=1, params=graph.init_params(1, np.float64),
                          optimizer=optimizer, max_active_keys=4, validate=True)  # fmt: skip
    assert_same_run(python, native)
    assert relative_error(native.params, graph.init_params(1, np.float64)) > 1e-6  # training moved them


@pytest.mark.parametrize(
    "settings",
    [
        {"max_bundle": 4, "min_update_frequency": 3},
        {"priority": "fifo", "order": "arrival"},
        {"order": "largest_bundle", "max_bundle": 3},
        {"mode": "pipeline", "max_bundle": 2},
        {"trace": False},
    ],
    ids=["bundles", "fifo-arrival", "largest-bundle", "pipeline", "untraced"],
)
def test_bundles_priorities_and_modes_simulate_alike(settings: dict) -> None:
    entry = zoo.get("tree-lstm")
    data = few_keys(entry.dataset("small", seed=0), 10, 3)
    graph = entry.graph(data)
    settings = {"workers": 2, "mode": "amp", "epochs": 1, "seed": 2, "max_active_keys": 6, **settings}
    python, native = both(graph, data, params=graph.init_params(3, np.float64), **settings)
    if settings.get("trace", True):
        assert_same_run(python, native)
    else:
        assert native.wall_s == python.wall_s
        assert relative_error(native.params, python.params) <= 1e-12


@pytest.mark.parametrize("name", ["ggsnn", "tree-lstm"])
def test_receiving_costs_simulate_alike(name: str) -> None:
    """What a worker pays to receive a message from another worker is owed and paid alike on both engines."""
    entry = zoo.get(name)
    data = few_keys(entry.dataset("small", seed=0), 10, 3)
    graph = entry.graph(data)
    costs = COSTS.with_(receive_overhead_s=3e-7, receive_s_per_byte=7e-10)
    settings = {"workers": 3, "mode": "amp", "epochs": 1, "seed": 4, "max_active_keys": 5, "max_bundle": 3,
                "optimizer": {"name": "sgd", "lr": 0.01}}  # fmt: skip
    python, native = both(graph, data, costs=costs, params=graph.init_params(4, np.float64), **settings)
    assert_same_run(python, native)
    free = train(graph, data, backend="simulated", costs=COSTS, dtype="float64", engine="native", **settings)
    assert native.wall_s > free.wall_s


def test_a_long_noop_chain_gives_the_same_makespan_and_links() -> None:
    from amp_notebook.bench.common import constant_dataset

    python, native = both(noop_chain(), constant_dataset(300, 1), workers=2, mode="amp", max_active_keys=16,
                          validate=False, optimizer={"name": "sgd", "lr": 0.01})  # fmt: skip
    assert_same_run(python, native)
    assert native.backend_stats["links"]["0->1"]["messages"] > 1000


class Doubles(Identity):
    """A user's op (no native kernel): it runs through the bridge inside the native simulation."""

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Any:
        return [("out", 2.0 * x, state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Any:
        return [("in", 2.0 * g, state)]


def test_a_bridged_op_runs_inside_the_native_simulation() -> None:
    data = digits_dataset(batch_size=50)
    python, native = both(mlp_with(Doubles(), "double"), data, workers=2, epochs=1, seed=0, max_active_keys=3)
    assert native.python_nodes == ("double",)
    assert_same_run(python, native)


def test_an_op_error_names_the_node_and_key_as_the_python_simulator_does() -> None:
    data = digits_dataset(batch_size=20)
    errors = []
    for engine in ("python", "native"):
        with pytest.raises(NodeError) as info:
            train(mlp_with(Refuses(), "mine"), data, engine=engine, backend="simulated", costs=COSTS, workers=2)
        errors.append(info.value)
    python, native = errors
    assert native.node == python.node == "mine"
    assert "refusing key 5" in str(native) and str(native.state) == str(python.state)


def test_a_failing_cost_model_stops_the_native_simulation_with_its_error(monkeypatch) -> None:
    def refuse(self, node, direction, shape, dtype):
        raise ArithmeticError(f"no cost for node {node}")

    monkeypatch.setattr(CostTable, "of_shape", refuse)
    data = digits_dataset(batch_size=50)
    from amp_notebook.models.mlp import mlp

    with pytest.raises(ArithmeticError, match="no cost for node"):
        train(mlp(input_width=64, hidden=32), data, engine="native", backend="simulated", costs=COSTS)


def test_a_native_simulation_is_deterministic_and_auto_picks_it() -> None:
    entry = zoo.get("bilstm-tagger")
    data = few_keys(entry.dataset("small", seed=0), 6, 2)
    graph = entry.graph(data)
    runs = [train(graph, data, backend="simulated", costs=COSTS, workers=2, seed=4, max_active_keys=3) for _ in "ab"]
    assert [r.engine for r in runs] == ["native", "native"]
    assert runs[0].wall_s == runs[1].wall_s
    assert relative_error(runs[0].params, runs[1].params) == 0.0


def test_the_ray_backend_still_refuses_the_native_engine() -> None:
    entry = zoo.get("mlp")
    data = few_keys(entry.dataset("small", seed=0), 2, 1)
    with pytest.raises(SettingError, match="backend='ray'"):
        train(entry.graph(data), data, engine="native", backend="ray")


def test_a_bundle_budget_simulates_alike_and_caps_the_bundles() -> None:
    """Each worker's seconds per message come from the virtual clock in a simulation, so a budget that binds
    gives both engines the same schedule; it holds bundles under what max_bundle alone allows."""
    entry = zoo.get("tree-lstm")
    data = few_keys(entry.dataset("small", seed=0), 10, 3)
    graph = entry.graph(data)
    settings = {"workers": 2, "mode": "amp", "epochs": 1, "seed": 2, "max_active_keys": 8, "max_bundle": 8,
                "params": graph.init_params(3, np.float64)}  # fmt: skip
    python, native = both(graph, data, bundle_budget_s=3e-6, **settings)
    assert_same_run(python, native)
    unlimited = train(graph, data, backend="simulated", costs=COSTS, dtype="float64", engine="native",
                      bundle_budget_s=None, **settings)  # fmt: skip
    capped, free = native.trace.events()["messages"], unlimited.trace.events()["messages"]
    assert len(capped) > len(free) and capped.sum() == free.sum()  # more, smaller bundles of the same messages
