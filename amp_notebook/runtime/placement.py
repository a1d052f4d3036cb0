"""Which worker runs each node.

Two strategies place the heavy ops (the parameterized Linear and Embedding):

* ``round_robin`` (the default, as in the paper): heavy ops in topological order go to workers 0, 1, 2,
  ... in turn, so consecutive layers land on different workers; a pinned heavy op takes its turn (pinning
  one op leaves where the others go unchanged);
* ``balanced``: the heavy ops in topological order are cut into contiguous stages, one per worker, with
  the largest stage cost (parameter count, a proxy for FLOPs per instance) as small as possible: the
  partition pipeline-parallel systems use. A key then crosses workers once per stage boundary instead of
  at every layer, which avoids the stalls where every worker waits on the other (see
  ``amp-notebook bench speedup``).

Light ops follow the worker of the node that feeds them (fewer cross-worker hops); inputs go where their
consumer is. A node's own ``worker`` attribute, or an explicit override, beats both strategies.
"""

from __future__ import annotations

import warnings

from amp_notebook.errors import AmpError
from amp_notebook.ir import ops as O
from amp_notebook.ir.graph import Graph


class PlacementError(AmpError, ValueError):
    """A placement that cannot be made: an override naming a node or worker that does not exist."""

    pass


STRATEGIES = ("round_robin", "balanced")


def heavy_cost(graph: Graph, name: str) -> int:
    """Cost proxy of a heavy node, as its op declares it (``Op.placement_cost``): multiply-adds per instance
    for a Linear, the row width it gathers for an Embedding."""
    return graph.nodes[name].op.placement_cost()


def contiguous_partition(costs: list[int], parts: int) -> list[int]:
    """Stage index of each item: contiguous groups, at most ``parts``, minimizing the largest group sum."""
    n = len(costs)
    if n == 0:
        return []
    parts = min(parts, n)
    prefix = [0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[k][i]: smallest possible largest-group cost splitting the first i items into k groups
    best = [[inf] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0
    for k in range(1, parts + 1):
        for i in range(1, n + 1):
            for j in range(k - 1, i):
                value = max(best[k - 1][j], prefix[i] - prefix[j])
                if value < best[k][i]:
                    best[k][i], cut[k][i] = value, j
    stage = [0] * n
    i = n
    for k in range(parts, 0, -1):
        j = cut[k][i]
        for item in range(j, i):
            stage[item] = k - 1
        i = j
    return stage


def place(
    graph: Graph, workers: int, overrides: dict[str, int] | None = None, strategy: str = "round_robin"
) -> dict[str, int]:
    if workers < 1:
        raise PlacementError(f"workers: expected at least 1, got {workers}")
    if strategy not in STRATEGIES:
        raise PlacementError(f"placement strategy: expected one of {STRATEGIES}, got {strategy!r}")
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
    all_heavy = [n for n in order if graph.nodes[n].kind in O.HEAVY]
    heavy = [n for n in all_heavy if n not in placed]
    if strategy == "balanced":
        stages = contiguous_partition([heavy_cost(graph, n) for n in heavy], workers)
        placed.update(zip(heavy, stages, strict=True))
    else:
        # a pinned heavy node keeps its turn, so pinning one node by hand leaves the others where they were
        for i, name in enumerate(all_heavy):
            placed.setdefault(name, i % workers)
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
