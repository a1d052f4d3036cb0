"""A checkpoint's parts, and their file form: the JSON manifest plus named arrays.

:func:`to_manifest` turns a :class:`~amp_notebook.runtime.checkpoint.Checkpoint` into the manifest (JSON,
the structure ``checkpoint.schema.json`` publishes) and the arrays it names (parameters, optimizer
moments, pending gradients, the remaining key order, the dataset's key sizes); :func:`from_manifest` goes
back, from a manifest that already fits the schema, and checks what a schema cannot: that every array it
names exists with the declared shape and dtype, that the parameters fit the graph's nodes, that optimizer
moments fit their parameters, that the remaining keys lie inside the dataset's splits, and that the RNG
state is one numpy accepts. Every problem is collected and raised together as a
:class:`~amp_notebook.runtime.checkpoint_file.CheckpointError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.errors import AmpError
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.serialize import graph_from_dict, graph_to_dict
from amp_notebook.optim import make_optimizer
from amp_notebook.runtime.checkpoint_file import FORMAT, FORMAT_VERSION, CheckpointError
from amp_notebook.runtime.session import EpochStats

if TYPE_CHECKING:
    from amp_notebook.runtime.checkpoint import Checkpoint


@dataclass(frozen=True)
class NodeState:
    """One parameterized node's state: parameters, version, optimizer memory, pending gradients."""

    version: int
    params: dict[str, np.ndarray]
    optimizer: str
    optimizer_arrays: dict[str, np.ndarray] = field(default_factory=dict)
    optimizer_scalars: dict[str, float] = field(default_factory=dict)
    gradients: dict[str, np.ndarray] = field(default_factory=dict)  # accumulated since the last update
    gradient_count: int = 0
    gradient_keys: tuple[int, ...] = ()


@dataclass(frozen=True)
class Position:
    """Where the data stream stands: ``epoch`` in progress (or last completed when ``remaining`` is
    empty), its keys not yet admitted as ``(key id, train, index in its split)``, counters and the RNG."""

    epoch: int
    remaining: tuple[tuple[int, bool, int], ...]
    next_key: int
    next_flush: int
    rng_state: dict[str, Any]


@dataclass(frozen=True)
class DataFingerprint:
    """Which dataset a checkpoint trained on: its name, the sizes of its keys and a digest of their payloads, so that
    resuming on other data is refused."""

    name: str
    train_sizes: np.ndarray
    val_sizes: np.ndarray
    digest: str


def to_manifest(ckpt: Checkpoint) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    from amp_notebook import __version__

    arrays: dict[str, np.ndarray] = {}

    def ref(name: str, array: np.ndarray) -> dict[str, Any]:
        member = name
        n = 1
        while member in arrays:  # node names may contain '/', so two paths could collide: keep both
            n += 1
            member = f"{name}~{n}"
        arrays[member] = array
        return {"array": member, "shape": list(array.shape), "dtype": array.dtype.name}

    nodes = {}
    for name, node in ckpt.nodes.items():
        gradients = None
        if node.gradient_count:
            gradients = {
                "count": node.gradient_count,
                "keys": list(node.gradient_keys),
                "arrays": {k: ref(f"grads/{name}/{k}", v) for k, v in node.gradients.items()},
            }
        nodes[name] = {
            "version": node.version,
            "params": {k: ref(f"params/{name}/{k}", v) for k, v in node.params.items()},
            "optimizer": {
                "name": node.optimizer,
                "scalars": dict(node.optimizer_scalars),
                "arrays": {k: ref(f"optimizer/{name}/{k}", v) for k, v in node.optimizer_arrays.items()},
            },
            "gradients": gradients,
        }
    p = ckpt.position
    rem = np.array(p.remaining, dtype=np.int64).reshape(-1, 3)
    rng = p.rng_state
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "created": ckpt.created,
        "amp_notebook": __version__,
        "meta": ckpt.meta,
        "graph": graph_to_dict(ckpt.graph),
        "config": ckpt.config,
        "optimizer": ckpt.optimizer,
        "nodes": nodes,
        "position": {
            "epoch": p.epoch,
            "next_key": p.next_key,
            "next_flush": p.next_flush,
            "remaining": {
                "key": ref("position/key", rem[:, 0]),
                "train": ref("position/train", rem[:, 1].astype(bool)),
                "index": ref("position/index", rem[:, 2]),
            },
            "rng": {
                "bit_generator": rng["bit_generator"],
                "has_uint32": rng["has_uint32"],
                "uinteger": rng["uinteger"],
                "state": {"state": str(rng["state"]["state"]), "inc": str(rng["state"]["inc"])},
            },
        },
        "dataset": {
            "name": ckpt.dataset.name,
            "digest": ckpt.dataset.digest,
            "train_sizes": ref("dataset/train_sizes", ckpt.dataset.train_sizes),
            "val_sizes": ref("dataset/val_sizes", ckpt.dataset.val_sizes),
        },
        "progress": {**ckpt.progress, "history": [s.as_dict() for s in ckpt.history]},
    }
    return manifest, arrays


def from_manifest(m: dict[str, Any], arrays: dict[str, np.ndarray], source: str) -> dict[str, Any]:
    """The fields of a :class:`Checkpoint` from a manifest that fits the schema, after checking that its parts
    agree (array shapes and dtypes, parameters against the graph, the position against the dataset's sizes)."""
    problems: list[str] = []
    array = _ArrayLookup(arrays, problems)
    graph = Graph("unreadable")
    try:
        graph = graph_from_dict(m["graph"])
    except AmpError as exc:  # the graph JSON's own problems (schema, ops, edges), each listed
        problems.append(f"graph: {exc}")
    shapes = {n: graph.nodes[n].op.param_shapes() for n in graph.parameterized()}
    nodes = {name: _node_state(name, entry, shapes, array, problems) for name, entry in m["nodes"].items()}
    missing = sorted(set(shapes) - set(nodes))
    if missing:
        problems.append(f"nodes: no state for the graph's parameterized node(s) {missing}")
    d, p = m["dataset"], m["position"]
    sizes = {train: array(f"dataset.{split}_sizes", d[f"{split}_sizes"], "iu", 1)
             for train, split in ((True, "train"), (False, "val"))}  # fmt: skip
    remaining = _remaining(p, sizes, array, problems)
    rng = p["rng"]
    state = {**rng, "state": {"state": int(rng["state"]["state"]), "inc": int(rng["state"]["inc"])}}
    try:
        np.random.PCG64().state = state
    except (ValueError, TypeError, OverflowError) as exc:
        problems.append(f"position.rng: not a PCG64 state ({exc})")
    try:
        make_optimizer(m["optimizer"])
    except ValueError as exc:
        problems.append(f"optimizer: {exc}")
    if problems:
        raise CheckpointError(source, problems)
    progress = dict(m["progress"])
    history = [EpochStats(**s) for s in progress.pop("history")]
    return {
        "graph": graph, "config": dict(m["config"]), "optimizer": dict(m["optimizer"]), "nodes": nodes,
        "position": Position(p["epoch"], remaining, p["next_key"], p["next_flush"], state),
        "dataset": DataFingerprint(d["name"], sizes[True], sizes[False], d["digest"]), "history": history,
        "progress": progress, "meta": dict(m["meta"]), "created": m["created"],
    }  # fmt: skip


class _ArrayLookup:
    """The array a manifest entry names, checked against its declared shape and dtype and an expected kind;
    each problem is noted and an empty array stands in, so that checking goes on and lists them all."""

    def __init__(self, arrays: dict[str, np.ndarray], problems: list[str]) -> None:
        self.arrays, self.problems = arrays, problems

    def __call__(self, where: str, ref: dict[str, Any], kinds: str = "f", ndim: int | None = None) -> np.ndarray:
        a = self.arrays.get(ref["array"])
        found = "" if a is None else f"{a.dtype.name}{list(a.shape)}"
        if a is None:
            self.problems.append(f"{where}: the archive has no array {ref['array']!r}")
        elif list(a.shape) != ref["shape"] or a.dtype.name != ref["dtype"]:
            self.problems.append(f"{where}: the manifest says {ref['dtype']}{ref['shape']}, the array is {found}")
        elif a.dtype.kind not in kinds or (ndim is not None and a.ndim != ndim):
            self.problems.append(f"{where}: expected a {ndim or 'n'}-d array of kind {kinds!r}, found {found}")
        else:
            return a
        return np.zeros(0)


def _node_state(
    name: str, entry: dict[str, Any], shapes: dict[str, dict[str, tuple[int, ...]]], array: _ArrayLookup,
    problems: list[str],
) -> NodeState:  # fmt: skip
    where = f"nodes[{name!r}]"
    params = {k: array(f"{where}.params.{k}", r) for k, r in entry["params"].items()}
    found = {k: tuple(v.shape) for k, v in params.items()}
    if name not in shapes:
        problems.append(f"{where}: the graph has no parameterized node {name!r}")
    elif found != shapes[name]:
        problems.append(f"{where}: parameters {found}, but the graph's node {name!r} has {shapes[name]}")
    opt = entry["optimizer"]
    moments = {k: array(f"{where}.optimizer.{k}", r) for k, r in opt["arrays"].items()}
    for k, v in moments.items():  # per parameter P: "P" (momentum) or "P.<what>" (Adam's moments, buffers)
        base = k if k in params else k.rpartition(".")[0]
        if opt["name"] == "sgd" or base not in params or params[base].shape != v.shape:
            problems.append(f"{where}.optimizer: unexpected {opt['name']} state {k!r} {list(v.shape)}")
    scalars = dict(opt["scalars"])
    allowed = {"t"} if opt["name"] == "adam" else set()
    if set(scalars) - allowed or not all(float(v).is_integer() and v >= 0 for v in scalars.values()):
        problems.append(f"{where}.optimizer: unexpected scalars {scalars} (allowed: a step count {sorted(allowed)})")
    g = entry["gradients"]
    grads = {} if g is None else {k: array(f"{where}.gradients.{k}", r) for k, r in g["arrays"].items()}
    if g is not None and {k: v.shape for k, v in grads.items()} != {k: v.shape for k, v in params.items()}:
        problems.append(f"{where}.gradients: expected one array per parameter, shaped like it")
    return NodeState(entry["version"], params, opt["name"], moments, scalars, grads,
                     g["count"] if g else 0, tuple(g["keys"]) if g else ())  # fmt: skip


def _remaining(
    p: dict[str, Any], sizes: dict[bool, np.ndarray], array: _ArrayLookup, problems: list[str]
) -> tuple[tuple[int, bool, int], ...]:
    """The position's keys not yet admitted, as (key, train, index), each inside its split."""
    columns = [array(f"position.remaining.{k}", p["remaining"][k], kind, 1)
               for k, kind in (("key", "iu"), ("train", "b"), ("index", "iu"))]  # fmt: skip
    if len({len(c) for c in columns}) != 1:
        problems.append("position.remaining: key, train and index differ in length")
        return ()
    remaining = tuple((int(k), bool(t), int(i)) for k, t, i in zip(*columns, strict=True))
    for key, train, i in remaining:
        if not 0 <= i < len(sizes[train]) or not 0 <= key < p["next_key"]:
            problems.append(f"position.remaining: key {key} ({'train' if train else 'val'}[{i}]) is out of range")
            break
    if len({k for k, _, _ in remaining}) != len(remaining):
        problems.append("position.remaining: a key id appears twice")
    if remaining and p["epoch"] < 0:
        problems.append("position: keys remain but no epoch has begun")
    return remaining


__all__ = ["DataFingerprint", "NodeState", "Position", "from_manifest", "to_manifest"]
