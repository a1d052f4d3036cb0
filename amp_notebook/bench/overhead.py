"""Per-message cost of the runtime: a chain of no-op nodes split over 2 workers.

The graph is Input -> Linear(1, 1) -> 16 Identity nodes -> MSE, on keys of one instance of width 1, so
almost all the time goes to the runtime's own glue: taking a message, running a trivial op, tracing it,
counting credits and routing to the next worker. Identity nodes alternate between the two workers so
every hop crosses threads (the worst case). Figure: wall time / messages handled.
"""

from __future__ import annotations

from typing import Any

from amp_notebook.bench.common import constant_dataset, median_of, report
from amp_notebook.ir.graph import Graph
from amp_notebook.runtime.train import train


def chain(length: int = 16) -> Graph:
    g = Graph("noop_chain")
    h = g.linear(g.input("x", width=1), 1, name="first")
    for i in range(length):
        h = g.identity(h, name=f"noop{i}", worker=i % 2)
    g.mse(h, g.input("target", width=1), name="loss")
    return g


def run(repeats: int = 5, keys: int = 2000, workers: int = 2, quick: bool = False) -> dict[str, Any]:
    if quick:
        repeats, keys = 3, 300
    g = chain()
    data = constant_dataset(keys, 1)

    def once() -> float:
        # max_bundle 1: one message per call, so this is the cost of a message (bench bundling measures bundles)
        settings = {"mode": "amp", "max_active_keys": 16, "validate": False, "dtype": "float64", "max_bundle": 1}
        r = train(g, data, workers=workers, **settings)
        return r.wall_s / len(r.trace.events()["end"]) * 1e6

    us, values = median_of(repeats, once)
    result = {"us_per_message": us, "repeats_us": values, "workers": workers, "keys": keys, "nodes": len(g.nodes)}
    print(report([("us per message (median)", f"{us:.2f}"), ("repeats", [round(v, 2) for v in values])]))
    return result
