"""One worker's loop, written once for a worker thread and for a Ray worker actor.

A worker that runs on its own thread (the threaded backend's, or the step thread of a Ray
:class:`~amp_notebook.runtime.backends.ray_actor.WorkerHost`) repeats four things:

1. **drain** its *mailbox* into its :class:`~amp_notebook.runtime.inbox.Inbox`. The mailbox is a
   ``collections.deque``: appends and pops are atomic, so any thread may post to it without a lock
   (other workers, the driver injecting a key, a Ray actor's mail thread). The inbox is the loop's own;
   only this thread touches it;
2. **take** the next bundle from the inbox (backward first, oldest key first, as configured), forward
   work only while the run's :class:`~amp_notebook.runtime.knobs.Knobs` are not ``paused``;
3. **step**: :meth:`~amp_notebook.runtime.worker.Worker.step` on it, with this loop's timer
   (:class:`MeasuredTime`: ``time.perf_counter``), ledger and ``deliver``; keys or flushes the step
   completed (a ledger that can tell, as :class:`~amp_notebook.runtime.credits.Credits` can) go to
   ``report``;
4. **idle** when nothing may be taken: sleep on an Event until a poster wakes it. Posters set the Event
   only when the loop says it is asleep, so a busy pipeline pays no wake-up cost; the sleep is bounded
   (``IDLE_WAIT_S``) so a lost wake-up costs at most that.

What differs between the two users is passed in: ``deliver(messages, at)`` (into this inbox, another
thread's mailbox, or an outbox to another process), the ledger's step side and ``report``. The loop counts
the messages it has handled (``handled``: a watchdog's measure of progress) and shows the bundle it is
inside (``current``: what a stuck worker is doing). It ends when ``stop()`` is called, after the step in
hand; an exception from a step ends it and propagates to the caller of :meth:`StepLoop.run`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from amp_notebook.ir.message import Message
from amp_notebook.runtime.inbox import Inbox
from amp_notebook.runtime.knobs import Knobs
from amp_notebook.runtime.ledger import StepLedger
from amp_notebook.runtime.worker import Deliver, Worker

IDLE_WAIT_S = 0.05  # the longest an idle loop sleeps before it looks again (a wake-up normally comes first)

Report = Callable[[list[int], list[int]], None]


class MeasuredTime:
    """The step's clock on a worker thread: ``time.perf_counter``, read when things happen."""

    start = staticmethod(time.perf_counter)

    @staticmethod
    def handled(start: float, bundle: Sequence[Message]) -> float:
        return time.perf_counter()

    @staticmethod
    def update_start(previous_end: float) -> float:
        return time.perf_counter()

    @staticmethod
    def updated(start: float, node: int) -> float:
        return time.perf_counter()


class StepLoop:
    """One worker's mailbox, inbox and loop (module docstring). Owns its inbox; never touches the session,
    the controller or another worker's state."""

    def __init__(self, worker: Worker, inbox: Inbox, ledger: StepLedger, knobs: Knobs, report: Report | None = None):
        self.worker = worker
        self.inbox = inbox
        self.ledger = ledger
        self.knobs = knobs
        self.report = report
        self.mailbox: deque[Message] = deque()
        self.wake = threading.Event()
        self.sleeping = False
        self.stopped = False
        self.handled = 0  # messages handled so far
        self.current: list[Message] | None = None  # the bundle being handled

    def post(self, msg: Message) -> None:
        """A message for this worker, from any thread."""
        self.mailbox.append(msg)
        if self.sleeping:
            self.wake.set()

    def stop(self) -> None:
        """End the loop after the step in hand (any thread)."""
        self.stopped = True
        self.wake.set()

    def run(self, deliver: Deliver) -> None:
        """Step until stopped; ``deliver`` hands each step's outgoing messages on."""
        worker, inbox, mailbox, knobs = self.worker, self.inbox, self.mailbox, self.knobs
        step, push, pop, take = worker.step, inbox.push, mailbox.popleft, inbox.take
        timer, ledger, report = MeasuredTime(), self.ledger, self.report
        while not self.stopped:
            while mailbox:
                push(pop())
            bundle = take(not knobs.paused)
            if bundle is None:
                self._idle()
                continue
            self.current = bundle
            completed, _ = step(bundle, inbox.size + len(mailbox), timer, ledger, deliver)
            self.current = None
            self.handled += len(bundle)
            if completed is not None and report is not None:
                report(*completed)

    def has_work(self) -> bool:
        return bool(self.mailbox) or self.inbox.has_work(not self.knobs.paused)

    def _idle(self) -> None:
        self.sleeping = True
        self.wake.clear()
        if self.has_work() or self.stopped:
            self.sleeping = False
            return
        self.wake.wait(IDLE_WAIT_S)
        self.sleeping = False


__all__ = ["IDLE_WAIT_S", "MeasuredTime", "StepLoop"]
