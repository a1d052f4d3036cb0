"""Which worker runs each node.

Heavy ops (the parameterized Linear and Embedding) go round-robin over the workers in topological
order, so consecutive layers land on different workers and pipeline. Light ops follow the worker of the
node that feeds them (fewer cross-worker hops); inputs go where their consumer is. A node's own
``worker`` attribute overrides all of this.
"""

from __future__ import annotations

import warnings

from amp_notebook.ir import ops as O
from amp_notebook.ir.graph import Graph


class PlacementError(ValueError):
    pass


def place(graph: Graph, workers: int, overrides: dict[str, int] | None = None) -> dict[str, int]:
    if workers < 1:
        raise PlacementError(f"workers: expected at least 1, got {workers}")
    overrides = dict(overrides or {})
    for name, node in graph.nodes.items():
        if node.worker is not None:
            overrides.setdefault(name, node.worker)
    for name, w in overrides.items():
        if name not in graph.nodes:
            raise PlacementError(f"placement override names no node {name!r}; nodes: {sorted(graph.nodes)}")
        if not 0 <= w < workers:
            raise PlacementError(
                f"{graph.nodes[name].describe()} is placed on worker {w}, but the run has workers 0..{workers - 1}; "
                "lower the node's worker or raise --workers"
            )
    order = graph.topological_order()
    placed: dict[str, int] = dict(overrides)
    heavy = [n for n in order if graph.nodes[n].kind in O.HEAVY and n not in placed]
    for i, name in enumerate(heavy):
        placed[name] = i % workers
    incoming = {n: graph.incoming(n) for n in graph.nodes}
    outgoing = {n: graph.outgoing(n) for n in graph.nodes}
    for _ in range(2):  # a second sweep places inputs whose consumer was placed late
        for name in order:
            if name in placed:
                continue
            producers = [e.src for e in incoming[name].values() if e.src in placed]
            consumers = [e.dst for e in outgoing[name].values() if e.dst in placed]
            if producers:
                placed[name] = placed[producers[0]]
            elif consumers:
                placed[name] = placed[consumers[0]]
    for i, name in enumerate(n for n in order if n not in placed):
        placed[name] = i % workers
    idle = sorted(set(range(workers)) - set(placed.values()))
    n_heavy = sum(1 for n in graph.nodes.values() if n.kind in O.HEAVY)
    if idle:
        warnings.warn(
            f"graph {graph.name!r}: worker(s) {idle} get no node ({n_heavy} heavy nodes for {workers} "
            "workers); replicate a heavy node, place nodes by hand, or use fewer workers",
            stacklevel=3,
        )
    return {name: placed[name] for name in graph.nodes}
