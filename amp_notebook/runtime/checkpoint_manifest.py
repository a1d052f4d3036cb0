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

from amp_notebook.ir.graph import Graph, GraphError
from amp_notebook.ir.ops.base import OpError
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

    def array(where: str, r: dict[str, Any], kinds: str = "f", ndim: int | None = None) -> np.ndarray:
        a = arrays.get(r["array"])
        if a is None:
            problems.append(f"{where}: the archive has no array {r['array']!r}")
        elif list(a.shape) != r["shape"] or a.dtype.name != r["dtype"]:
            problems.append(
                f"{where}: the manifest says {r['dtype']}{r['shape']}, the array is {a.dtype.name}{list(a.shape)}"
            )
        elif a.dtype.kind not in kinds or (ndim is not None and a.ndim != ndim):
            problems.append(
                f"{where}: expected a {ndim or 'n'}-d array of kind {kinds!r}, found {a.dtype.name}{list(a.shape)}"
            )
        else:
            return a
        return np.zeros(0)

    graph = Graph("unreadable")
    try:
        graph = graph_from_dict(m["graph"])
    except (GraphError, OpError, TypeError, ValueError, KeyError, AttributeError) as exc:  # the graph JSON's own errors
        problems.append(f"graph: {exc}")
    shapes = {n: graph.nodes[n].op.param_shapes() for n in graph.parameterized()}
    nodes: dict[str, NodeState] = {}
    for name, entry in m["nodes"].items():
        where = f"nodes[{name!r}]"
        params = {k: array(f"{where}.params.{k}", r) for k, r in entry["params"].items()}
        if name not in shapes:
            problems.append(f"{where}: the graph has no parameterized node {name!r}")
        elif {k: tuple(v.shape) for k, v in params.items()} != shapes[name]:
            problems.append(
                f"{where}: parameters { ({k: tuple(v.shape) for k, v in params.items()}) }, the graph's "
                f"{graph.nodes[name].describe()} has {shapes[name]}"
            )
        opt = entry["optimizer"]
        moments = {k: array(f"{where}.optimizer.{k}", r) for k, r in opt["arrays"].items()}
        expected = {"sgd": (), "momentum": ("",), "adam": (".m", ".v")}[opt["name"]]
        for k, v in moments.items():
            base = next(
                (k[: len(k) - len(s)] for s in expected if k.endswith(s) and k[: len(k) - len(s)] in params), None
            )
            if base is None or v.shape != params[base].shape:
                problems.append(f"{where}.optimizer: unexpected {opt['name']} state {k!r} {list(v.shape)}")
        scalars = dict(opt["scalars"])
        if set(scalars) - ({"t"} if opt["name"] == "adam" else set()) or not all(
            float(s).is_integer() and s >= 0 for s in scalars.values()
        ):
            problems.append(f"{where}.optimizer: unexpected scalars {scalars}")
        grads: dict[str, np.ndarray] = {}
        g = entry["gradients"]
        if g is not None:
            grads = {k: array(f"{where}.gradients.{k}", r) for k, r in g["arrays"].items()}
            if {k: v.shape for k, v in grads.items()} != {k: v.shape for k, v in params.items()}:
                problems.append(f"{where}.gradients: expected one array per parameter, shaped like it")
        nodes[name] = NodeState(
            entry["version"],
            params,
            opt["name"],
            moments,
            scalars,
            grads,
            g["count"] if g else 0,
            tuple(g["keys"]) if g else (),
        )
    missing = sorted(set(shapes) - set(nodes))
    if missing:
        problems.append(f"nodes: no state for the graph's parameterized node(s) {missing}")
    d = m["dataset"]
    train_sizes = array("dataset.train_sizes", d["train_sizes"], "iu", 1)
    val_sizes = array("dataset.val_sizes", d["val_sizes"], "iu", 1)
    p = m["position"]
    rem = [
        array(f"position.remaining.{k}", p["remaining"][k], kind, 1)
        for k, kind in (("key", "iu"), ("train", "b"), ("index", "iu"))
    ]
    remaining: tuple[tuple[int, bool, int], ...] = ()
    if len({len(r) for r in rem}) != 1:
        problems.append("position.remaining: key, train and index differ in length")
    else:
        remaining = tuple((int(k), bool(t), int(i)) for k, t, i in zip(*rem, strict=True))
        for key, train, i in remaining:
            limit = len(train_sizes if train else val_sizes)
            if not 0 <= i < limit or not 0 <= key < p["next_key"]:
                problems.append(f"position.remaining: key {key} ({'train' if train else 'val'}[{i}]) is out of range")
                break
        if len({k for k, _, _ in remaining}) != len(remaining):
            problems.append("position.remaining: a key id appears twice")
        if remaining and p["epoch"] < 0:
            problems.append("position: keys remain but no epoch has begun")
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
    return dict(
        graph=graph,
        config=dict(m["config"]),
        optimizer=dict(m["optimizer"]),
        nodes=nodes,
        position=Position(p["epoch"], remaining, p["next_key"], p["next_flush"], state),
        dataset=DataFingerprint(d["name"], train_sizes, val_sizes, d["digest"]),
        history=history,
        progress=progress,
        meta=dict(m["meta"]),
        created=m["created"],
    )


__all__ = ["DataFingerprint", "NodeState", "Position", "from_manifest", "to_manifest"]
