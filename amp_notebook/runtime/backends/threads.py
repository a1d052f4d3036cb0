"""The threaded backend: one OS thread per worker, messages moved through lock-free deques.

Each worker thread owns two inboxes, ``bwd`` and ``fwd`` (``collections.deque``: appends and pops are
atomic, so many producers need no lock). It always takes from ``bwd`` first: backward messages (and
flush updates) run before forward ones, the paper's priority rule (appendix A) as a two-level priority
queue. An idle worker sleeps on an Event that senders set only when it is asleep, so a busy pipeline pays
no wake-up cost.

Credit counting: a key's count starts at the number of messages injected for it; after handling a
message the worker adds ``len(outgoing) - 1`` *before* routing the outgoing messages (so another worker
cannot consume them and drive the count to zero early). When it reaches zero the key is complete and the
driver thread is told. numpy kernels release the GIL, so workers overlap their matrix work; BLAS is
pinned to one thread per worker so they do not fight over the cores.

Errors raised in a node stop every worker; the driver joins all threads and re-raises the error, which
names the node, direction, port and message state.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from typing import Any

from amp_notebook.ir.message import FWD, Message
from amp_notebook.runtime.blas import single_threaded_blas
from amp_notebook.runtime.session import Session


class _WorkerThread:
    def __init__(self, index: int, backend: ThreadedBackend) -> None:
        self.index = index
        self.backend = backend
        self.worker = backend.session.workers[index]
        self.bwd: deque[Message] = deque()
        self.fifo = backend.session.config.priority == "fifo"
        # arrival order: one inbox for both directions; otherwise backward (and updates) first
        self.fwd: deque[Message] = self.bwd if self.fifo else deque()
        self.wake = threading.Event()
        self.sleeping = False
        self.thread = threading.Thread(target=self.run, name=f"amp-worker-{index}", daemon=True)

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # report anything, including errors in our own glue
            self.backend.fail(exc)

    def _loop(self) -> None:
        backend = self.backend
        worker = self.worker
        handle = worker.handle
        record = worker.buffer.record
        due = worker.due_updates
        apply_update = worker.apply_update
        fwdq, bwdq = self.fwd, self.bwd
        deliver = backend.deliver
        counts = backend.counts
        lock = backend.count_lock
        done = backend.events.put
        perf = time.perf_counter
        tracing = backend.session.config.trace
        paused = backend.paused
        fifo = self.fifo
        while not backend.stopped:
            if bwdq:
                if fifo and bwdq[0].direction == FWD and paused.is_set():
                    self._idle()
                    continue
                msg = bwdq.popleft()
            elif fwdq and not paused.is_set():
                msg = fwdq.popleft()
            else:
                self._idle()
                continue
            depth = len(bwdq) + len(fwdq)
            t0 = perf()
            outs = handle(msg)
            t1 = perf()
            key = msg.state["key"]
            if tracing:
                record(msg.node, msg.direction, key, t0, t1, depth)
            if due:
                # Send the gradients on first, then update: the previous stage need not wait for our
                # optimizer step. The handled message keeps its credit until the update is done, so
                # the key cannot complete (and an epoch end cannot average replicas) mid-update.
                if outs:
                    with lock:
                        counts[key] += len(outs)
                    for m in outs:
                        deliver(m)
                    outs = ()
                for node in due:
                    u0 = perf()
                    apply_update(node)
                    if tracing:
                        record(node, 2, key, u0, perf(), depth)
                due.clear()
            with lock:
                left = counts[key] + len(outs) - 1
                if left:
                    counts[key] = left
                else:
                    del counts[key]
            if not left:
                done(("done", key))
            for m in outs:
                deliver(m)

    def _has_work(self) -> bool:
        paused = self.backend.paused.is_set()
        if self.fifo:
            return bool(self.bwd) and not (paused and self.bwd[0].direction == FWD)
        return bool(self.bwd) or (bool(self.fwd) and not paused)

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
        self.counts: dict[int, int] = {}
        self.count_lock = threading.Lock()
        self.events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.stopped = False
        self.paused = threading.Event()  # set: workers take no new forward messages
        self.started = threading.Event()  # set once `origin` is fixed (a background Run waits for it)
        self.threads = [_WorkerThread(w, self) for w in range(session.config.workers)]
        self._owner = session.plan.owner
        self.finished = False
        self.origin = 0.0
        self.wall_s = 0.0
        self._error: BaseException | None = None

    # ------------------------------------------------------------ called by workers
    def deliver(self, msg: Message) -> None:
        t = self.threads[self._owner[msg.node]]
        (t.fwd if msg.direction == FWD else t.bwd).append(msg)
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
                self._apply(session.controller.start())
                while not self.finished:
                    kind, value = self.events.get()
                    if kind == "error":
                        raise value
                    if kind == "done":
                        if value >= 0:
                            session.key_done(value)
                        self._apply(session.controller.on_complete(value))
                    elif kind == "call":
                        self._apply(value())
            finally:
                self.wall_s = time.perf_counter() - self.origin
                self.shutdown()

    def call(self, fn: Any) -> None:
        """Run ``fn() -> actions`` in the driver thread (live changes from other threads)."""
        self.events.put(("call", fn))

    def shutdown(self) -> None:
        self.stopped = True
        for t in self.threads:
            t.wake.set()
        for t in self.threads:
            if t.thread.is_alive():
                t.thread.join()

    def _apply(self, actions: list[Any]) -> None:
        if self.session.apply(actions, self._send, self.now):
            self.finished = True

    def _send(self, key: int, msgs: list[Message]) -> None:
        with self.count_lock:
            self.counts[key] = self.counts.get(key, 0) + len(msgs)
        for m in msgs:
            self.deliver(m)


__all__ = ["ThreadedBackend"]
