"""Message bundling on the paper's layout: one tree (or one graph) per key, ``max_bundle`` swept.

With one instance per key every message is small (one tree node's row, one graph's node states), so the
runtime's cost per message dominates. Bundling lets a node take the messages of other keys that wait for
it and run them as one call. This sweeps ``max_bundle`` over {1, 4, 16, 64} on:

* ``tree``: the binary Tree-LSTM (``models.tree_lstm``, fused cells, embedding 64, hidden 64) on the
  synthetic treebank, one tree per key, ``max_active_keys`` 32, the paper's update frequencies
  (embedding 1000 gradients, other nodes 50), Adam;
* ``ggsnn``: the GG-NN (hidden 32, 4 steps) on bAbI-15-style node selection, 54-node graphs, one graph
  per key, ``max_active_keys`` 32, the loop's Linears updating once per graph's worth of steps, Adam.

Each run trains one epoch of ``N_TREES`` trees or ``N_GRAPHS`` graphs, without validation.

Both on the threaded backend (2 workers, the default engine, traced), ``order="largest_bundle"`` when ``max_bundle`` > 1
(the inbox serves the node with the most messages waiting, so bundles grow; see runtime/inbox.py) and the
default order at 1. Every setting runs ``repeats`` times, interleaved, the order of settings reversed
every round; figures are medians. Per setting: training instances per second and messages per second
(handled messages / wall time), and the mean bundle size (messages per trace row: a row is one bundle).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from amp_notebook.bench.common import interleaved_medians, report
from amp_notebook.errors import SettingError

MAX_BUNDLES = (1, 4, 16, 64)
OPTIMIZER: dict[str, Any] = {"name": "adam", "lr": 3e-3}
# every trace row kept: the messages and bundles are counted from the rows (unbundled, a run writes about 2 million)
RUN: dict[str, Any] = {"mode": "amp", "workers": 2, "max_active_keys": 32, "validate": False, "trace_capacity": None}


def _tree_case(n_train: int, seed: int) -> tuple[Any, Any]:
    from amp_notebook.data.sentiment import sentiment_tree_dataset
    from amp_notebook.models.tree_lstm import tree_lstm

    data = sentiment_tree_dataset(n_train=n_train, n_val=0, seed=seed)
    return tree_lstm(int(data.meta["vocab_size"]), 64, 64, 5), data  # type: ignore[call-overload]


def _ggsnn_case(n_train: int, seed: int) -> tuple[Any, Any]:
    from amp_notebook.data.graphs import BABI15_FEATURE_WIDTH, babi15_graphs, ggsnn_dataset
    from amp_notebook.models.ggsnn import ggsnn

    steps = 4
    graphs = babi15_graphs(n_train, seed=seed, inflate_to=54, task="node_selection")
    data = ggsnn_dataset(graphs, 4, "node_selection", steps)
    graph = ggsnn(4, BABI15_FEATURE_WIDTH, 32, steps, "node_selection")
    for name in ("edges", "gru_x", "gru_h"):  # one gradient per step: update once per graph's worth
        graph.nodes[name].min_update_frequency = steps
    return graph, data


def measure(graph: Any, data: Any, max_bundle: int, seed: int) -> dict[str, float]:
    """One run: instances/s, messages/s and the mean bundle size, counted from the run's trace (one row per
    bundle, with its message count), on whichever engine ran."""
    from amp_notebook.ir.message import BWD, FWD
    from amp_notebook.runtime.train import TrainResult, train

    order = "largest_bundle" if max_bundle > 1 else "oldest_key"
    t0 = time.perf_counter()
    r = train(graph, data, epochs=1, seed=seed, optimizer=OPTIMIZER, max_bundle=max_bundle, order=order, **RUN)
    wall = time.perf_counter() - t0
    assert isinstance(r, TrainResult)
    if r.trace.dropped_rows():
        raise SettingError("trace_capacity", f"bench bundling counts messages from the trace rows, and the trace "
                           f"dropped {r.trace.dropped_rows()} of them: run with trace_capacity=None")  # fmt: skip
    events = r.trace.events()
    steps = (events["phase"] == FWD) | (events["phase"] == BWD)
    bundles, messages = int(steps.sum()), int(events["messages"][steps].sum())
    return {
        "instances_per_s": len(data.train) / wall,
        "messages_per_s": messages / wall,
        "mean_bundle": messages / max(bundles, 1),
        "wall_s": wall,
    }


def sweep(case: Callable[[int, int], tuple[Any, Any]], n_train: int, repeats: int, seed: int) -> dict[str, Any]:
    graph, data = case(n_train, seed)
    runs: dict[int, list[dict[str, float]]] = {m: [] for m in MAX_BUNDLES}

    def once(m: int) -> Callable[[], float]:
        def run() -> float:
            runs[m].append(measure(graph, data, m, seed))
            return runs[m][-1]["instances_per_s"]

        return run

    interleaved_medians(repeats, {str(m): once(m) for m in MAX_BUNDLES})
    return {
        str(m): {
            "instances_per_s": statistics.median(r["instances_per_s"] for r in rs),
            "messages_per_s": statistics.median(r["messages_per_s"] for r in rs),
            "mean_bundle": statistics.median(r["mean_bundle"] for r in rs),
            "runs_instances_per_s": [r["instances_per_s"] for r in rs],
        }
        for m, rs in runs.items()
    }


# Keys per run: enough for a run of about half a second on the native engine. At 600 trees and 300 graphs a run
# there lasted 0.1-0.15 s, much of it filling and draining 32 keys in flight, and the sweep measured that.
N_TREES, N_GRAPHS = 6000, 3000


def run(
    quick: bool = False, repeats: int = 3, n_trees: int = N_TREES, n_graphs: int = N_GRAPHS, seed: int = 0
) -> dict[str, Any]:
    if quick:
        repeats, n_trees, n_graphs = 1, 64, 32
    load_before = os.getloadavg()[0]
    cases = {"tree": sweep(_tree_case, n_trees, repeats, seed), "ggsnn": sweep(_ggsnn_case, n_graphs, repeats, seed)}
    rows: list[tuple[str, Any]] = [("", "instances/s   messages/s   mean bundle   (max_bundle)")]
    for name, by_cap in cases.items():
        for m, figures in by_cap.items():
            rows.append((f"{name} max_bundle {m}", f"{figures['instances_per_s']:>11.0f}"
                         f"   {figures['messages_per_s']:>10.0f}   {figures['mean_bundle']:>11.1f}"))  # fmt: skip
        rows.append(
            (f"{name} gain at 64 over 1", f"{by_cap['64']['instances_per_s'] / by_cap['1']['instances_per_s']:.2f}x")
        )
    rows.append(("runs per setting", f"{repeats}, interleaved, order reversed every round; medians shown"))
    print(report(rows))
    result: dict[str, Any] = {
        name: {m: f["instances_per_s"] for m, f in by_cap.items()} for name, by_cap in cases.items()
    }
    for name, by_cap in cases.items():
        result[f"{name}_messages_per_s"] = {m: f["messages_per_s"] for m, f in by_cap.items()}
        result[f"{name}_mean_bundle"] = {m: f["mean_bundle"] for m, f in by_cap.items()}
        result[f"{name}_runs_instances_per_s"] = {m: f["runs_instances_per_s"] for m, f in by_cap.items()}
    result.update({"repeats": repeats, "n_trees": n_trees, "n_graphs": n_graphs, "seed": seed, "settings": RUN,
                   "load_average_1min": {"before": load_before, "after": os.getloadavg()[0],
                                         "cpus": os.cpu_count()}})  # fmt: skip
    return result
