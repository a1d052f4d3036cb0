"""The threaded backend: one OS thread per worker, messages moved through lock-free mailboxes.

Each worker thread owns a *mailbox* (a ``collections.deque``: appends and pops are atomic, so many
producers need no lock) and an :class:`~amp_notebook.runtime.inbox.Inbox`, its private priority queue.
Messages a worker sends to its own nodes go straight into its inbox; others land in the mailbox of their
worker, which drains it into its inbox before each step; the inbox picks the next bundle (backward
first, the key admitted earliest first, as configured) and the thread runs
:meth:`~amp_notebook.runtime.worker.Worker.step` on it: the step shared by every backend (trace row,
messages sent on before a local update, credits). Outgoing messages go straight into their workers'
mailboxes. An idle worker sleeps on an Event that senders set only when it is asleep, so a busy pipeline
pays no wake-up cost.

The driver thread (``run``) owns the session and the controller: it starts the run, hears of completed
keys and flushes through a queue, and turns them into controller events and actions. numpy kernels release
the GIL, so workers overlap their matrix work; BLAS is pinned to one thread per worker so they do not fight
over the cores.

Errors raised in a node stop every worker; the driver joins all threads and re-raises the error, which
names the node, direction, port and message state. While it waits for events, the driver also keeps the
watchdog (``runtime/watchdog.py``): each worker counts the steps it has handled and shows the bundle it is
inside; if messages are in flight and no step has ended for ``watchdog_s`` seconds, or a worker thread has
ended, the run stops with a :class:`~amp_notebook.runtime.watchdog.StuckRunError` and its diagnosis.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from amp_notebook.ir.message import DIRECTION_NAMES, Message
from amp_notebook.runtime.blas import single_threaded_blas
from amp_notebook.runtime.inbox import Inbox
from amp_notebook.runtime.session import Session
from amp_notebook.runtime.watchdog import StuckRunError, Watchdog, diagnose

STUCK_JOIN_S = 5.0  # how long a stuck run's shutdown waits for a worker still inside a step


class MeasuredTime:
    """The step's clock on threads: ``time.perf_counter``, read when things happen."""

    @staticmethod
    def start() -> float:
        return time.perf_counter()

    @staticmethod
    def handled(start: float, bundle: Sequence[Message]) -> float:
        return time.perf_counter()

    @staticmethod
    def update_start(previous_end: float) -> float:
        return time.perf_counter()

    @staticmethod
    def updated(start: float, node: int) -> float:
        return time.perf_counter()


class _WorkerThread:
    def __init__(self, index: int, backend: ThreadedBackend) -> None:
        self.index = index
        self.backend = backend
        config = backend.session.config
        self.worker = backend.session.workers[index]
        self.mailbox: deque[Message] = deque()
        self.inbox = Inbox(backend.session.plan.max_bundle, config.priority, config.order, self.worker.bundle_cap)
        self.wake = threading.Event()
        self.sleeping = False
        self.handled = 0  # steps ended (the watchdog's measure of progress)
        self.current: list[Message] | None = None  # the bundle being handled (what a stuck worker is inside)
        self.thread = threading.Thread(target=self.run, name=f"amp-worker-{index}", daemon=True)

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # report anything, including errors in our own glue
            self.backend.fail(exc)

    def _loop(self) -> None:
        backend = self.backend
        step = self.worker.step
        mailbox, inbox = self.mailbox, self.inbox
        push, pop, take = inbox.push, mailbox.popleft, inbox.take
        timer = MeasuredTime()
        credits = backend.session.credits
        report = backend.events.put
        me, owner, threads = self.index, backend.session.plan.owner, backend.threads

        def deliver(msgs: list[Message], at: float) -> None:
            for msg in msgs:
                w = owner[msg.node]
                if w == me:
                    push(msg)  # our own inbox: only this thread touches it
                else:
                    t = threads[w]
                    t.mailbox.append(msg)
                    if t.sleeping:
                        t.wake.set()

        paused = backend.paused
        while not backend.stopped:
            while mailbox:
                push(pop())
            bundle = take(not paused.is_set())
            if bundle is None:
                self._idle()
                continue
            self.current = bundle
            done, flushed, _ = step(bundle, len(inbox) + len(mailbox), timer, credits, deliver)
            self.current = None
            self.handled += 1
            if done or flushed:
                report(("done", done, flushed))

    def activity(self) -> str:
        """What the worker is doing, for a diagnosis."""
        if not self.thread.is_alive():
            return "thread ended" if self.thread.ident is not None else "not started"
        bundle = self.current
        if bundle is None:
            return "idle"
        m = bundle[0]
        plan = self.backend.session.plan
        return f"inside {plan.describe(m.node)} {DIRECTION_NAMES[m.direction]} for key {m.key}"

    def _has_work(self) -> bool:
        return bool(self.mailbox) or self.inbox.has_work(not self.backend.paused.is_set())

    def _idle(self) -> None:
        self.sleeping = True
        self.wake.clear()
        if self._has_work() or self.backend.stopped:
            self.sleeping = False
            return
        self.wake.wait(0.05)
        self.sleeping = False


class ThreadedBackend:
    def __init__(self, session: Session) -> None:
        self.session = session
        for worker in session.workers:  # staleness rows must share the clock of the trace rows (perf_counter)
            worker.clock = time.perf_counter
        self.events: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.stopped = False
        self.paused = threading.Event()  # set: workers take no new forward messages
        self.started = threading.Event()  # set once `origin` is fixed (a background Run waits for it)
        self.threads = [_WorkerThread(w, self) for w in range(session.config.workers)]
        self._owner = session.plan.owner
        self.finished = False
        self.origin = 0.0
        self.wall_s = 0.0
        watchdog_s = session.config.watchdog_s
        self.watchdog = Watchdog(watchdog_s) if watchdog_s is not None else None
        self._join_timeout: float | None = None  # bounded only for a stuck worker that may never return
        self._watched = 0.0  # when the watchdog last looked

    # ------------------------------------------------------------ called by the driver and workers
    def inject(self, msgs: list[Message]) -> None:
        """Put messages from the controller into their workers' mailboxes (their credits are counted)."""
        threads, owner = self.threads, self._owner
        for msg in msgs:
            t = threads[owner[msg.node]]
            t.mailbox.append(msg)
            if t.sleeping:
                t.wake.set()

    def fail(self, exc: BaseException) -> None:
        self.stopped = True
        self.events.put(("error", exc))

    # ------------------------------------------------------------ driver
    def now(self) -> float:
        return time.perf_counter() - self.origin

    def run(self) -> None:
        """Drive the run to the end in the calling thread; raises the first worker error."""
        session = self.session
        with single_threaded_blas():
            self.origin = time.perf_counter()
            self.started.set()
            for t in self.threads:
                t.thread.start()
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
                self.shutdown(self._join_timeout)

    def watch(self) -> None:
        """The watchdog's look (driver thread): raise :class:`StuckRunError` if a worker thread has ended or no
        step has ended for ``watchdog_s`` while messages are in flight."""
        assert self.watchdog is not None
        now = self._watched = time.monotonic()
        ended = [t.index for t in self.threads if not t.thread.is_alive()]
        if ended and self.events.empty():  # a thread that failed has queued its error: that comes first
            raise StuckRunError(self.diagnose(f"worker thread(s) {ended} ended while the run was going"))
        credits = self.session.credits
        in_flight = bool(credits.keys) or bool(credits.flushes)
        progress = sum(t.handled for t in self.threads)
        if self.watchdog.stuck(progress, in_flight, self.paused.is_set(), now):
            diagnosis = self.diagnose(
                f"no message handled for {self.watchdog.idle_s(now):.1f} s while keys are in flight "
                f"(watchdog_s={self.watchdog.timeout_s:g})"
            )
            if any(w.startswith("inside") for w in diagnosis.workers):
                self._join_timeout = STUCK_JOIN_S
            raise StuckRunError(diagnosis)

    def diagnose(self, reason: str) -> Any:
        """What is in flight, queued and held now (see ``runtime/watchdog.py``)."""
        session = self.session
        credits = session.credits
        with credits.lock:
            keys, flushes = dict(credits.keys), dict(credits.flushes)
        return diagnose(
            reason, session.plan, session.contexts, keys, flushes,
            [len(t.inbox) + len(t.mailbox) for t in self.threads], [t.activity() for t in self.threads],
        )  # fmt: skip

    def call(self, fn: Any) -> None:
        """Run ``fn() -> actions`` in the driver thread (live changes from other threads)."""
        self.events.put(("call", fn))

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop and join every worker thread (waiting at most ``timeout`` s for each: a stuck one is left)."""
        self.stopped = True
        for t in self.threads:
            t.wake.set()
        for t in self.threads:
            if t.thread.is_alive():
                t.thread.join(timeout)


__all__ = ["MeasuredTime", "ThreadedBackend"]
