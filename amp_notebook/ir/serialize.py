"""JSON round trip of graphs (versioned schema) and parameters as .npz; no pickle anywhere.

Graph JSON::

    {"schema": "amp_notebook.graph", "version": 1, "name": ...,
     "nodes": [{"name", "kind", "config", "min_update_frequency", "optimizer", "worker", "meta"}],
     "edges": [[src, src_port, dst, dst_port], ...],
     "replica_groups": [[name, ...], ...]}

Loading is careful, in four steps, each refusing bad input with an :class:`~amp_notebook.errors.AmpError`
(a :class:`GraphFileError`) that lists every problem found in that step:

1. bytes to JSON (:func:`parse_graph_json`): text that is not UTF-8, a pickle (never unpickled: it could run
   code), a zip or .npz archive, NaN and Infinity, numbers too large for a float, nesting deeper than
   ``MAX_NESTING``, and JSON syntax errors are refused with what was found and what to do instead;
2. the JSON against the published JSON Schema ``ir/graph.schema.json`` (:mod:`amp_notebook.ir.schema`): the
   envelope (``schema``, ``version``) first, then every field of every node and edge, with per-kind config
   types and ranges; nothing is interpreted before the whole document passes;
3. ops rebuilt from their kind (looked up in the closed ``OPS`` list) and config, expressions re-checked by
   the safe expression parser, edges connected through the builder API; problems are collected, not
   raised one at a time;
4. (not here) :func:`~amp_notebook.ir.validate.check` then finds what makes a well-formed graph untrainable.

``amp-notebook validate GRAPH.json`` runs all four and prints every problem.
"""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from amp_notebook.errors import AmpError
from amp_notebook.ir import ops as O
from amp_notebook.ir.graph import Graph, GraphError, Ref
from amp_notebook.ir.ops.base import OpError
from amp_notebook.ir.schema import bullet_list, graph_schema_problems, nesting

SCHEMA = "amp_notebook.graph"
VERSION = 1  # ir/graph.schema.json describes this version (its "version" const and "$id" say so)
MAX_NESTING = 64  # levels of JSON arrays and objects: a graph needs about 6, node "meta" gets the rest
_PICKLE_HINT = (
    "amp_notebook never unpickles files (unpickling runs code chosen by whoever wrote the file); save graphs "
    "with amp.save_graph (JSON) and parameters with amp.save_params (.npz)"
)


class GraphFileError(GraphError):
    """A graph file or JSON document that is not a valid graph; ``problems`` lists every problem found."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = list(problems)
        if len(self.problems) == 1:
            message = f"{source}: {self.problems[0]}"
        else:
            message = f"{source} has {len(self.problems)} problems:\n{bullet_list(self.problems)}"
        super().__init__(message)


class GraphFileNotFoundError(GraphFileError, FileNotFoundError):
    """The graph file does not exist (still a ``FileNotFoundError``, as before)."""


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


def graph_from_dict(data: Any, source: str = "graph JSON") -> Graph:
    """Rebuild a graph from its JSON form (as parsed by ``json.loads``); ``source`` names it in errors.

    Raises :class:`GraphFileError` listing every problem: first those against the JSON Schema, then (when
    the document fits the schema) every op config, node name and edge that could not be built.
    """
    check_envelope(data, source)
    problems = graph_schema_problems(data)
    if problems:
        raise GraphFileError(source, problems)
    return rebuild_graph(data, source)


def rebuild_graph(data: dict[str, Any], source: str = "graph JSON") -> Graph:
    """Step 3 alone: build the graph from a document already known to fit the schema, such as the builder's
    undo snapshots (made by :func:`graph_to_dict` in this process). Documents from anywhere else go through
    :func:`graph_from_dict`: this function trusts the document's structure."""
    graph = Graph(data.get("name", "graph"))
    problems = []
    refused: set[str] = set()  # nodes already reported: their edges would only repeat the news
    for i, entry in enumerate(data["nodes"]):
        where = f"nodes[{i}] ({entry['name']!r}, {entry['kind']})"
        config = entry.get("config") or {}
        try:
            op = O.OPS[entry["kind"]](**config)
            graph.add_node(
                op,
                name=entry["name"],
                min_update_frequency=entry.get("min_update_frequency"),
                optimizer=entry.get("optimizer"),
                worker=entry.get("worker"),
                meta=dict(entry.get("meta") or {}),
            )
        except (OpError, GraphError, TypeError, ValueError) as exc:
            problems.append(f"{where}: bad config {json.dumps(config)}: {exc}")
            refused.add(entry["name"])
    for i, (src, src_port, dst, dst_port) in enumerate(data["edges"]):
        if src in refused or dst in refused:
            continue
        try:
            graph.connect(Ref(src, src_port), dst, dst_port)
        except GraphError as exc:
            problems.append(f"edges[{i}]: {exc}")
    if problems:
        raise GraphFileError(source, problems)
    graph.replica_groups = [list(g) for g in data.get("replica_groups", [])]
    return graph


def check_envelope(data: Any, source: str) -> None:
    """Is this an amp_notebook graph at all, and of a version we read? (Before listing what else is wrong.)"""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise GraphFileError(
            source,
            [f"expected schema {SCHEMA!r}, found {found!r}; is this an amp_notebook graph (saved by amp.save_graph)?"],
        )
    version = data.get("version")
    if type(version) is not int or version != VERSION:
        raise GraphFileError(
            source,
            [
                f"expected schema version {VERSION}, found {version!r}; "
                + ("upgrade amp_notebook to read newer files" if type(version) is int and version > VERSION else
                   "set \"version\": 1 if the file otherwise follows schema version 1")
            ],
        )  # fmt: skip


def save_graph(graph: Graph, path: str | Path) -> None:
    Path(path).write_text(json.dumps(graph_to_dict(graph), indent=1))


def load_graph(path: str | Path) -> Graph:
    """Read a graph file: JSON, checked against the schema, never code (see the module docstring)."""
    return graph_from_dict(read_graph_json(path), source=str(path))


def read_graph_json(path: str | Path) -> Any:
    """The parsed JSON of a graph file, or :class:`GraphFileError` saying why it is not JSON."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise GraphFileNotFoundError(str(path), ["no such file; check the path"]) from None
    except OSError as exc:
        raise GraphFileError(str(path), [f"cannot read it: {exc.strerror or exc}"]) from None
    return parse_graph_json(raw, source=str(path))


def parse_graph_json(raw: bytes | str, source: str = "graph JSON") -> Any:
    """``json.loads`` for untrusted graph files: strict JSON only, bounded nesting, clear refusals."""
    if isinstance(raw, bytes):
        kind = _binary_kind(raw)
        if kind:
            raise GraphFileError(source, [kind])
        try:
            raw = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise GraphFileError(
                source, [f"expected UTF-8 JSON text, found a byte {raw[exc.start]:#04x} at offset {exc.start} "
                         "that is not UTF-8 (a binary file?); a graph file is what amp.save_graph writes"]
            ) from None  # fmt: skip
    if not raw.strip():
        raise GraphFileError(source, ["expected JSON text, found an empty file"])
    try:
        data = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise GraphFileError(
            source, [f"not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}; fix the text there"]
        ) from None
    except _StrictJSONError as exc:
        raise GraphFileError(source, [str(exc)]) from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise GraphFileError(source, [f"not valid JSON for a graph: {exc}"]) from None
    except RecursionError:
        raise GraphFileError(source, [_too_deep("more levels than the parser allows")]) from None
    if nesting(data, MAX_NESTING) > MAX_NESTING:
        raise GraphFileError(source, [_too_deep(f"more than {MAX_NESTING} levels")])
    return data


class _StrictJSONError(AmpError, ValueError):
    """NaN, Infinity or an overflowing number in graph JSON (turned into a GraphFileError)."""


def _refuse_constant(name: str) -> Any:
    raise _StrictJSONError(f"expected strict JSON, found {name}; NaN and Infinity are not JSON numbers: write a number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _StrictJSONError(f"expected a number that fits a 64-bit float, found {text[:40]}; write a smaller number")
    return value


def _too_deep(found: str) -> str:
    return (
        f"expected JSON nested at most {MAX_NESTING} levels deep, found {found}; a graph needs about 6 "
        "(flatten the node's meta)"
    )


def _binary_kind(raw: bytes) -> str | None:
    """Name what a binary file is, when it is a kind people mistake for a graph file."""
    if raw[:1] == b"\x80" and raw[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return f"this is a Python pickle, not JSON; {_PICKLE_HINT}"
    if raw[:4] == b"PK\x03\x04":
        return "this is a zip archive (an .npz of parameters?), not graph JSON; load parameters with amp.load_params"
    if raw[:6] == b"\x93NUMPY":
        return "this is a numpy .npy array, not graph JSON"
    return None


def save_params(params: dict[str, dict[str, np.ndarray]], path: str | Path) -> None:
    """Parameters as an .npz of arrays named ``node/param``."""
    flat = {f"{node}/{name}": arr for node, group in params.items() for name, arr in group.items()}
    with open(path, "wb") as f:
        np.savez(f, **flat)


def load_params(path: str | Path, graph: Graph | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Load parameters saved by :func:`save_params`; with ``graph``, check names and shapes.

    Only plain numeric arrays are read (``allow_pickle=False``): an archive holding pickled objects, a
    pickle file, or anything that is not an .npz archive is refused with a :class:`GraphFileError`.
    """
    params: dict[str, dict[str, np.ndarray]] = {}
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except FileNotFoundError:
        raise GraphFileNotFoundError(str(path), ["no such file; check the path"]) from None
    except OSError as exc:
        raise GraphFileError(str(path), [f"cannot read it: {exc.strerror or exc}"]) from None
    if head[:4] != b"PK\x03\x04":
        kind = _binary_kind(head) or "this is not an .npz archive"
        raise GraphFileError(str(path), [f"expected parameters saved by amp.save_params (.npz); {kind}"])
    try:
        with np.load(path, allow_pickle=False) as data:
            for key in data.files:
                node, _, name = key.rpartition("/")
                if not node:
                    raise GraphFileError(str(path), [f"entry {key!r} is not named 'node/param'"])
                params.setdefault(node, {})[name] = data[key]
    except ValueError as exc:  # numpy's refusal of pickled object arrays (allow_pickle=False), bad headers
        if isinstance(exc, GraphFileError):
            raise
        raise GraphFileError(str(path), [f"refused: {exc}; {_PICKLE_HINT}"]) from None
    except (OSError, EOFError, KeyError, zipfile.BadZipFile) as exc:  # a damaged archive
        raise GraphFileError(str(path), [f"not a readable .npz archive ({type(exc).__name__}: {exc})"]) from None
    if graph is not None:
        for node in graph.parameterized():
            shapes = graph.nodes[node].op.param_shapes()
            found = {k: v.shape for k, v in params.get(node, {}).items()}
            if found != shapes:
                raise GraphError(
                    f"{path}: parameters of {graph.nodes[node].describe()}: expected shapes {shapes}, found {found}"
                )
    return params
