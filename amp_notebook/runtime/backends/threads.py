"""The threaded backend: one OS thread per worker, messages moved through lock-free mailboxes.

Each worker thread runs a :class:`~amp_notebook.runtime.steploop.StepLoop`: drain its mailbox (a
``collections.deque``: many producers need no lock) into its inbox, take the next bundle (backward
first, the key admitted earliest first, as configured), run the step every backend shares
(:meth:`~amp_notebook.runtime.worker.Worker.step`: trace row, messages sent on before a local update,
credits), sleep when idle. Messages a worker sends to its own nodes go straight into its inbox; others go
into the mailbox of their worker, which is woken only if it sleeps. Completion is counted in one
:class:`~amp_notebook.runtime.credits.Credits` ledger; a step that completes keys or flushes reports them
to the driver through a queue.

The driver thread (``run``) owns the session and the controller: it starts the run, hears of completed
keys and flushes, turns them into controller events and actions, and runs functions queued by a live
Run (``call``). The workers read the session's :class:`~amp_notebook.runtime.knobs.Knobs` in place; the
backend listens to them only to wake sleeping workers when a run resumes. numpy kernels release the GIL,
so workers overlap their matrix work; BLAS is pinned to one thread per worker so they do not fight over
the cores.

Errors raised in a node stop every worker; the driver joins all threads and re-raises the error, which
names the node, direction, port and message state. An error in a worker thread's own code (outside every
node), or a worker thread that ended without one, is a lost worker: a
:class:`~amp_notebook.runtime.restart.WorkerLostError` naming it, which a run with ``max_failures``
survives (:meth:`ThreadedBackend.restart`: every thread joined, the session put back at its last
checkpoint, fresh threads; :mod:`amp_notebook.runtime.restart`). While it waits for events, the driver also
keeps the watchdog (``runtime/watchdog.py``): each loop counts the messages it has handled and shows the
bundle it is inside; if messages are in flight and none has been handled for ``watchdog_s`` seconds, the
run stops with a :class:`~amp_notebook.runtime.watchdog.StuckRunError` and its diagnosis.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from amp_notebook.ir.message import PHASES, Message
from amp_notebook.runtime.backend import admit_by_messages
from amp_notebook.runtime.blas import single_threaded_blas
from amp_notebook.runtime.controller import Action, KeyInfo
from amp_notebook.runtime.credits import Credits
from amp_notebook.runtime.heap import frozen_heap
from amp_notebook.runtime.inbox import Inbox
from amp_notebook.runtime.knobs import KnobChange
from amp_notebook.runtime.recover import drive, restart_session
from amp_notebook.runtime.restart import WorkerLostError
from amp_notebook.runtime.session import Session
from amp_notebook.runtime.steal import StealMeter
from amp_notebook.runtime.steploop import StepLoop
from amp_notebook.runtime.watchdog import Diagnosis, StuckRunError, Watchdog, diagnose
from amp_notebook.runtime.worker import Deliver, NodeError

STUCK_JOIN_S = 5.0  # how long a stuck run's shutdown waits for a worker still inside a step


class ThreadedBackend:
    """Worker threads in this process (module docstring); implements :class:`~amp_notebook.runtime.backend.Backend`.
    Owns the threads, their step loops (inbox and mailbox each), the credit ledger and the driver's event
    queue; never changes the session beyond the protocol's calls."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.ledger = Credits()  # made again by _build, as at each restart
        self.started = threading.Event()  # set once `origin` is fixed (a background Run waits for it)
        self.origin = 0.0
        self.steal = StealMeter()  # the host's share of the CPUs' time while the run went (stats())
        self.wall_s = 0.0
        watchdog_s = session.config.watchdog_s
        self.watchdog = Watchdog(watchdog_s) if watchdog_s is not None else None
        self._build()
        session.knobs.subscribe(self.knobs_changed)

    def _build(self) -> None:
        """The ledger, event queue, step loops and (unstarted) threads of the session's workers."""
        session, config = self.session, self.session.config
        self.ledger = Credits()
        self.events: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.stopped = False
        report = self._report
        self.loops = [
            StepLoop(worker, Inbox(session.knobs, config.inbox_priority, config.order, worker.bundle_cap,
                                   session.plan.parameterized), self.ledger,
                     session.knobs, report)
            for worker in session.workers
        ]  # fmt: skip
        self.threads = [
            threading.Thread(target=self._work, args=(w,), name=f"amp-worker-{w}", daemon=True)
            for w in range(config.workers)
        ]
        self._owner = session.plan.owner
        self.finished = False
        self._join_timeout: float | None = None  # bounded only for a stuck worker that may never return
        self._watched = 0.0  # when the watchdog last looked

    # ------------------------------------------------------------ worker threads
    def _work(self, w: int) -> None:
        try:
            self.loops[w].run(self._deliver_from(w))
        except NodeError as exc:  # a node's own error (a NaN included)
            self.fail(exc)
        except BaseException as exc:  # our own glue failed: the worker is lost
            lost = self._lost(w, f"{type(exc).__name__}: {exc}")
            lost.__cause__ = exc
            self.fail(lost)

    def _lost(self, w: int, reason: str) -> WorkerLostError:
        plan = self.session.plan
        nodes = [plan.names[i] for i in range(len(plan.names)) if plan.owner[i] == w]
        return WorkerLostError(w, nodes, f"thread amp-worker-{w} of this process", reason)

    def _deliver_from(self, me: int) -> Deliver:
        """Worker ``me``'s delivery: its own nodes' messages into its inbox, the others' into their mailboxes."""
        owner, loops = self._owner, self.loops
        push = loops[me].inbox.push

        def deliver(msgs: list[Message], at: float) -> None:
            for msg in msgs:
                w = owner[msg.node]
                if w == me:
                    push(msg)  # our own inbox: only this thread touches it
                else:
                    loop = loops[w]
                    loop.mailbox.append(msg)
                    if loop.sleeping:
                        loop.wake.set()

        return deliver

    def _report(self, done: list[int], flushed: list[int]) -> None:
        self.events.put(("done", done, flushed))

    def fail(self, exc: BaseException) -> None:
        """A worker's error: every worker stops after its step in hand; the driver re-raises the error."""
        self.stopped = True
        for loop in self.loops:
            loop.stop()
        self.events.put(("error", exc))

    # ------------------------------------------------------------ the Backend protocol
    def admit(self, infos: Sequence[KeyInfo]) -> list[bool]:
        return [admit_by_messages(self.session, self, info) for info in infos]

    def inject(self, msgs: list[Message]) -> None:
        loops, owner = self.loops, self._owner
        for msg in msgs:
            loops[owner[msg.node]].post(msg)

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def call(self, fn: Callable[[], list[Action]]) -> None:
        self.events.put(("call", fn))

    def knobs_changed(self, change: KnobChange) -> None:
        """Workers read the knobs in place; a resume wakes them now rather than at their next look."""
        if change.knob == "paused" and not change.value:
            for loop in self.loops:
                loop.wake.set()

    def sync_state(self) -> None:
        """Nothing to bring back: the workers step the session's own contexts."""

    def epoch_ended(self, nodes: Sequence[int]) -> None:
        """Nothing to hand back: the workers read the session's contexts and optimizers."""

    def restart(self, checkpoint: Any) -> None:
        """After a lost worker: join every thread, put the session back at ``checkpoint``, build fresh loops
        and threads on it (started by the next drive). The clock and the trace go on."""
        self.shutdown(STUCK_JOIN_S)
        restart_session(self.session, checkpoint)
        self._build()

    def run(self) -> None:
        """Drive the run to the end in the calling thread; raises the first worker error (a lost worker only
        once the session's restarts are spent)."""
        with single_threaded_blas(), frozen_heap():  # the driver's collections skip the old heap (heap.py)
            self.steal.start()
            self.origin = time.perf_counter()
            self.started.set()
            drive(self, self._drive)

    def _drive(self) -> None:
        session = self.session
        for t in self.threads:
            t.start()
        try:
            self.finished = session.begin(self)
            tick = self.watchdog.tick_s if self.watchdog is not None else None
            while not self.finished:
                try:
                    event = self.events.get(timeout=tick)
                except queue.Empty:
                    self.watch()
                    continue
                kind = event[0]
                if kind == "error":
                    raise event[1]
                if kind == "done":
                    self.finished = session.completed(event[1], event[2], self)
                elif kind == "call":
                    self.finished = session.carry_out(event[1](), self)
                if tick is not None and time.monotonic() - self._watched >= tick:
                    self.watch()  # events keep coming: look at most once a tick
        finally:
            self.wall_s = time.perf_counter() - self.origin
            self.steal.stop()
            self.shutdown(self._join_timeout)

    def watch(self) -> None:
        """The watchdog's look (driver thread): raise :class:`StuckRunError` if a worker thread has ended or no
        message has been handled for ``watchdog_s`` while messages are in flight."""
        assert self.watchdog is not None
        now = self._watched = time.monotonic()
        ended = [w for w, t in enumerate(self.threads) if not t.is_alive()]
        if ended and self.events.empty():  # a thread that failed has queued its error: that comes first
            raise self._lost(ended[0], f"its thread ended while the run was going (worker thread(s) {ended})")
        progress = sum(loop.handled for loop in self.loops)
        if self.watchdog.stuck(progress, self.ledger.busy(), self.session.knobs.paused, now):
            diagnosis = self.diagnose(
                f"no message handled for {self.watchdog.idle_s(now):.1f} s while keys are in flight "
                f"(watchdog_s={self.watchdog.timeout_s:g})"
            )
            if any(w.startswith("inside") for w in diagnosis.workers):
                self._join_timeout = STUCK_JOIN_S
            raise StuckRunError(diagnosis)

    def diagnose(self, reason: str) -> Diagnosis:
        """What is in flight, queued and held now (see ``runtime/watchdog.py``)."""
        keys, flushes = self.ledger.in_flight()
        depths = [len(loop.inbox) + len(loop.mailbox) for loop in self.loops]
        session = self.session
        return diagnose(reason, session.plan, session.contexts, keys, flushes, depths, self.activity())

    def activity(self) -> list[str]:
        """What each worker is doing, for a diagnosis."""
        plan = self.session.plan
        out = []
        for t, loop in zip(self.threads, self.loops, strict=True):
            bundle = loop.current
            if not t.is_alive():
                out.append("thread ended" if t.ident is not None else "not started")
            elif bundle is None:
                out.append("idle")
            else:
                m = bundle[0]
                out.append(f"inside {plan.describe(m.node)} {PHASES[m.direction]} for key {m.key}")
        return out

    def stats(self) -> dict[str, Any]:
        """The share of the CPUs' time the host took during the run (:mod:`~amp_notebook.runtime.steal`); the
        threaded backend's other figures are the trace's."""
        return {"steal_share": self.steal.share}

    def worker_time(self) -> list[dict[str, Any]] | None:
        """None: Python worker threads do not count their own time (the trace's utilization does)."""
        return None

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop and join every worker thread (waiting at most ``timeout`` s for each: a stuck one is left)."""
        self.stopped = True
        for loop in self.loops:
            loop.stop()
        for t in self.threads:
            if t.is_alive():
                t.join(timeout)


__all__ = ["ThreadedBackend"]
