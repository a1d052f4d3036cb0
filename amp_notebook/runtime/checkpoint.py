"""Checkpoints: everything a run needs to go on later, taken while no key is in flight.

What a checkpoint holds (:class:`Checkpoint`):

* the graph (as JSON), the run's settings that a resumed run takes (the :class:`RunConfig` settings
  declared ``resumed``; the optimizer spec in an entry of its own, which the nodes' optimizer state
  belongs to), so ``amp.resume`` can rebuild the run;
* per parameterized node: its parameters, its ``version`` (updates so far: staleness goes on counting
  from there), its optimizer's memory (momentum, Adam's moments and step count) and, in ``amp`` mode, the
  gradients it has accumulated toward its next update;
* the data position: the epoch, its keys not yet admitted (numbered, in order, by their index in the
  dataset), the next key and flush numbers and the RNG state that shuffles the next epoch's keys; plus a
  fingerprint of the dataset (key sizes and a digest of the contents) that the position refers to;
* progress: the completed epochs' statistics, the running epoch's sums, the counters the status shows.

When. :func:`capture` reads a session between two events of its driver, when no key is in flight and no
flush is pending: then no node holds a cache, a join or a forward version, and nothing is half done. A
finished run is always in that state (``TrainResult.save_checkpoint``); a running one gets there when its
admission is held and its keys drain (``Run.save``: pause admission, drain, capture, go on); an epoch end
is too (``train(..., checkpoint=path)`` saves there every ``checkpoint_every`` epochs).

Resuming. :func:`restore` puts a fresh session (built with the checkpoint's parameters) at the checkpoint's
state before any thread starts. It first lists every way the checkpoint does not fit the session (other
nodes, kinds, configs, edges or parameter shapes; another optimizer; other data; no epochs left) and
raises :class:`CheckpointError` with all of them, changing nothing. Learning-rate schedules go on:
``lr_decay`` is applied once per epoch the checkpoint completed. In ``sync`` mode with the same settings
a resumed run repeats the uninterrupted run bit for bit (same key order, same arithmetic).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.data.batch import Dataset
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.serialize import graph_from_dict, graph_to_dict
from amp_notebook.runtime.checkpoint_file import CheckpointError, read_archive, write_archive
from amp_notebook.runtime.checkpoint_manifest import (
    DataFingerprint,
    NodeState,
    Position,
    from_manifest,
    to_manifest,
)
from amp_notebook.runtime.config import RunConfig, Setting, json_schema
from amp_notebook.runtime.controller import KeyInfo
from amp_notebook.runtime.plan import end_epoch_optimizers
from amp_notebook.runtime.session import EpochStats

if TYPE_CHECKING:
    from amp_notebook.runtime.session import Session

OWN_ENTRY = ("optimizer",)  # resumed settings the manifest keeps in an entry of their own, not in "config"


def in_config(s: Setting) -> bool:
    """Whether a checkpoint's ``config`` holds the setting: those a resumed run takes, but for OWN_ENTRY."""
    return s.resumed and s.name not in OWN_ENTRY


RESUMED_SETTINGS = tuple(s.name for s in RunConfig.settings() if s.resumed)


def config_schema() -> dict[str, Any]:
    """The JSON Schema of a manifest's ``config`` entry, from the declarations; ``checkpoint.schema.json``
    publishes a copy, which a test holds equal to this."""
    return {**json_schema(in_config), "description": CONFIG_DESCRIPTION}


CONFIG_DESCRIPTION = (
    "the settings a resumed run takes (RunConfig fields declared resumed; an absent one takes its default), "
    "generated from their declarations"
)


@dataclass(frozen=True)
class Checkpoint:
    """A run's complete state between two keys; see the module docstring. ``load_checkpoint(path)`` reads
    one, ``save(path)`` writes it, ``amp.resume(checkpoint, data, epochs=...)`` or
    ``amp.train(..., resume=checkpoint)`` trains on from it."""

    graph: Graph
    config: dict[str, Any]
    optimizer: dict[str, Any]
    nodes: dict[str, NodeState]
    position: Position
    dataset: DataFingerprint
    history: list[EpochStats]
    progress: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    created: str = ""

    @property
    def params(self) -> dict[str, dict[str, np.ndarray]]:
        """The parameters, as ``train(..., params=...)`` takes them (to start afresh from them)."""
        return {name: dict(node.params) for name, node in self.nodes.items()}

    @property
    def epochs_completed(self) -> int:
        return len(self.history)

    def run_config(self) -> RunConfig:
        """The run's settings that a resumed run takes (the others at their defaults); a checkpoint written
        before a setting existed gives it its default."""
        return RunConfig.from_json({**self.config, "optimizer": dict(self.optimizer)}, "checkpoint config")

    def train_options(self) -> dict[str, Any]:
        """The settings a resumed run takes, as ``amp.train`` keyword arguments (what ``amp.resume`` starts from)."""
        config = self.run_config()
        return {name: getattr(config, name) for name in RESUMED_SETTINGS}

    def save(self, path: str | Path) -> Path:
        """Write this checkpoint to ``path`` atomically (module ``checkpoint_file``); returns the path."""
        manifest, arrays = to_manifest(self)
        return write_archive(path, manifest, arrays)

    def problems(self, graph: Graph, dataset: Dataset | None = None) -> list[str]:
        """Every way this checkpoint does not fit ``graph`` (and ``dataset``); empty when it fits."""
        found = graph_differences(self.graph, graph)
        for name, node in self.nodes.items():
            if name in graph.nodes:
                expected = graph.nodes[name].op.param_shapes()
                shapes = {k: tuple(v.shape) for k, v in node.params.items()}
                if shapes != expected and not any(name in p for p in found):
                    found.append(
                        f"node {name!r}: the checkpoint's parameters have shapes {shapes}, the graph's {expected}"
                    )
        if dataset is not None:
            found += dataset_differences(self.dataset, fingerprint(dataset))
        return found

    def __repr__(self) -> str:
        p = self.position
        where = f"epoch {p.epoch}, {len(p.remaining)} keys left in it" if p.remaining else "between epochs"
        return (
            f"Checkpoint(graph={self.graph.name!r}, {self.epochs_completed} epochs completed, {where}, "
            f"{len(self.nodes)} parameterized nodes, created={self.created!r})"
        )


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint written by ``run.save`` / ``TrainResult.save_checkpoint``; never runs code from it.
    Raises :class:`CheckpointError` listing what is wrong with a damaged or foreign file."""
    manifest, arrays = read_archive(path)
    return Checkpoint(**from_manifest(manifest, arrays, str(path)))


# --------------------------------------------------------------------------------------- session <-> state
def capture(session: Session, meta: dict[str, Any] | None = None) -> Checkpoint:
    """The session's state as a :class:`Checkpoint` (copies); the session must have no key in flight."""
    controller = session.controller
    busy = [f"keys {sorted(controller.active)[:10]} are in flight"] if controller.active else []
    busy += ["a flush is pending"] if controller.flushing else []
    plan = session.plan
    for i, ctx in enumerate(session.contexts):
        if ctx.cache or ctx.joins or ctx.fwd_version:
            busy.append(f"{plan.describe(i)} holds state for a key in flight")
    if busy:
        raise CheckpointError(
            "checkpoint",
            [f"cannot take a checkpoint now: {b}" for b in busy]
            + ["a checkpoint is taken with no key in flight: use run.save(path), which drains the run first"],
        )
    nodes = {}
    for i, ctx in enumerate(session.contexts):
        if not plan.parameterized[i]:
            continue
        optimizer = plan.optimizers[i]
        assert optimizer is not None
        pending = ctx.n_grads > 0
        nodes[plan.names[i]] = NodeState(
            version=ctx.version,
            params={k: v.copy() for k, v in ctx.params.items()},
            optimizer=optimizer.name,
            optimizer_arrays={k: v.copy() for k, v in ctx.opt_state.items() if isinstance(v, np.ndarray)},
            optimizer_scalars={k: v for k, v in ctx.opt_state.items() if not isinstance(v, np.ndarray)},
            gradients={k: v.copy() for k, v in ctx.grads.items()} if pending else {},
            gradient_count=ctx.n_grads,
            gradient_keys=tuple(sorted(ctx.grad_keys)) if pending else (),
        )
    index = _batch_index(session.dataset)
    remaining = tuple((k.key, k.train, index[k.train][id(k.batch)]) for k in controller.remaining())
    state = controller.rng.bit_generator.state
    current = session.current
    return Checkpoint(
        graph=graph_from_dict(graph_to_dict(session.graph)),  # a copy: the user may edit the live graph
        config=session.config.as_json(in_config),
        optimizer=dict(session.optimizer_spec),
        nodes=nodes,
        position=Position(controller.epoch, remaining, controller.next_key, controller.next_flush, state),
        dataset=session_fingerprint(session),
        history=[EpochStats(**s.as_dict()) for s in session.history],
        progress={
            "current_epoch": current.epoch,
            "current_sums": dict(current._sums),
            "keys_done": session.keys_done,
            "train_instances_done": session.train_instances_done,
            "recent_loss": session.recent_loss,
            "recent_accuracy": session.recent_accuracy,
            "nonfinite_skipped": session.nonfinite_skipped,
            "epoch_start_skipped": session.skipped_at_epoch_start,
        },
        meta=dict(meta or {}),
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def restore(session: Session, checkpoint: Checkpoint) -> None:
    """Put a fresh ``session`` (not started; built with ``params=checkpoint.params``) at the checkpoint's
    state. Raises :class:`CheckpointError` listing every mismatch first, and then changes nothing."""
    problems = checkpoint.problems(session.graph, session.dataset)
    plan = session.plan
    for name, node in checkpoint.nodes.items():
        i = plan.index.get(name)
        optimizer = plan.optimizers[i] if i is not None else None
        if optimizer is not None and optimizer.name != node.optimizer:
            problems.append(
                f"node {name!r}: the checkpoint holds {node.optimizer} state but this run updates it with "
                f"{optimizer.name}; pass optimizer={{'name': {node.optimizer!r}, ...}}, or start afresh from "
                "the parameters alone with train(..., params=checkpoint.params)"
            )
    done, epoch, epochs = checkpoint.epochs_completed, checkpoint.position.epoch, session.config.epochs
    if (epochs <= done and not checkpoint.position.remaining) or epochs <= epoch:
        problems.append(
            f"the checkpoint has completed {done} epoch(s) (it is at epoch {epoch}) and this run asks for "
            f"epochs={epochs}, which leaves nothing to do; epochs counts the checkpoint's epochs too: pass more"
        )
    if problems:
        raise CheckpointError("resume", problems)
    dtype = session.dtype
    for name, node in checkpoint.nodes.items():
        ctx = session.contexts[plan.index[name]]
        ctx.version = node.version
        ctx.opt_state = {k: np.array(v, dtype=dtype) for k, v in node.optimizer_arrays.items()}
        ctx.opt_state.update({k: int(v) if float(v).is_integer() else v for k, v in node.optimizer_scalars.items()})
        if node.gradient_count:
            ctx.grads = {k: np.array(v, dtype=dtype) for k, v in node.gradients.items()}
            ctx.n_grads = node.gradient_count
            ctx.grad_keys = set(node.gradient_keys)
    for _ in range(done):  # the learning-rate schedule goes on where it was
        end_epoch_optimizers(plan)
    p = checkpoint.position
    splits = (session.dataset.val, session.dataset.train)
    pending = [KeyInfo(key, p.epoch, train, splits[train][i]) for key, train, i in p.remaining]
    session.controller.restore(p.epoch, pending, p.next_key, p.next_flush, p.rng_state)
    session.history = [EpochStats(**s.as_dict()) for s in checkpoint.history]
    progress = checkpoint.progress
    session.current = EpochStats(progress["current_epoch"])
    session.current._sums.update(progress["current_sums"])
    session.keys_done = progress["keys_done"]
    session.train_instances_done = session.instances_at_start = progress["train_instances_done"]
    session.recent_loss = progress["recent_loss"]
    session.recent_accuracy = progress["recent_accuracy"]
    session.skipped_before = progress["nonfinite_skipped"]
    session.skipped_at_epoch_start = progress["epoch_start_skipped"]


# ----------------------------------------------------------------------------------------- comparisons
def graph_differences(saved: Graph, graph: Graph) -> list[str]:
    """Every structural difference between the checkpoint's graph and ``graph``: nodes, kinds, op configs,
    edges and replica groups (layout ``meta``, worker pins and per-node training settings may differ)."""
    a, b = graph_to_dict(saved), graph_to_dict(graph)
    nodes_a = {n["name"]: n for n in a["nodes"]}
    nodes_b = {n["name"]: n for n in b["nodes"]}
    found = [
        f"node {n!r} ({nodes_a[n]['kind']}) is in the checkpoint's graph but not in this graph"
        for n in nodes_a
        if n not in nodes_b
    ]
    found += [
        f"node {n!r} ({nodes_b[n]['kind']}) is in this graph but not in the checkpoint's"
        for n in nodes_b
        if n not in nodes_a
    ]
    for name in nodes_a.keys() & nodes_b.keys():
        x, y = nodes_a[name], nodes_b[name]
        if x["kind"] != y["kind"]:
            found.append(f"node {name!r}: the checkpoint's is a {x['kind']}, this graph's a {y['kind']}")
            continue
        for key in sorted(x["config"].keys() | y["config"].keys()):
            if x["config"].get(key) != y["config"].get(key):
                found.append(
                    f"node {name!r} ({x['kind']}): {key} is {x['config'].get(key)!r} in the checkpoint, "
                    f"{y['config'].get(key)!r} here"
                )
    edges_a, edges_b = {tuple(e) for e in a["edges"]}, {tuple(e) for e in b["edges"]}
    found += [
        f"edge {s}:{sp} -> {d}:{dp} is in the checkpoint's graph only" for s, sp, d, dp in sorted(edges_a - edges_b)
    ]
    found += [f"edge {s}:{sp} -> {d}:{dp} is in this graph only" for s, sp, d, dp in sorted(edges_b - edges_a)]
    if sorted(map(sorted, a["replica_groups"])) != sorted(map(sorted, b["replica_groups"])):
        found.append(f"replica groups differ: {a['replica_groups']} in the checkpoint, {b['replica_groups']} here")
    return found


def fingerprint(dataset: Dataset) -> DataFingerprint:
    """Key sizes and a digest of every payload and state field, in order (what a position refers to)."""
    digest = hashlib.blake2b(digest_size=32)
    for split in (dataset.train, dataset.val):
        digest.update(f"split {len(split)}".encode())
        for batch in split:
            digest.update(f"{batch.size} {sorted(batch.fields.items())}".encode())
            for name in sorted(batch.inputs):
                x = np.ascontiguousarray(batch.inputs[name])
                digest.update(f"{name} {x.dtype.str} {x.shape}".encode())
                digest.update(memoryview(x).cast("B") if x.size else b"")
    sizes = [np.array([b.size for b in split], dtype=np.int64) for split in (dataset.train, dataset.val)]
    return DataFingerprint(dataset.name, sizes[0], sizes[1], digest.hexdigest())


def session_fingerprint(session: Session) -> DataFingerprint:
    """The session's dataset fingerprint, computed once (datasets do not change during a run)."""
    if session.data_fingerprint is None:
        session.data_fingerprint = fingerprint(session.dataset)
    return session.data_fingerprint


def dataset_differences(saved: DataFingerprint, found: DataFingerprint) -> list[str]:
    problems = []
    if saved.name != found.name:
        problems.append(f"dataset: the checkpoint was taken on {saved.name!r}, this run has {found.name!r}")
    for split, a, b in (("train", saved.train_sizes, found.train_sizes), ("val", saved.val_sizes, found.val_sizes)):
        if len(a) != len(b) or not np.array_equal(a, b):
            problems.append(
                f"dataset: {split} has {len(b)} keys ({int(b.sum())} instances) here, {len(a)} keys "
                f"({int(a.sum())} instances) in the checkpoint"
            )
    if not problems and saved.digest != found.digest:
        problems.append("dataset: same name and key sizes but other contents (the digest differs)")
    if problems:
        problems.append(
            "the checkpoint's key order refers to its dataset's keys by position: resume on the same "
            "data (same loader, same seed), or start afresh with train(..., params=checkpoint.params)"
        )
    return problems


def _batch_index(dataset: Dataset) -> tuple[dict[int, int], dict[int, int]]:
    """(val, train) maps from a batch object's id to its index in its split."""
    return ({id(b): i for i, b in enumerate(dataset.val)}, {id(b): i for i, b in enumerate(dataset.train)})


__all__ = [
    "RESUMED_SETTINGS",
    "Checkpoint",
    "CheckpointError",
    "DataFingerprint",
    "NodeState",
    "Position",
    "capture",
    "dataset_differences",
    "fingerprint",
    "graph_differences",
    "load_checkpoint",
    "restore",
]
