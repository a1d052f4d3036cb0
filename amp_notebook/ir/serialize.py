"""JSON round trip of graphs (versioned schema) and parameters as .npz; no pickle anywhere.

Graph JSON::

    {"schema": "amp_notebook.graph", "version": 1, "name": ...,
     "nodes": [{"name", "kind", "config", "min_update_frequency", "optimizer", "worker", "meta"}],
     "edges": [[src, src_port, dst, dst_port], ...],
     "replica_groups": [[name, ...], ...]}

Ops are rebuilt from their kind (looked up in the closed ``OPS`` list) and config; expressions stay
strings and are re-checked by the safe expression parser on load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from amp_notebook.ir import ops as O
from amp_notebook.ir.graph import Graph, GraphError, Ref
from amp_notebook.ir.ops.base import OpError

SCHEMA = "amp_notebook.graph"
VERSION = 1
_NODE_FIELDS = {"name", "kind", "config", "min_update_frequency", "optimizer", "worker", "meta"}


def graph_to_dict(graph: Graph) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "name": graph.name,
        "nodes": [
            {
                "name": n.name,
                "kind": n.kind,
                "config": n.op.config(),
                "min_update_frequency": n.min_update_frequency,
                "optimizer": n.optimizer,
                "worker": n.worker,
                "meta": n.meta,
            }
            for n in graph.nodes.values()
        ],
        "edges": [[e.src, e.src_port, e.dst, e.dst_port] for e in graph.edges],
        "replica_groups": [list(g) for g in graph.replica_groups],
    }


def graph_from_dict(data: dict[str, Any]) -> Graph:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise GraphError(f"graph JSON: expected schema {SCHEMA!r}, found {found!r}; is this an amp_notebook graph?")
    if data.get("version") != VERSION:
        raise GraphError(
            f"graph JSON: expected schema version {VERSION}, found {data.get('version')!r}; "
            "upgrade amp_notebook to read newer files"
        )
    graph = Graph(str(data.get("name", "graph")))
    for i, entry in enumerate(data.get("nodes", [])):
        where = f"graph JSON nodes[{i}]"
        if not (isinstance(entry, dict) and entry.get("name") and isinstance(entry["name"], str)):
            raise GraphError(f"{where}: expected an object with a string 'name' and 'kind', found {entry!r}")
        if not isinstance(entry.get("kind"), str) or not isinstance(entry.get("meta") or {}, dict):
            raise GraphError(
                f"{where} ({entry['name']!r}): expected a string 'kind' and an object 'meta', found kind "
                f"{entry.get('kind')!r} and meta {entry.get('meta')!r}"
            )
        unknown = set(entry) - _NODE_FIELDS
        if unknown:
            raise GraphError(f"{where} ({entry['name']!r}): unknown field(s) {sorted(unknown)}")
        kind = entry["kind"]
        if kind not in O.OPS:
            raise GraphError(f"{where} ({entry['name']!r}): unknown op kind {kind!r}; known kinds: {sorted(O.OPS)}")
        config = entry.get("config") or {}
        try:
            op = O.OPS[kind](**config)
        except (OpError, TypeError) as exc:
            raise GraphError(f"{where} ({entry['name']!r}, {kind}): bad config {config!r}: {exc}") from None
        graph.add_node(
            op,
            name=entry["name"],
            min_update_frequency=entry.get("min_update_frequency"),
            optimizer=entry.get("optimizer"),
            worker=entry.get("worker"),
            meta=dict(entry.get("meta") or {}),
        )
    for i, edge in enumerate(data.get("edges", [])):
        if not (isinstance(edge, list) and len(edge) == 4 and all(isinstance(x, str) for x in edge)):
            raise GraphError(f"graph JSON edges[{i}]: expected [src, src_port, dst, dst_port], found {edge!r}")
        src, src_port, dst, dst_port = edge
        try:
            graph.connect(Ref(src, src_port), dst, dst_port)
        except GraphError as exc:
            raise GraphError(f"graph JSON edges[{i}]: {exc}") from None
    groups = data.get("replica_groups", [])
    if not isinstance(groups, list) or not all(
        isinstance(g, list) and all(isinstance(n, str) for n in g) for g in groups
    ):
        raise GraphError(f"graph JSON replica_groups: expected a list of lists of node names, found {groups!r}")
    graph.replica_groups = [list(g) for g in groups]
    return graph


def save_graph(graph: Graph, path: str | Path) -> None:
    Path(path).write_text(json.dumps(graph_to_dict(graph), indent=1))


def load_graph(path: str | Path) -> Graph:
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise GraphError(f"{path}: not valid JSON ({exc})") from None
    return graph_from_dict(data)


def save_params(params: dict[str, dict[str, np.ndarray]], path: str | Path) -> None:
    """Parameters as an .npz of arrays named ``node/param``."""
    flat = {f"{node}/{name}": arr for node, group in params.items() for name, arr in group.items()}
    with open(path, "wb") as f:
        np.savez(f, **flat)


def load_params(path: str | Path, graph: Graph | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Load parameters saved by :func:`save_params`; with ``graph``, check names and shapes."""
    params: dict[str, dict[str, np.ndarray]] = {}
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            node, _, name = key.rpartition("/")
            if not node:
                raise GraphError(f"{path}: entry {key!r} is not named 'node/param'")
            params.setdefault(node, {})[name] = data[key]
    if graph is not None:
        for node in graph.parameterized():
            shapes = graph.nodes[node].op.param_shapes()
            found = {k: v.shape for k, v in params.get(node, {}).items()}
            if found != shapes:
                raise GraphError(
                    f"{path}: parameters of {graph.nodes[node].describe()}: expected shapes {shapes}, found {found}"
                )
    return params
