"""The drawable view of a builder's graph: what Python syncs to the browser after every change.

One JSON-ready dict: nodes (ports, properties as the inspector shows them, output widths, effective
worker, problems per port), edges (with the width they carry, and whether they are a loop's back-edge),
the layout direction, and the problems that concern no node. Effective worker: a node's pinned
``worker``, else what the placement heuristic (amp_notebook/runtime/placement.py) would choose for the
current worker count.

Loop back-edges (:func:`amp_notebook.ir.analysis.loop_back_edges`, the answer the validator and the
topological order use too) are the edges the canvas leaves out of its layered layout and draws routed
around the side, so that the rest reads in one direction (the paper's Fig. 2).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from amp_notebook.ir import ops as O
from amp_notebook.ir.analysis import loop_back_edges
from amp_notebook.ui import builder_schema as S
from amp_notebook.ui.builder_replicas import replicas_of

if TYPE_CHECKING:
    from amp_notebook.ui.builder_model import BuilderModel


def effective_workers(model: BuilderModel) -> dict[str, int | None]:
    from amp_notebook.runtime.placement import PlacementError, place

    graph = model.graph
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return dict(place(graph, model.workers))
    except (PlacementError, KeyError, ValueError):
        return {n: node.worker for n, node in graph.nodes.items()}


def worker_lanes(model: BuilderModel, workers: dict[str, int | None]) -> list[dict[str, Any]]:
    """One lane per worker, as the placement view draws it: how many nodes and heavy nodes the worker runs,
    how many of them are pinned there, and its cost (the sum of :func:`heavy_cost`, multiply-adds per row
    for a Linear), so a user dragging nodes between lanes sees the balance change."""
    from amp_notebook.runtime.placement import heavy_cost

    graph = model.graph
    lanes = [{"worker": w, "nodes": 0, "heavy": 0, "pinned": 0, "cost": 0, "heavy_nodes": []}
             for w in range(model.workers)]  # fmt: skip
    for name in graph.nodes:  # insertion order: no second topological sort per view (placement did one)
        w = workers.get(name)
        if w is None or not 0 <= w < model.workers:
            continue
        lane = lanes[w]
        node = graph.nodes[name]
        lane["nodes"] += 1
        lane["pinned"] += node.worker is not None
        if node.kind in O.HEAVY:
            lane["heavy"] += 1
            lane["cost"] += heavy_cost(graph, name)
            lane["heavy_nodes"].append(name)
    return lanes


def build_view(model: BuilderModel) -> dict[str, Any]:
    graph = model.graph
    widths = model.widths()
    problems = model.problems(require_loss=True)
    workers = effective_workers(model)
    by_node: dict[str, list[dict[str, Any]]] = {}
    general: list[str] = []
    for p in problems:
        if p.node is None or p.node not in graph.nodes:
            general.append(p.message)
        else:
            by_node.setdefault(p.node, []).append({"port": p.port, "message": p.message})
    nodes = []
    for name, node in graph.nodes.items():
        op = node.op
        kind_fields = {f["name"]: f["type"] for f in S.fields(node.kind)}
        config = op.config()
        pos = model.positions.get(name)
        nodes.append(
            {
                "id": name,
                "kind": node.kind,
                "label": S.label(node.kind),
                "group": S.palette_group(node.kind),
                "parameterized": node.kind in O.PARAMETERIZED,
                "inputs": list(op.input_ports()),
                "outputs": [{"port": p, "width": widths.get((name, p))} for p in op.output_ports()],
                "config": {k: S.format_value(t, config.get(k)) for k, t in kind_fields.items()},
                "attrs": {
                    "min_update_frequency": S.format_value(S.OPT_INT, node.min_update_frequency),
                    "optimizer": _format_optimizer(node.optimizer),
                    "worker": S.format_value(S.OPT_INT, node.worker),
                    "replicas": replicas_of(graph, name),
                },
                "worker": workers.get(name),
                "pinned": node.worker is not None,
                "cell": node.meta.get("cell"),
                "position": None if pos is None else [pos[0], pos[1]],
                "errors": by_node.get(name, []),
            }
        )
    loops = loop_back_edges(graph)
    edges = [
        {"id": f"{e.src}:{e.src_port}->{e.dst}:{e.dst_port}", "source": e.src, "sourceHandle": e.src_port,
         "target": e.dst, "targetHandle": e.dst_port, "width": widths.get((e.src, e.src_port)),
         "loop": e in loops}
        for e in graph.edges
    ]  # fmt: skip
    return {
        "name": graph.name,
        "revision": model.revision,
        "generation": model.generation,
        "zoo_model": model.zoo_model,
        "nodes": nodes,
        "edges": edges,
        "direction": model.direction,
        "general_errors": general,
        "n_problems": len(problems),
        "can_undo": model.can_undo,
        "can_redo": model.can_redo,
        "workers": model.workers,
        "lanes": worker_lanes(model, workers),
    }


def _format_optimizer(spec: dict[str, Any] | None) -> str:
    if spec is None:
        return ""
    if set(spec) == {"name"}:
        return str(spec["name"])
    import json

    return json.dumps(spec)
