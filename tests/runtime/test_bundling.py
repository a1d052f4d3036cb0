"""Message bundling in whole runs: same numbers, homogeneous bundles, staleness and credits per message.

With ``max_bundle`` over 1 a worker runs the messages of different keys that wait for the same node, port
and direction as one call. In ``sync`` mode (float64) the parameters after training must equal the
reference interpreter's and the unbundled run's to 1e-12: a bundle stacks rows into one matrix product,
whose rounding BLAS chooses by the row count, and where one key sends several messages to a node (an
RNN's tokens, a tree's leaves) their gradients may be summed in another order than the interpreter's
(also without bundling). Where each node gets one message per key (the MLP), sync-mode bundles hold one
message and the runs are equal bit for bit. Bundles must never mix nodes, ports or directions (replicas
are distinct nodes); every message keeps its own staleness row and credit.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amp_notebook import models
from amp_notebook.data import Dataset
from amp_notebook.data.graphs import babi15_graphs, ggsnn_dataset
from amp_notebook.data.sentiment import sentiment_tree_dataset
from amp_notebook.engine import available as native_available
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.ir.message import BWD
from amp_notebook.runtime.costs import CostModel, NodeCost
from amp_notebook.runtime.reference import train_reference
from amp_notebook.runtime.train import TrainResult, train
from amp_notebook.runtime.worker import Worker
from tests.conftest import digits_dataset, lists_dataset

SGD = {"name": "sgd", "lr": 0.05}


def model_case(name: str) -> tuple[Any, Dataset]:
    if name == "mlp":
        return models.mlp(input_width=64, hidden=16), digits_dataset(batch_size=100)
    if name == "rnn":
        return models.rnn(hidden=16, embedding_dim=8), lists_dataset(n_train=120, n_val=20, bucket_size=20)
    if name == "tree_lstm":
        data = sentiment_tree_dataset(n_train=24, n_val=6, seed=1)
        graph = models.tree_lstm(int(data.meta["vocab_size"]), 8, 8, embed_update_frequency=None,  # type: ignore[call-overload]
                                 update_frequency=None)  # fmt: skip
        return graph, data
    graphs = babi15_graphs(16, seed=2, inflate_to=7)
    data = ggsnn_dataset(graphs[:12], 4, "node_selection", 3, val_instances=graphs[12:])
    return models.ggsnn(4, graphs[0].feature_width, 8, 3, "node_selection"), data


def max_relative_error(a: dict[str, dict[str, np.ndarray]], b: dict[str, dict[str, np.ndarray]]) -> float:
    return max(
        float(np.max(np.abs(a[n][k] - b[n][k]) / (np.abs(b[n][k]) + 1e-12))) for n in b for k in b[n]
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["threads", "simulated"])
@pytest.mark.parametrize("name", ["mlp", "rnn", "tree_lstm", "ggsnn"])
def test_bundled_equals_unbundled_equals_the_interpreter_in_sync_mode(name, backend):
    graph, data = model_case(name)
    start = graph.init_params(3, np.dtype(np.float64))
    interp = Interpreter(graph, params=start, dtype=np.float64, optimizer=SGD)
    train_reference(interp, data, epochs=1, seed=3)
    expected = interp.params()
    runs = {}
    for max_bundle in (1, 16):
        r = train(graph, data, workers=2, mode="sync", epochs=1, seed=3, dtype="float64", params=start,
                  optimizer=SGD, backend=backend, max_bundle=max_bundle)  # fmt: skip
        assert isinstance(r, TrainResult)
        runs[max_bundle] = r
    unbundled, bundled = runs[1], runs[16]
    assert max_relative_error(unbundled.params, expected) <= 1e-12
    assert max_relative_error(bundled.params, expected) <= 1e-12
    if name == "mlp":
        assert max_relative_error(bundled.params, unbundled.params) == 0.0
    assert max_relative_error(bundled.params, unbundled.params) <= 1e-12
    assert bundled.history[0].val_loss == pytest.approx(unbundled.history[0].val_loss, rel=1e-12)
    events = bundled.trace.events()
    if name in ("rnn", "tree_lstm"):  # a key's tokens or leaves wait together at the embedding
        assert events["messages"].max() > 1
    assert int(events["messages"].sum()) == int(unbundled.trace.events()["messages"].sum())


@pytest.fixture
def bundle_log(monkeypatch) -> list[list[tuple[int, int, str, int]]]:
    """Every bundle a worker runs (lone messages included): (node, direction, port, key) per message."""
    log: list[list[tuple[int, int, str, int]]] = []
    original = Worker.step

    def spy(self, bundle, *args):
        log.append([(m.node, m.direction, m.port, m.key) for m in bundle])
        return original(self, bundle, *args)

    monkeypatch.setattr(Worker, "step", spy)
    return log


def test_bundles_never_mix_nodes_ports_directions_or_replicas(bundle_log):
    graph = models.rnn(hidden=16, embedding_dim=8, replicas=2)
    data = lists_dataset(n_train=300, n_val=40, bucket_size=10)
    train(graph, data, workers=2, mode="amp", max_active_keys=16, max_bundle=8, epochs=1, seed=0, optimizer=SGD,
          engine="python")  # the spy watches the Python worker  # fmt: skip
    sizes = Counter(len(b) for b in bundle_log)
    assert sum(n for size, n in sizes.items() if size > 1) > 20, sizes  # bundles formed: something was tested
    for bundle in bundle_log:
        assert len({(node, direction, port) for node, direction, port, _ in bundle}) == 1, bundle
        assert len(bundle) <= 8


def test_every_message_keeps_its_staleness_row_and_credit():
    graph, data = model_case("tree_lstm")
    r = train(graph, data, workers=2, mode="amp", max_active_keys=8, max_bundle=16, epochs=2, seed=0, optimizer=SGD,
              backend="simulated", costs=CostModel.this_cpu())  # fmt: skip
    events, stale = r.trace.events(), r.trace.staleness()
    plan_nodes = {name: i for i, name in enumerate(r.trace.node_names)}
    parameterized = [plan_nodes[n] for n in graph.parameterized()]
    gradients = events["messages"][(events["phase"] == BWD) & np.isin(events["node"], parameterized)].sum()
    assert len(stale["value"]) == gradients  # one staleness row per gradient, bundled or not
    assert (stale["value"] >= 0).all()
    members = r.trace.members()
    assert len(members["key"]) == int(events["messages"][events["messages"] > 1].sum())
    columns = (events[c].tolist() for c in ("worker", "row", "key", "messages"))
    row_of = {(w, row): (key, n) for w, row, key, n in zip(*columns, strict=True)}
    for where, keys in r.trace.bundle_keys().items():
        assert row_of[where] == (keys[0], len(keys))  # the row shows the first key and the bundle's size
    assert r.train_instances == 2 * data.train_instances  # every key completed: credits counted per message


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.floats(1e-6, 1e-3), min_size=6, max_size=6), st.sampled_from([2, 4, 64]))
def test_random_arrival_orders_give_the_interpreters_numbers(seconds, max_bundle):
    """Random per-node costs on the simulator reorder arrivals and change which messages bundle."""
    graph, data = model_case("tree_lstm")
    names = list(graph.nodes)
    nodes = {names[i * 3 % len(names)]: NodeCost(fwd_s=s, bwd_s=2 * s) for i, s in enumerate(seconds)}
    start = graph.init_params(5, np.dtype(np.float64))
    interp = Interpreter(graph, params=start, dtype=np.float64, optimizer=SGD)
    train_reference(interp, data, epochs=1, seed=5)
    r = train(graph, data, workers=3, mode="sync", epochs=1, seed=5, dtype="float64", params=start, optimizer=SGD,
              backend="simulated", costs=CostModel(nodes=nodes), max_bundle=max_bundle)  # fmt: skip
    assert max_relative_error(r.params, interp.params()) <= 1e-12
    amp = train(graph, data, workers=3, mode="amp", max_active_keys=6, epochs=1, seed=5, dtype="float64",
                params=start, optimizer=SGD, backend="simulated", costs=CostModel(nodes=nodes),
                max_bundle=max_bundle)  # fmt: skip
    assert amp.train_instances == data.train_instances


def test_the_seconds_per_message_start_at_the_first_bundle_then_average() -> None:
    from amp_notebook.runtime.worker import PER_MESSAGE_WEIGHT, per_message_seconds

    assert per_message_seconds(0.0, 2e-3) == 2e-3  # nothing timed yet: the first bundle's figure
    assert per_message_seconds(2e-3, 1e-3) == 2e-3 + (1e-3 - 2e-3) * PER_MESSAGE_WEIGHT


@pytest.mark.parametrize(
    "engine", ["python", pytest.param("native", marks=pytest.mark.skipif(not native_available(), reason="not built"))]
)
def test_a_bundle_holds_no_more_op_time_than_the_budget(engine: str) -> None:
    """A node whose messages take 1 ms each (virtual time) bundles at most 2 under a 2.5 ms budget, once its
    first bundle is timed, where the same run without a budget bundles up to max_bundle; other nodes, cheap,
    keep bundling."""
    graph, data = models.mlp(input_width=64, hidden=16), digits_dataset(batch_size=10)
    costs = CostModel(nodes={"linear2": NodeCost(fwd_s=1e-3, bwd_s=1e-3)})
    runs = {}
    for budget in (2.5e-3, None):
        runs[budget] = train(graph, data, workers=2, mode="amp", max_active_keys=16, max_bundle=16, epochs=1, seed=0,
                             optimizer=SGD, backend="simulated", costs=costs, engine=engine, bundle_budget_s=budget,
                             validate=False)  # fmt: skip
    sizes = {}
    for budget, r in runs.items():
        events = r.trace.events()
        heavy = events["node"] == r.trace.node_names.index("linear2")
        sizes[budget] = events["messages"][heavy]
    first_fwd_and_bwd = 2  # each direction's first bundle runs before anything is timed
    assert (sizes[2.5e-3] > 2).sum() <= first_fwd_and_bwd and sizes[None].max() > 2
    assert sizes[2.5e-3].sum() == sizes[None].sum()  # the same messages, in smaller bundles
