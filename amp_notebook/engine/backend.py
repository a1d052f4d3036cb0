"""The native backend: the threaded backend's workers as native loops (``src/worker.h``), Python on the driver.

What runs where. :func:`~amp_notebook.engine.assemble.assemble` hands the session's compiled plan, its
contexts' numpy memory and its trace buffers to a ``_native.Engine``; ``run()`` starts one native thread per
worker and drives the run from the calling thread, as the Python engine's backend does:

* the session admits keys and flushes (the controller stays in Python): the keys a wake's completions let in,
  in one native call (:meth:`admit`: their input messages built from the batches' arrays, checked for NaN/inf,
  registered with the engine's own credit ledger, which the native workers settle, and posted to their
  workers' mailboxes, one post per worker), a
  flush's messages registered with :class:`NativeLedger`, converted once at :meth:`inject` and posted;
* in ``amp`` mode the engine keeps ``max_active_keys`` keys in flight itself, at its admission gate
  (``src/engine.h``), and the controller admits twice a wake's batch of keys more, which the gate holds until
  keys complete (:meth:`_open_gate`): a key starts the moment another ends, whenever the driver gets a core;
* the driver waits for events with the GIL released: the engine wakes it only when steps completed a batch of keys
  (``max_active_keys`` of them behind the gate, else a quarter of it; fewer once no other key is in flight, one
  while paused: :meth:`_wake_batch`) or a flush, the run failed, or another thread queued a call (:meth:`call`: a
  live Run's change); never per message, and not per key, since each wake costs the driver and the waking worker a
  thread switch while the workers still hold the other keys. It then takes the loss reports and the keys skipped for
  NaN/inf (reports before the completions that follow them), brings the contexts up to date when nothing is in
  flight (node versions, held gradients, Adam's step count: :meth:`sync_state`), and hands the completions to the
  session, which admits what follows, ends epochs (replica averaging on the contexts' arrays, which the engine
  shares) and lowers learning rates (handed to the engine at :meth:`epoch_ended`);
* live knobs: the engine starts from the session's :class:`~amp_notebook.runtime.knobs.Knobs` and listens to
  them; ``max_bundle``, ``min_update_frequency`` and ``paused`` are atomics the workers read per bundle
  (:meth:`knobs_changed` forwards each change); ``max_active_keys`` and stop are the controller's;
* the trace: the driver folds the workers' trace buffers (``engine/trace.py``) whenever the workers have
  handled a chunk's worth of messages since the last fold, so a run nobody reads holds at most its
  ``trace_capacity`` rows per worker plus what is written between two wakes of the driver;
* the watchdog reads the engine's counters (messages handled, ledger in flight) and a stuck run's diagnosis
  reads what each worker is inside, what is queued, and what each node holds;
* where each worker's time went: the native loops count the seconds inside ops, the seconds waiting for
  mail (spinning or asleep), how often they fell asleep and their thread's CPU time (``src/worker.h``
  ``Worker::Times``); the rest of a loop's life is the engine's own work per bundle. :meth:`stats` hands
  them on as ``worker_time`` (:func:`worker_time`), summed over the engines of a run that restarted;
* a failure on a worker stops every worker; the driver raises it as the Python engine would
  (:func:`~amp_notebook.engine.errors.failure_exception`), after joining the threads.

Threads: ``shutdown`` stops and joins the native workers (never detached), with the GIL released so a worker
waiting for it inside a bridged op can finish its step.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from amp_notebook.engine.assemble import assemble
from amp_notebook.engine.errors import failure_exception
from amp_notebook.ir.message import PHASES, Message
from amp_notebook.runtime.backend import checked_input_messages
from amp_notebook.runtime.blas import single_threaded_blas
from amp_notebook.runtime.heap import frozen_heap
from amp_notebook.runtime.knobs import KnobChange
from amp_notebook.runtime.recover import drive, restart_session
from amp_notebook.runtime.restart import WorkerLostError
from amp_notebook.runtime.session import DataError
from amp_notebook.runtime.steal import StealMeter
from amp_notebook.runtime.watchdog import Diagnosis, StuckRunError, Watchdog, diagnose

if TYPE_CHECKING:
    from amp_notebook.runtime.controller import Action, KeyInfo
    from amp_notebook.runtime.session import Session

WAIT_S = 0.1  # the longest the driver waits at once (signals such as a KeyboardInterrupt are seen between waits)
STUCK_JOIN_S = 5.0
REFUSED = -2  # admit_many's result for a key its one-call path does not take (src/engine_module.cc kRefused)
WAKE_SHARE = 4  # without the gate the driver wakes once per max_active_keys // WAKE_SHARE completed keys, and
# behind it held keys go in that many at a time
AHEAD = 2  # behind the gate the controller admits AHEAD wakes' worth of keys beyond max_active_keys
LIFE = ("not started", "running", "thread ended")


WORKER_TIME_FIELDS = ("loop_s", "ops_s", "waiting_s", "asleep_s", "sleeps", "bundles", "messages", "cpu_s")


def worker_time(raw: Sequence[Sequence[float]]) -> list[dict[str, Any]]:
    """Where each native worker's time went, JSON-ready: ``_native.Engine.worker_times`` rows as dicts, with
    ``engine_s``, the loop's life outside ops and waiting (taking bundles, credits, routing, trace rows), and
    ``no_core_s``, the time it was neither asleep nor on a core (another thread had its core, or it waited for
    a lock), added. ``loop_s`` runs from the thread's start to its end (or now), so ops, engine and waiting add
    up to it; ``cpu_s`` is the thread's CPU time, read as its loop ends (None, and ``no_core_s`` too, while it
    runs)."""
    out = []
    for w, row in enumerate(raw):
        t: dict[str, Any] = dict(zip(WORKER_TIME_FIELDS, row, strict=True))
        for name in ("sleeps", "bundles", "messages"):
            t[name] = int(t[name])
        t["engine_s"] = max(0.0, t["loop_s"] - t["ops_s"] - t["waiting_s"])
        if t["cpu_s"] < 0:  # the loop still runs: its CPU time is read as it ends
            t["cpu_s"] = t["no_core_s"] = None
        else:
            t["no_core_s"] = max(0.0, t["loop_s"] - t["asleep_s"] - t["cpu_s"])
        out.append({"worker": w, **t})
    return out


class NativeLedger:
    """The driver's side of completion (:class:`~amp_notebook.runtime.ledger.Ledger`) for a native run: the
    engine's counting ledger (``src/credits.h``), whose step side the native workers settle themselves."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def admit_key(self, key: int, msgs: Sequence[Message]) -> None:
        self._engine.admit_key(key, len(msgs))

    def admit_flush(self, flush_id: int, msgs: Sequence[Message]) -> None:
        self._engine.admit_flush(flush_id, len(msgs))

    def in_flight(self) -> tuple[dict[int, int], dict[int, int]]:
        keys, flushes = self._engine.in_flight()
        return dict(keys), dict(flushes)

    def busy(self) -> bool:
        return bool(self._engine.busy())


class NativeBackend:
    """Native worker threads driven from Python (module docstring); implements
    :class:`~amp_notebook.runtime.backend.Backend`. Owns the engine and its threads; reads the session's
    contexts and knobs, never changes the session beyond what the protocol allows."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.engine = assemble(session)
        self.ledger = NativeLedger(self.engine)
        self.started = threading.Event()
        self.origin = 0.0
        self.steal = StealMeter()  # the host's share of the CPUs' time while the run went (stats())
        self.wall_s = 0.0
        self.finished = False
        self._calls: deque[Callable[[], list[Action]]] = deque()
        watchdog_s = session.config.watchdog_s
        self.watchdog = Watchdog(watchdog_s) if watchdog_s is not None else None
        self._watched = 0.0
        self._join_timeout: float | None = None
        self._lr = self._learning_rates()
        self._folded_at = 0  # messages handled at the last fold of the trace buffers
        self._tracing = bool(session.config.trace)  # off: the workers write no rows, so there is nothing to fold
        self._fold_rows = min(b.event_table.chunk_rows for b in session.buffers)
        self._shut = False
        self._times_before: list[tuple[float, ...]] = []  # the worker times of engines a restart replaced
        self._gated = False  # the admission gate is on (_open_gate)
        session.knobs.subscribe(self.knobs_changed)

    # ------------------------------------------------------------ the Backend protocol
    def admit(self, infos: Sequence[KeyInfo]) -> list[bool]:
        """Admit keys in one native call (``src/admission.h``, ``admit_many``): for each, the messages
        ``Session.input_messages`` would make, built from the batch's arrays; the admitted keys' credits registered
        and their messages posted together; the inputs checked for NaN/inf there too when the run checks. Where
        the engine finds NaN/inf, the session's guard looks again and raises or skips (False) as it does for
        Python messages. A batch the one-call path does not take (a float Input fed integers, a payload that is no
        array, a field the engine cannot hold) goes through Python messages, whose errors name the input."""
        keys = [(i.key, i.train, i.batch.inputs, i.batch.fields, i.batch.size) for i in infos]
        results = self.engine.admit_many(keys)
        if results.count(-1) == len(results):
            return [True] * len(results)
        return [self._admitted(info, bad) for info, bad in zip(infos, results, strict=True)]

    def inject(self, msgs: list[Message]) -> None:
        """Post messages from the controller (their credits registered with :attr:`ledger`) to their workers; a
        payload or state the engine cannot take is a :class:`~amp_notebook.runtime.session.DataError` naming the
        key and input."""
        try:
            self.engine.inject(msgs)
        except (TypeError, ValueError) as exc:
            raise self._refused(msgs, exc) from exc

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def call(self, fn: Callable[[], list[Action]]) -> None:
        """Run ``fn() -> actions`` on the driver between two events (any thread)."""
        self._calls.append(fn)
        self.engine.notify()

    def knobs_changed(self, change: KnobChange) -> None:
        """A live knob changed: the workers read the engine's copy of it per bundle; ``max_active_keys`` is
        the controller's, and the admission gate's limit where the gate is on (:meth:`_open_gate`)."""
        if change.knob != "max_active_keys":
            self.engine.set_knob(change.knob, list(change.nodes), int(change.value))
        elif self._gated:
            self._set_gate(int(change.value))

    def sync_state(self) -> None:
        """Bring every parameterized node's version, held gradient count and keys and Adam's step count from the
        engine into the session's contexts (nothing in flight; parameters and memory are shared arrays)."""
        plan, contexts = self.session.plan, self.session.contexts
        for i, parameterized in enumerate(plan.parameterized):
            if not parameterized:
                continue
            version, n_grads, keys, t = self.engine.node_state(i)
            ctx = contexts[i]
            ctx.version, ctx.n_grads, ctx.grad_keys = version, n_grads, set(keys)
            if t:
                ctx.opt_state["t"] = t

    def epoch_ended(self, nodes: Sequence[int]) -> None:
        """Replicas were averaged in place (shared arrays); the optimizers' learning rates may have dropped."""
        self._hand_over_learning_rates()

    def diagnose(self, reason: str) -> Diagnosis:
        """What is in flight, queued and held now (``runtime/watchdog.py``)."""
        session = self.session
        keys, flushes = self.ledger.in_flight()
        return diagnose(
            reason, session.plan, self._held_views(), keys, flushes, list(self.engine.queued()), self._activity()
        )

    def stats(self) -> dict[str, Any]:
        out = {"engine": "native", "python_nodes": list(self.session.engine.python_nodes),
               "worker_time": self.worker_time(), "steal_share": self.steal.share}  # fmt: skip
        if self._gated:  # the admission gate (_open_gate): the most keys it let be in flight, the keys it held
            out["admission"] = {"peak_keys_in_flight": self.engine.peak_keys(), "keys_held": self.engine.keys_held()}
        return out

    def worker_time(self) -> list[dict[str, Any]] | None:
        """Each native worker's time so far (:func:`worker_time`), summed over the engines of a restarted run;
        the loops' counters are atomics, so any thread may read them while the run goes."""
        return worker_time(self._worker_times())

    def _worker_times(self) -> list[tuple[float, ...]]:
        """Each worker's raw times (``_native.Engine.worker_times``), this engine's plus those before restarts."""
        now = [tuple(float(v) for v in t) for t in self.engine.worker_times()]
        if not self._times_before:
            return now
        cpu = WORKER_TIME_FIELDS.index("cpu_s")  # -1 while a loop runs: a sum with it is unknown too
        return [tuple(-1.0 if i == cpu and b < 0 else a + b for i, (a, b) in enumerate(zip(old, new, strict=True)))
                for old, new in zip(self._times_before, now, strict=True)]  # fmt: skip

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop and join every worker thread (safe twice, and before ``run``)."""
        if self._shut:
            return
        self.engine.stop()
        self.engine.join()
        self._shut = True

    # ------------------------------------------------------------ driver
    def run(self) -> None:
        """Drive the run to the end in the calling thread; raises the first worker error (a lost worker only
        once the session's restarts are spent)."""
        with single_threaded_blas(), frozen_heap():  # the driver's collections skip the old heap (heap.py)
            self.steal.start()
            self.origin = time.perf_counter()
            self.started.set()
            drive(self, self._drive)

    def restart(self, checkpoint: Any) -> None:
        """After a lost worker: the engine's threads joined, the session back at ``checkpoint``, a fresh engine
        assembled on it (writing on into the same trace buffers)."""
        self.shutdown(STUCK_JOIN_S)
        self._times_before = self._worker_times()
        restart_session(self.session, checkpoint)
        self.engine = assemble(self.session)
        self.ledger = NativeLedger(self.engine)
        self.finished = self._shut = False
        self._join_timeout = None
        self._lr = self._learning_rates()
        self._folded_at = 0

    def _drive(self) -> None:
        session = self.session
        engine = self.engine
        tick = self.watchdog.tick_s if self.watchdog is not None else WAIT_S
        engine.start()
        try:
            self._open_gate()
            self.finished = session.begin(self)
            while not self.finished:
                done, flushed, failed = engine.wait(min(tick, WAIT_S), self._wake_batch())
                if failed:
                    self._collect()
                    self.sync_state()
                    raise self._failure()
                if done or flushed:
                    self._collect()
                    if not engine.busy():  # quiescent: an epoch end (or a checkpoint) reads the contexts
                        self.sync_state()
                    self.finished = session.completed(done, flushed, self)
                while self._calls and not self.finished:
                    self.finished = session.carry_out(self._calls.popleft()(), self)
                if self.watchdog is not None and time.monotonic() - self._watched >= tick:
                    self.watch()
                self._fold()
        finally:
            self.wall_s = time.perf_counter() - self.origin
            self.steal.stop()
            self.shutdown(self._join_timeout)
            self._collect()
            self.sync_state()

    def _open_gate(self) -> None:
        """In ``amp`` mode the engine keeps ``max_active_keys`` keys in flight at its admission gate
        (``src/engine.h``), and the controller admits ``AHEAD`` times a wake's batch of keys more
        (:meth:`_wake_batch`): while the driver waits for the next wake, and then for a core, the keys it
        admitted last start as soon as keys in flight complete, so the workers keep every key the limit allows
        and the driver can wake once per ``max_active_keys`` completed keys. Each wake costs the driver about
        as much as the work of several keys (its caches are cold after a wait), and on a machine whose cores
        the workers fill, the driver's time is taken from a worker: on 2 workers on 2 cores, the GG-NN's driver
        spent half the CPU time per key (14-20 us against 26-31 us) with the gate and the larger batch."""
        self._gated = self.session.controller.mode == "amp"
        if self._gated:
            self._set_gate(self.session.knobs.max_active_keys)

    def _set_gate(self, max_active_keys: int) -> None:
        # held keys go in a quarter of the limit at a time (src/engine.h: keys that start together share bundles)
        self.engine.set_key_limit(max_active_keys, max(1, max_active_keys // WAKE_SHARE))
        self.session.admit_ahead(AHEAD * max_active_keys)

    def watch(self) -> None:
        """The watchdog's look: raise :class:`StuckRunError` if a worker thread ended or no message was handled
        for ``watchdog_s`` while keys are in flight."""
        assert self.watchdog is not None
        now = self._watched = time.monotonic()
        ended = [w for w, (life, *_) in enumerate(self.engine.activity()) if life == 2]
        if ended and not self.engine.failure():
            w = ended[0]
            plan = self.session.plan
            nodes = [plan.names[i] for i in range(len(plan.names)) if plan.owner[i] == w]
            raise WorkerLostError(w, nodes, f"native worker thread amp-native-{w}",
                                  f"its thread ended while the run was going (worker thread(s) {ended})")  # fmt: skip
        if self.watchdog.stuck(self.engine.handled(), self.ledger.busy(), self.session.knobs.paused, now):
            diagnosis = self.diagnose(
                f"no message handled for {self.watchdog.idle_s(now):.1f} s while keys are in flight "
                f"(watchdog_s={self.watchdog.timeout_s:g})"
            )
            if any(w.startswith("inside") for w in diagnosis.workers):
                self._join_timeout = STUCK_JOIN_S
            raise StuckRunError(diagnosis)

    # ------------------------------------------------------------ helpers
    def _fold(self) -> None:
        """Fold the trace buffers once a chunk may have filled: a handled message writes at most one row of
        each kind (a bundle of n messages: one event row, n member rows, a staleness row per gradient)."""
        if not self._tracing:
            return
        handled = self.engine.handled()
        if handled - self._folded_at >= self._fold_rows:
            self._folded_at = handled
            for buffer in self.session.buffers:
                buffer.fold()

    def _failure(self) -> BaseException:
        """The exception a worker's failure raises; the engine forgets its Python exception, which would otherwise
        hold the driver's frames (and so the engine) alive through a cycle the collector cannot see."""
        exc = failure_exception(self.engine.failure(), self.session)
        self.engine.forget_python_failure()
        return exc

    def _admitted(self, info: KeyInfo, bad: int) -> bool:
        """One key's admission after ``admit_many``: -1 admitted; REFUSED or an input holding NaN/inf (not
        admitted there) go through Python messages and the guard, then through the engine's admission gate as
        ``admit_many``'s keys do (``admit_messages``)."""
        session = self.session
        if bad == -1:
            return True
        if bad == REFUSED:
            msgs = checked_input_messages(session, info)
        else:
            guard = session.numerics
            assert guard is not None, "the engine checks inputs only when the run does"
            # Python's check is the specification: it raises, or skips (False), or finds none (the data
            # changed in between) and the key goes in
            msgs = session.input_messages(info) if guard.inputs_ok(info, recheck=True) else None
        if msgs is None:
            return False
        try:
            self.engine.admit_messages(info.key, msgs)
        except (TypeError, ValueError) as exc:
            raise self._refused(msgs, exc) from exc
        return True

    def _refused(self, msgs: list[Message], exc: Exception) -> DataError:
        culprit = msgs[0]
        for m in msgs:  # which one (converting again, posting nothing)
            try:
                self.engine.inject([m], False)
            except (TypeError, ValueError) as found:
                culprit, exc = m, found
                break
        what = self.session.plan.describe(culprit.node)
        return DataError(
            f"key {culprit.key}: the message into {what} cannot enter the native engine: {exc}; give the data "
            "float32, float64, integer or bool arrays of at most 4 axes and int state fields within int64, or "
            "train with engine='python'"
        )

    def _collect(self) -> None:
        """Loss reports into the session's sums, in the order the workers handed them over (before the
        completions that follow them), folded on the engine's side (``Session.fold_reports``), and keys skipped
        for NaN/inf to the numerics guard."""
        session = self.session
        session.fold_reports(self.engine.fold_reports)
        skipped = self.engine.take_skipped()
        if skipped and session.numerics is not None:
            session.numerics.skipped.update(skipped)

    def _wake_batch(self) -> int:
        """How many completed keys are worth waking the driver for: ``max_active_keys`` behind the admission
        gate, whose held keys go in meanwhile (:meth:`_open_gate`); without it a quarter of ``max_active_keys``,
        so the workers keep three quarters of the keys in flight while the driver admits the next batch; one key
        while paused (the status shows each completion) or, without the gate, below 8 keys in flight."""
        knobs = self.session.knobs
        if knobs.paused:
            return 1
        return knobs.max_active_keys if self._gated else max(1, knobs.max_active_keys // WAKE_SHARE)

    def _learning_rates(self) -> list[float | None]:
        return [None if o is None else o.lr for o in self.session.plan.optimizers]

    def _hand_over_learning_rates(self) -> None:
        rates = self._learning_rates()
        for i, (old, new) in enumerate(zip(self._lr, rates, strict=True)):
            if new is not None and new != old:
                self.engine.set_lr(i, new)
        self._lr = rates

    def _activity(self) -> list[str]:
        plan = self.session.plan
        out = []
        for life, node, direction, key in self.engine.activity():
            if life != 1:
                out.append(LIFE[life])
            elif node < 0:
                out.append("idle")
            else:
                out.append(f"inside {plan.describe(node)} {PHASES[direction]} for key {key}")
        return out

    def _held_views(self) -> list[Any]:
        """Per node what it holds, for ``watchdog.held_states``: a bridged node's own context (its Python op's
        caches), else the native forward versions (a node whose worker is inside a step shows nothing)."""
        session = self.session
        bridged = set(session.engine.python_nodes)
        views: list[Any] = []
        for i, name in enumerate(session.plan.names):
            if name in bridged:
                views.append(session.contexts[i])
                continue
            held = self.engine.held(i)
            views.append(_Held(dict.fromkeys(held[1]) if held else {}))
        return views


class _Held:
    """What a native node holds, shaped as the context fields ``watchdog.held_states`` reads."""

    def __init__(self, fwd_version: dict[Any, None]) -> None:
        self.cache: dict[Any, Any] = {}
        self.joins: dict[Any, Any] = {}
        self.fwd_version = fwd_version


__all__ = ["NativeBackend", "NativeLedger"]
