"""What every backend shares: the compiled plan, node contexts, workers, controller, live knobs and epoch metrics.

A backend only moves messages and keeps time; the session turns controller actions into work for it
(admitting a key, whose payloads go into its Input nodes; sending update messages for a flush, registered
with the backend's ledger), turns completed keys and flushes into controller events, does the
epoch-end work (replica averaging, metrics) and collects the losses that loss nodes report. It talks to a
backend only through the :class:`~amp_notebook.runtime.backend.Backend` protocol (``admit``, ``inject``,
``ledger``, ``now``, ``sync_state``, ``epoch_ended``); the settings that may change while a run goes live in its
:class:`~amp_notebook.runtime.knobs.Knobs`, which backends listen to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.engine.choice import PYTHON, EngineChoice
from amp_notebook.errors import AmpError, SettingError
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.message import FWD, UPDATE, Message, State
from amp_notebook.ir.ops import NodeContext
from amp_notebook.optim import Optimizer, make_optimizer
from amp_notebook.runtime.config import RunConfig, default_max_bundle
from amp_notebook.runtime.controller import Action, Controller, Handlers, KeyInfo, carry_out
from amp_notebook.runtime.knobs import Knobs
from amp_notebook.runtime.numerics import Guard
from amp_notebook.runtime.placement import place
from amp_notebook.runtime.plan import Plan, average_replicas, compile_plan, end_epoch_optimizers
from amp_notebook.runtime.restart import Restarts
from amp_notebook.runtime.worker import Worker

if TYPE_CHECKING:
    from amp_notebook.runtime.backend import Backend

RECENT_DECAY = 0.95  # weight of the past in the moving averages of the training loss and accuracy
SIDES = ("train", "val")  # EpochStats' sums per side: "<side>_n", "<side>_loss", "<side>_correct"

# One side's running sums as (instances, loss * instances, correct predictions or None before any is counted)
SideSums = tuple[int, float, int | None]
# What loss reports fold into: (train sums, val sums, recent_loss, recent_accuracy) (Session.fold_reports)
ReportTotals = tuple[SideSums | None, SideSums | None, float | None, float | None]


class DataError(AmpError, ValueError):
    """A dataset that does not fit the graph's inputs."""


@dataclass
class EpochStats:
    """One epoch's metrics: training and validation loss and accuracy (means over instances of what the loss
    nodes reported for the epoch's keys), instances, when the epoch ended and keys skipped for NaN/inf. Owns
    its running sums (:meth:`add`) until :meth:`finish` turns them into means; never reads a trace or a worker."""

    epoch: int
    train_loss: float = 0.0
    train_accuracy: float | None = None
    train_instances: int = 0
    val_loss: float | None = None
    val_accuracy: float | None = None
    val_instances: int = 0
    end_s: float = 0.0
    nonfinite_skipped: int = 0  # keys skipped in this epoch for NaN/inf (on_nonfinite="skip")
    _sums: dict[str, float] = field(default_factory=dict, repr=False)

    def add(self, train: bool, report: dict[str, Any]) -> None:
        """One loss report (key, loss, n and, where the loss counts them, correct)."""
        self.add_many([train], [report["loss"]], [report["n"]], [report.get("correct", -1)])

    def add_many(
        self, trains: Sequence[bool], losses: Sequence[float], ns: Sequence[int], corrects: Sequence[int]
    ) -> None:
        """Loss reports as columns, in order (``corrects[i]`` is -1 where the loss counts none): the sums grow
        one report at a time, so the means do not depend on how the reports were handed over."""
        s = self._sums
        sides = set(trains)
        mixed = len(sides) > 1
        for side, prefix in ((True, "train"), (False, "val")):
            if side not in sides:
                continue
            rows = zip(trains, losses, ns, corrects, strict=True)  # columns of unequal length raise here
            n_sum, loss_sum, correct_sum = s.get(prefix + "_n", 0), s.get(prefix + "_loss", 0.0), None
            for train, loss, n, correct in rows:
                if mixed and train != side:
                    continue
                n_sum += n
                loss_sum += loss * n
                if correct >= 0:
                    correct_sum = (s.get(prefix + "_correct", 0) if correct_sum is None else correct_sum) + correct
            s[prefix + "_n"], s[prefix + "_loss"] = n_sum, loss_sum
            if correct_sum is not None:
                s[prefix + "_correct"] = correct_sum

    def side_sums(self) -> tuple[SideSums, SideSums]:
        """The running sums of each side, training then validation (zeros before any report)."""
        s = self._sums
        return tuple(  # type: ignore[return-value]
            (int(s.get(f"{p}_n", 0)), float(s.get(f"{p}_loss", 0.0)),
             None if s.get(f"{p}_correct") is None else int(s[f"{p}_correct"]))
            for p in SIDES
        )  # fmt: skip

    def set_side_sums(self, sides: Sequence[SideSums | None]) -> None:
        """Running sums that grew elsewhere, as :meth:`add_many` leaves them: a side given as None is left as
        it is (no report of that side came), a correct count of None stays absent."""
        s = self._sums
        for prefix, side in zip(SIDES, sides, strict=True):
            if side is None:
                continue
            n, loss, correct = side
            s[prefix + "_n"], s[prefix + "_loss"] = n, loss
            if correct is not None:
                s[prefix + "_correct"] = correct

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
    """One run's state (module docstring). Owns the plan, the node contexts, the workers' state machines, the
    controller, the live knobs and the epoch metrics; touched only by the driver thread (workers step their own
    ``Worker``); never moves a message itself and never looks inside its backend."""

    def __init__(
        self,
        graph: Graph,
        dataset: Dataset,
        config: RunConfig,
        optimizer: Optimizer | None = None,
        params: dict[str, dict[str, np.ndarray]] | None = None,
        engine: EngineChoice = PYTHON,
        knobs: Knobs | None = None,
        buffers: list[Any] | None = None,
    ) -> None:
        """``knobs`` and ``buffers``: those of a session this one replaces (:meth:`take_state_of`)."""
        graph.validate(require_loss=True)
        self.graph = graph
        self.engine = engine  # what runs the workers of a threaded run (engine/choice.py); its trace buffers
        self.dataset = dataset
        self.config = config
        self.dtype = np.dtype(config.dtype)  # config: validated when it was made
        optimizer = optimizer if optimizer is not None else make_optimizer(config.optimizer)
        placement = place(graph, config.workers, config.placement_overrides, config.placement_strategy)
        self.plan: Plan = compile_plan(graph, placement, config.workers, config.min_update_frequency, optimizer)
        self.optimizer_spec = optimizer.spec()  # as given, before any lr_decay
        check_dataset(self.plan, dataset)
        max_bundle = config.max_bundle
        if max_bundle is None:
            max_bundle = default_max_bundle(config.mode, config.backend)
        caps = resolve_max_bundle(self.plan, max_bundle)
        self.knobs = knobs if knobs is not None else Knobs(config.max_active_keys, self.plan.min_update_frequency, caps)
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
            dataset,
            config.mode,
            config.max_active_keys,
            config.epochs,
            config.seed,
            config.shuffle,
            config.validate,
            average_every=config.average_every,
            # a Ray run averages at epoch ends only (its actors hold the parameters between them)
            average_before_validation=bool(self.plan.replica_groups) and config.backend != "ray",
        )
        self.buffers = buffers or [engine.trace_buffer(config.trace_capacity) for _ in range(config.workers)]
        self.workers = [
            Worker(
                w, self.plan,
                {i: self.contexts[i] for i in range(len(self.plan.names)) if self.plan.owner[i] == w},
                local_updates=config.mode == "amp", knobs=self.knobs, buffer=self.buffers[w], tracing=config.trace,
                bundle_budget_s=config.bundle_budget_s,
            )
            for w in range(config.workers)
        ]  # fmt: skip
        self.numerics = Guard(config.on_nonfinite, self.plan, dataset) if config.on_nonfinite != "ignore" else None
        for worker in self.workers:
            worker.numerics = self.numerics
        self.key_epoch: dict[int, tuple[int, bool]] = {}
        self.history: list[EpochStats] = []
        self.current = EpochStats(0)
        self.recent_loss: float | None = None  # moving averages over training loss reports (live dashboards)
        self.recent_accuracy: float | None = None
        self.keys_done = 0
        self.train_instances_done = 0
        self.instances_at_start = 0  # train_instances_done restored from a checkpoint (not this run's work)
        self.skipped_before = 0  # keys skipped for NaN/inf by the run a checkpoint continues
        self.skipped_at_epoch_start = 0
        self.data_fingerprint: Any = None  # the dataset's, computed at the first checkpoint
        self.on_key_done: Callable[[KeyInfo], None] | None = None
        self.replica_averages = 0  # averages within epochs (average_every, before validation), besides epoch ends
        self.on_epoch: Callable[[EpochStats], bool | None] | None = None
        self.restarts = Restarts(config.max_failures)  # the restart policy and its record (runtime/restart.py)
        # carry_out's handlers, made once (bound methods; the backend they act on is set per call): making
        # four closures per call cost more than the controller's own work for a key
        self._handlers = Handlers(self._admit, self._flush, self._end_epoch, self._average, self._admit_many)
        self._acting_on: Backend | None = None

    # ------------------------------------------------------------ actions -> messages
    def input_messages(self, info: KeyInfo) -> list[Message]:
        """The messages that admit a key: one per Input node (in the plan's order), with state (key, **fields);
        a float Input's payload in the run's dtype, a filling Input's zeros (size x width)."""
        batch = info.batch
        state = State(key=info.key, **batch.fields)
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

    def begin(self, backend: Backend) -> bool:
        """Start the run: the controller's first actions. Returns True if the run is already finished."""
        return self.carry_out(self.controller.start(), backend)

    def take_state_of(self, fresh: Session) -> None:
        """Become ``fresh`` (a session of the same graph, data and settings, built on this one's knobs and
        trace buffers and put at a checkpoint's state): after a lost worker, :func:`~amp_notebook.runtime.
        recover.restart_session` builds it, so the rest of the run is what a resumed run does. What is the
        run's, not the checkpoint's, stays: the trace buffers (the trace goes on), the live knobs (the values
        set while it ran, the controller's ``max_active_keys`` and pause too), the callbacks, the restart record
        and the data's fingerprint."""
        fresh.controller.max_active_keys = self.knobs.max_active_keys
        if self.controller.paused:
            fresh.controller.pause()
        kept = {"on_key_done", "on_epoch", "restarts", "data_fingerprint", "_handlers", "_acting_on"}
        vars(self).update({name: value for name, value in vars(fresh).items() if name not in kept})

    def completed(self, keys: list[int], flushes: list[int], backend: Backend) -> bool:
        """Keys and flushes whose credits reached zero: each key's bookkeeping, then the controller's events
        (the keys' in one call, :meth:`~amp_notebook.runtime.controller.Controller.on_keys_complete`) and the
        actions that follow, in order (the keys they admit in one call to the backend). Returns True once the
        run is finished."""
        for key in keys:
            self.key_done(key)
        finished = self.carry_out(self.controller.on_keys_complete(keys), backend) if keys else False
        for flush_id in flushes:
            finished |= self.carry_out(self.controller.on_flush_complete(flush_id), backend)
        return finished

    def carry_out(self, actions: list[Action], backend: Backend) -> bool:
        """Carry out controller actions: admitted keys and flushes become messages (credits registered,
        then injected), an epoch end runs its work at ``backend.now()``. Returns True once finished."""
        outer, self._acting_on = self._acting_on, backend
        try:
            return carry_out(actions, self._handlers)
        finally:
            self._acting_on = outer

    def _backend(self) -> Backend:
        backend = self._acting_on
        assert backend is not None, "a handler runs only inside carry_out"
        return backend

    def _admit(self, info: KeyInfo) -> list[Action]:
        return self._admit_many([info])

    def _admit_many(self, infos: list[KeyInfo]) -> list[Action]:
        follow: list[Action] = []
        for info, admitted in zip(infos, self._backend().admit(infos), strict=True):
            if admitted:  # its loss reports count for its own epoch and side (read on this thread, later)
                self.key_epoch[info.key] = (info.epoch, info.train)
            else:  # NaN/inf in its inputs, skipped (on_nonfinite="skip")
                self.key_done(info.key)
                follow += self.controller.on_key_complete(info.key)
        return follow

    def _flush(self, flush_id: int) -> list[Action]:
        msgs = self.flush_messages(flush_id)
        if not msgs:  # nothing to update: the flush is complete at once
            return self.controller.on_flush_complete(flush_id)
        backend = self._backend()
        backend.ledger.admit_flush(flush_id, msgs)
        backend.inject(msgs)
        return []

    def _end_epoch(self, epoch: int) -> list[Action]:
        self.end_epoch(epoch, self._backend())
        return self.controller.on_epoch_end()

    def _average(self) -> list[Action]:  # average_every, or before validation: nothing is in flight
        self.average_replicas()
        self.replica_averages += 1
        return self.controller.on_average_complete()

    @property
    def nonfinite_skipped(self) -> int:
        """Keys skipped for NaN/inf so far (``on_nonfinite="skip"``), counting a resumed run's earlier ones."""
        return self.skipped_before + (len(self.numerics.skipped) if self.numerics is not None else 0)

    def flush_messages(self, flush_id: int) -> list[Message]:
        state = State(flush=flush_id)
        return [Message(i, "", UPDATE, None, state) for i, p in enumerate(self.plan.parameterized) if p]

    # ---------------------------------------------------------------- bookkeeping
    def collect_reports(self) -> None:
        """The loss reports the workers left in their queues, worker by worker (:meth:`add_reports`)."""
        for worker in self.workers:
            reports = worker.reports
            if reports:  # Python workers append while this runs: take what is there, from the left
                taken = [reports.popleft()[1] for _ in range(len(reports))]
                self.add_reports([r["key"] for r in taken], [r["loss"] for r in taken], [r["n"] for r in taken],
                                 [r.get("correct", -1) for r in taken])  # fmt: skip

    def add_reports(
        self, keys: Sequence[int], losses: Sequence[float], ns: Sequence[int], corrects: Sequence[int]
    ) -> None:
        """Loss reports as columns, in order (``corrects[i]`` -1 where the loss counts none): into the epoch's
        sums (a key's own train or validation side; a key already done counts as training in the current
        epoch), and, for training keys, the exponential moving averages of the loss and accuracy per report
        that live curves show."""
        key_epoch, default = self.key_epoch, (self.current.epoch, True)
        side = {k: key_epoch.get(k, default)[1] for k in set(keys)}  # a key reports many times (a tree per node)
        trains = [side[k] for k in keys]
        self.current.add_many(trains, losses, ns, corrects)
        recent_loss, recent_accuracy, d = self.recent_loss, self.recent_accuracy, RECENT_DECAY
        for train, loss, n, correct in zip(trains, losses, ns, corrects, strict=True):
            if not train:
                continue
            loss = float(loss)
            recent_loss = loss if recent_loss is None else d * recent_loss + (1 - d) * loss
            if correct >= 0 and n:
                acc = correct / n
                recent_accuracy = acc if recent_accuracy is None else d * recent_accuracy + (1 - d) * acc
        self.recent_loss, self.recent_accuracy = recent_loss, recent_accuracy

    def fold_reports(self, fold: Callable[[float, ReportTotals], ReportTotals | None]) -> None:
        """Loss reports that ``fold`` adds to the epoch's sums and the moving averages, one report at a time in
        the order they were handed over, as :meth:`add_reports` adds them (the native engine's
        ``fold_reports``, which keeps the reports on its side: a Tree-LSTM reports per tree node, and turning
        every report into Python objects cost the driver as much as the rest of its work per key). ``fold``
        gets :data:`RECENT_DECAY` and the totals so far, and returns the new ones, or None when no report
        came. A report counts for its own key's side, which the engine knows from the key's messages."""
        current = self.current
        train, val = current.side_sums()
        out = fold(RECENT_DECAY, (train, val, self.recent_loss, self.recent_accuracy))
        if out is None:
            return
        current.set_side_sums(out[:2])
        self.recent_loss, self.recent_accuracy = out[2], out[3]

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

    def admit_ahead(self, n: int) -> None:
        """A backend with an admission gate (it keeps at most ``max_active_keys`` keys in flight itself) lets
        the controller admit ``n`` keys more in ``amp`` mode, which the gate holds until keys complete
        (:meth:`~amp_notebook.runtime.controller.Controller.admit_ahead`); from the next admission on."""
        self.controller.admit_ahead(n)

    def set_max_active_keys(self, k: int) -> list[Action]:
        """A live change (driver thread): the knob, then the controller, which admits by it; its actions."""
        self.knobs.set_max_active_keys(k)
        return self.controller.set_max_active_keys(k)

    def end_epoch(self, epoch: int, backend: Backend) -> EpochStats:
        """Epoch-end work while no message is in flight: replica averaging (on the contexts the backend has
        brought up to date, then handed back to it), lr schedules and the epoch's metrics."""
        now_s = backend.now()
        self.collect_reports()
        backend.sync_state()
        self.average_replicas()
        end_epoch_optimizers(self.plan)
        backend.epoch_ended([i for group in self.plan.replica_groups for i in group])
        stats = self.current
        stats.epoch = epoch
        skipped = self.nonfinite_skipped
        stats.nonfinite_skipped = skipped - self.skipped_at_epoch_start
        self.skipped_at_epoch_start = skipped
        stats.finish(now_s)
        self.history.append(stats)
        self.current = EpochStats(epoch + 1)
        self.restarts.epoch_ended(len(self.history), self.config.checkpoint_every)
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


def resolve_max_bundle(plan: Plan, max_bundle: int | dict[str, int]) -> list[int]:
    """Per node, the most messages it runs as one call: one int for every node, or {node name: int} for the
    named nodes (the others 1). Refuses unknown names and values below 1 (the ``max_bundle`` setting)."""
    check = RunConfig.setting("max_bundle").check_each

    if not isinstance(max_bundle, dict):
        return [check(max_bundle)] * len(plan.names)
    unknown = sorted(set(max_bundle) - set(plan.index))
    if unknown:
        raise SettingError(
            "max_bundle",
            f"max_bundle names node(s) {unknown} that the graph does not have; name some of {list(plan.names)}",
        )
    return [check(max_bundle[name], f"[{name!r}]") if name in max_bundle else 1 for name in plan.names]


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


__all__ = ["DataError", "EpochStats", "RunConfig", "Session", "check_dataset", "resolve_max_bundle"]
