"""What every backend shares: the compiled plan, node contexts, workers, controller and epoch metrics.

A backend only moves messages and keeps time; the session turns controller actions into messages
(injecting a key's payloads into its Input nodes, sending update messages for a flush), does the
epoch-end work (replica averaging, metrics) and collects the losses that loss nodes report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.errors import AmpError
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.message import FWD, UPDATE, Message, State
from amp_notebook.ir.ops import NodeContext
from amp_notebook.runtime.controller import Action, Admit, Controller, EpochEnd, Finish, Flush, KeyInfo
from amp_notebook.runtime.optim import Optimizer
from amp_notebook.runtime.placement import place
from amp_notebook.runtime.plan import Plan, average_replicas, compile_plan, end_epoch_optimizers
from amp_notebook.runtime.worker import Worker
from amp_notebook.trace.buffers import DEFAULT_CAPACITY, WorkerBuffer

PRIORITIES = ("backward_first", "fifo")
RECENT_DECAY = 0.95  # weight of the past in the moving averages of the training loss and accuracy
"""How a worker orders its inbox: backward (and update) messages before forward ones, as in the paper's
appendix A (less staleness, fewer cached activations), or plain arrival order. With several nodes per
worker, strict backward-first can make the workers take turns: one drains its backward work while the
other starves of forward work; arrival order keeps both fed (``amp-notebook bench speedup`` shows both)."""


class DataError(AmpError, ValueError):
    """A dataset that does not fit the graph's inputs."""


@dataclass
class RunConfig:
    workers: int = 2
    mode: str = "amp"
    max_active_keys: int = 4
    min_update_frequency: int = 1
    epochs: int = 1
    seed: int = 0
    dtype: str = "float32"
    trace: bool = True
    validate: bool = True
    shuffle: bool = True
    placement: dict[str, int] = field(default_factory=dict)
    trace_capacity: int | None = DEFAULT_CAPACITY  # trace rows kept per worker; None keeps every row
    placement_strategy: str = "round_robin"
    priority: str = "backward_first"


@dataclass
class EpochStats:
    epoch: int
    train_loss: float = 0.0
    train_accuracy: float | None = None
    train_instances: int = 0
    val_loss: float | None = None
    val_accuracy: float | None = None
    val_instances: int = 0
    end_s: float = 0.0
    _sums: dict[str, float] = field(default_factory=dict, repr=False)

    def add(self, train: bool, report: dict[str, Any]) -> None:
        prefix = "train" if train else "val"
        n = report["n"]
        s = self._sums
        s[prefix + "_n"] = s.get(prefix + "_n", 0) + n
        s[prefix + "_loss"] = s.get(prefix + "_loss", 0.0) + report["loss"] * n
        if "correct" in report:
            s[prefix + "_correct"] = s.get(prefix + "_correct", 0) + report["correct"]

    def finish(self, end_s: float) -> None:
        s = self._sums
        self.end_s = end_s
        if s.get("train_n"):
            self.train_instances = int(s["train_n"])
            self.train_loss = s["train_loss"] / s["train_n"]
            if "train_correct" in s:
                self.train_accuracy = s["train_correct"] / s["train_n"]
        if s.get("val_n"):
            self.val_instances = int(s["val_n"])
            self.val_loss = s["val_loss"] / s["val_n"]
            if "val_correct" in s:
                self.val_accuracy = s["val_correct"] / s["val_n"]

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


class Session:
    def __init__(
        self,
        graph: Graph,
        dataset: Dataset,
        config: RunConfig,
        optimizer: Optimizer | None = None,
        params: dict[str, dict[str, np.ndarray]] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        graph.validate(require_loss=True)
        self.graph = graph
        self.dataset = dataset
        self.config = config
        self.dtype = np.dtype(config.dtype)
        if config.priority not in PRIORITIES:
            raise ValueError(f"priority: expected one of {PRIORITIES}, got {config.priority!r}")
        placement = place(graph, config.workers, config.placement, config.placement_strategy)
        self.plan: Plan = compile_plan(graph, placement, config.workers, config.min_update_frequency, optimizer)
        check_dataset(self.plan, dataset)
        initial = params if params is not None else graph.init_params(config.seed, self.dtype)
        self.contexts: list[NodeContext] = []
        for i, name in enumerate(self.plan.names):
            p = {k: np.array(v, dtype=self.dtype) for k, v in initial.get(name, {}).items()}
            if self.plan.parameterized[i]:
                expected = graph.nodes[name].op.param_shapes()
                found = {k: v.shape for k, v in p.items()}
                if found != expected:
                    raise DataError(f"params for {self.plan.describe(i)}: expected shapes {expected}, found {found}")
            ctx = NodeContext(name, p)
            ctx.grad_inputs = self.plan.grad_inputs[i]
            ctx.grad_outputs = self.plan.grad_outputs[i]
            self.contexts.append(ctx)
        self.controller = Controller(
            dataset, config.mode, config.max_active_keys, config.epochs, config.seed, config.shuffle, config.validate
        )
        self.buffers = [WorkerBuffer(config.trace_capacity) for _ in range(config.workers)]
        self.workers = [
            Worker(
                w, self.plan,
                {i: self.contexts[i] for i in range(len(self.plan.names)) if self.plan.owner[i] == w},
                local_updates=config.mode == "amp", buffer=self.buffers[w], clock=clock,
            )
            for w in range(config.workers)
        ]  # fmt: skip
        self.key_epoch: dict[int, tuple[int, bool]] = {}
        self.history: list[EpochStats] = []
        self.current = EpochStats(0)
        self.recent_loss: float | None = None  # moving averages over training loss reports (live dashboards)
        self.recent_accuracy: float | None = None
        self.keys_done = 0
        self.train_instances_done = 0
        self.on_key_done: Callable[[KeyInfo], None] | None = None
        self.on_epoch: Callable[[EpochStats], bool | None] | None = None

    # ------------------------------------------------------------ actions -> messages
    def inject(self, info: KeyInfo) -> list[Message]:
        """The messages that admit a key: one per Input node, with state (key, **fields)."""
        batch = info.batch
        state = State(key=info.key, **batch.fields)
        self.key_epoch[info.key] = (info.epoch, info.train)
        out = []
        for name, node in self.plan.inputs.items():
            op = self.plan.ops[node]
            if op.fill == "zeros":
                payload = np.zeros((batch.size, op.width), dtype=self.dtype)
            else:
                payload = batch.inputs[name]
                if op.dtype == "float" and payload.dtype != self.dtype:
                    payload = payload.astype(self.dtype)
            out.append(Message(node, "in", FWD, payload, state, info.train))
        return out

    def apply(
        self, actions: list[Action], send: Callable[[int, list[Message]], None], now: Callable[[], float]
    ) -> bool:
        """Carry out controller actions: admitted keys and flushes become messages handed to
        ``send(key, messages)`` (the backend counts their credits and delivers them), an epoch end runs
        its work at time ``now()``. Actions that follow from these run first, in order. Returns True once
        the controller says the run is finished."""
        finished = False
        pending = list(actions)
        while pending:
            action = pending.pop(0)
            follow: list[Action] = []
            if isinstance(action, Admit):
                send(action.info.key, self.inject(action.info))
            elif isinstance(action, Flush):
                msgs = self.flush_messages(action.flush_id)
                if msgs:
                    send(action.flush_id, msgs)
                else:  # nothing to update: the flush is complete at once
                    follow = self.controller.on_complete(action.flush_id)
            elif isinstance(action, EpochEnd):
                self.end_epoch(action.epoch, now())
                follow = self.controller.on_epoch_end()
            elif isinstance(action, Finish):
                finished = True
            pending[0:0] = follow
        return finished

    def flush_messages(self, flush_id: int) -> list[Message]:
        state = State(key=flush_id)
        return [Message(i, "", UPDATE, None, state) for i, p in enumerate(self.plan.parameterized) if p]

    # ---------------------------------------------------------------- bookkeeping
    def collect_reports(self) -> None:
        for worker in self.workers:
            reports = worker.reports
            while reports:
                _, report = reports.popleft()
                _, train = self.key_epoch.get(report["key"], (self.current.epoch, True))
                self.current.add(train, report)
                if train:
                    self._follow_recent(report)

    def _follow_recent(self, report: dict[str, Any]) -> None:
        """Exponential moving averages of the training loss (and accuracy) per loss report, for live curves."""
        loss = float(report["loss"])
        self.recent_loss = (
            loss if self.recent_loss is None else RECENT_DECAY * self.recent_loss + (1 - RECENT_DECAY) * loss
        )
        if "correct" in report and report["n"]:
            acc = report["correct"] / report["n"]
            prev = self.recent_accuracy
            self.recent_accuracy = acc if prev is None else RECENT_DECAY * prev + (1 - RECENT_DECAY) * acc

    def key_done(self, key: int) -> None:
        self.collect_reports()
        epoch_train = self.key_epoch.pop(key, None)
        self.keys_done += 1
        info = self.controller.info(key)
        if info is not None:
            if epoch_train and epoch_train[1]:
                self.train_instances_done += info.batch.size
            if self.on_key_done is not None:
                self.on_key_done(info)

    def end_epoch(self, epoch: int, now_s: float) -> EpochStats:
        """Epoch-end work while no message is in flight: replica averaging and the epoch's metrics."""
        self.collect_reports()
        self.average_replicas()
        end_epoch_optimizers(self.plan)
        stats = self.current
        stats.epoch = epoch
        stats.finish(now_s)
        self.history.append(stats)
        self.current = EpochStats(epoch + 1)
        if self.on_epoch is not None and self.on_epoch(stats):
            self.controller.stop()  # the callback asked to stop: admit no further epoch
        return stats

    def average_replicas(self) -> None:
        average_replicas(self.plan, self.contexts)

    def params(self) -> dict[str, dict[str, np.ndarray]]:
        """A copy of the current parameters of every parameterized node."""
        return {
            self.plan.names[i]: {k: v.copy() for k, v in self.contexts[i].params.items()}
            for i, p in enumerate(self.plan.parameterized)
            if p
        }


def check_dataset(plan: Plan, dataset: Dataset) -> None:
    """Fail before any thread starts if a key lacks a payload some Input node needs."""
    needed = [name for name, i in plan.inputs.items() if plan.ops[i].fill is None]
    for split, batches in (("train", dataset.train), ("val", dataset.val)):
        for j, batch in enumerate(batches):  # every key: a dict lookup each, cheap next to a run
            if not isinstance(batch, Batch):
                raise DataError(f"dataset {dataset.name!r} {split}[{j}]: expected a Batch, got {type(batch).__name__}")
            missing = [n for n in needed if n not in batch.inputs]
            if missing:
                raise DataError(
                    f"dataset {dataset.name!r} {split}[{j}] key has no payload for Input node(s) {missing} "
                    f"(it has {sorted(batch.inputs)}); name the graph's inputs after the data or add the payloads"
                )
    for name, i in plan.inputs.items():
        op = plan.ops[i]
        if op.fill is None and op.width is not None:
            x = dataset.train[0].inputs[name]
            if x.shape[-1] != op.width:
                raise DataError(
                    f"Input {name!r} declares width {op.width} but the data's payload has shape {x.shape}; "
                    "fix the width or the data"
                )


__all__ = ["DataError", "EpochStats", "RunConfig", "Session", "check_dataset"]
