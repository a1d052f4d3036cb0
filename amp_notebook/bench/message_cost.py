"""What one message costs, op by op: a Tree-LSTM epoch and a GG-NN epoch on the paper's layout.

Both train one instance per key on the threaded backend (2 workers, ``max_active_keys`` 32, trace on) and
read the cost off the trace: per op kind and phase, the seconds its rows took divided by the messages they
handled (a bundle's row counts each of its messages), in microseconds. ``handled_us`` is the same over all
rows; ``overhead_us`` is what a message cost beyond its handling: the workers' wall time (2 x wall) not
spent inside a row, per message (queues, scheduling, credits, waiting for the GIL or for work). ``bundled``
runs the same with ``max_bundle`` 64 and ``order="largest_bundle"``.

The figures depend on the machine's load: run the sides interleaved (``repeats``, order flipped each
round) and read medians. Written to work on older commits too (rows without a ``messages`` column count
one message each), so a before/after comparison can run this same file against both.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import defaultdict
from typing import Any

from amp_notebook.bench.common import report
from amp_notebook.ir.message import PHASES


def _cases(n_trees: int, n_graphs: int) -> dict[str, tuple[Any, Any, dict[str, Any]]]:
    from amp_notebook.data.graphs import BABI15_FEATURE_WIDTH, babi15_graphs, ggsnn_dataset
    from amp_notebook.data.sentiment import sentiment_tree_dataset
    from amp_notebook.models.ggsnn import ggsnn
    from amp_notebook.models.tree_lstm import tree_lstm

    trees = sentiment_tree_dataset(n_train=n_trees, n_val=0, seed=0)
    graphs = ggsnn_dataset(babi15_graphs(n_graphs, seed=0, inflate_to=54, task="node_selection"), 4,
                           "node_selection", 4)  # fmt: skip
    ggnn = ggsnn(4, BABI15_FEATURE_WIDTH, 32, 4, "node_selection")
    for name in ("edges", "gru_x", "gru_h"):
        ggnn.nodes[name].min_update_frequency = 4
    return {
        "tree": (tree_lstm(int(trees.meta["vocab_size"]), 64, 64, 5), trees, {}),  # type: ignore[call-overload]
        "ggsnn": (ggnn, graphs, {"placement": "balanced"}),
    }


def cost(graph: Any, data: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """One epoch's per-message cost by op kind and phase, from its trace."""
    from amp_notebook.runtime.train import train

    t0 = time.perf_counter()
    r = train(graph, data, mode="amp", workers=2, max_active_keys=32, epochs=1, seed=0, validate=False,
              optimizer={"name": "adam", "lr": 3e-3}, trace_capacity=None, **settings)  # fmt: skip
    wall = time.perf_counter() - t0
    ev = r.trace.events()
    messages = ev["messages"] if "messages" in ev else [1] * len(ev["start"])
    kinds = [graph.nodes[name].kind for name in r.trace.node_names]
    spent: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for node, phase, start, end, n in zip(ev["node"].tolist(), ev["phase"].tolist(), ev["start"].tolist(),
                                          ev["end"].tolist(), list(messages), strict=True):  # fmt: skip
        label = f"{kinds[node]} {PHASES[phase]}"
        spent[label] += end - start
        count[label] += int(n) if phase != 2 else 1
    total = sum(count[k] for k in count if not k.endswith("update"))
    busy = sum(spent.values())
    return {
        "per_op_us": {k: 1e6 * spent[k] / count[k] for k in sorted(spent)},
        "messages_per_op": dict(count),
        "handled_us": 1e6 * busy / total,
        "overhead_us": 1e6 * (2 * r.wall_s - busy) / total,
        "messages": total,
        "instances_per_s": len(data.train) / wall,
    }


# Keys per epoch: enough that filling and draining 32 keys in flight is a small part of the wall time that
# ``overhead_us`` divides (at 400 trees a native run lasted under 0.1 s).
N_TREES, N_GRAPHS = 3000, 1500


def run(quick: bool = False, repeats: int = 3, n_trees: int = N_TREES, n_graphs: int = N_GRAPHS) -> dict[str, Any]:
    if quick:
        repeats, n_trees, n_graphs = 1, 40, 20
    cases = _cases(n_trees, n_graphs)
    bundling = {"max_bundle": 64, "order": "largest_bundle"}
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    load_before = os.getloadavg()[0]
    for i in range(repeats):
        order = [(name, b) for name in cases for b in (False, True)]
        for name, bundled in order if i % 2 == 0 else order[::-1]:
            graph, data, settings = cases[name]
            try:
                figures = cost(graph, data, {**settings, **(bundling if bundled else {"max_bundle": 1})})
            except TypeError:  # a commit before bundling existed: no max_bundle, no order (and no bundles)
                if bundled:
                    continue
                figures = cost(graph, data, settings)
            runs[f"{name}{'_bundled' if bundled else ''}"].append(figures)
    result: dict[str, Any] = {}
    rows: list[tuple[str, Any]] = []
    for side, side_runs in runs.items():
        ops = sorted(side_runs[0]["per_op_us"])
        median = {
            "per_op_us": {op: statistics.median(r["per_op_us"].get(op, float("nan")) for r in side_runs) for op in ops},
            "handled_us": statistics.median(r["handled_us"] for r in side_runs),
            "overhead_us": statistics.median(r["overhead_us"] for r in side_runs),
            "instances_per_s": statistics.median(r["instances_per_s"] for r in side_runs),
            "messages": side_runs[0]["messages"],
            "messages_per_op": side_runs[0]["messages_per_op"],
            "runs_instances_per_s": [r["instances_per_s"] for r in side_runs],
        }
        result[side] = median
        summary = (f"{median['instances_per_s']:.0f} instances/s, {median['messages']} messages, handled "
                   f"{median['handled_us']:.1f} us + overhead {median['overhead_us']:.1f} us per message")  # fmt: skip
        rows.append((side, summary))
        for op, us in median["per_op_us"].items():
            rows.append((f"  {op}", f"{us:8.1f} us per message ({median['messages_per_op'][op]} messages)"))
    rows.append(("runs", f"{repeats} per side, interleaved, order flipped every round; medians shown"))
    print(report(rows))
    result.update({"repeats": repeats, "n_trees": n_trees, "n_graphs": n_graphs,
                   "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]}})  # fmt: skip
    return result
