"""The simulated-hardware backend: a discrete-event scheduler on a virtual clock, no threads, no sleeps.

It drives the same :class:`~amp_notebook.runtime.session.Session` as the threaded backend (graph,
placement, controller, worker state machines, credit counting) but keeps time itself: every handled
message advances a *virtual* clock by what the :class:`~amp_notebook.runtime.costs.CostModel` says it
costs on the simulated device, and every message that crosses workers arrives after the link's latency
and transfer time. The numpy math still runs (training converges exactly as it would); only time is
virtual, so a run is exact, fast and reproducible: the same graph, data, seed and cost model give the
same trace and the same parameters, bit for bit.

State per worker: an :class:`~amp_notebook.runtime.inbox.Inbox` (the same priority rules and bundles as
the threaded backend: backward first, the key admitted earliest first); and whether it is busy. Each
handled bundle runs the step every backend shares (:meth:`~amp_notebook.runtime.worker.Worker.step`)
with a :class:`VirtualTime` clock that reads the cost model instead of a watch. One event heap
orders everything by ``(virtual time, kind, sequence number)``: at one instant, arrivals come first, then
key completions (whose admissions inject messages), then workers picking their next message, so a worker
that frees up at t sees everything that reached it at t; the sequence number breaks the remaining ties in
the order events were scheduled, which makes runs deterministic. Three kinds of event:

* ``FREE(w)`` at time t: worker w takes its next message (backward first). It runs ``Worker.handle`` at
  once and computes the message's cost c, so the worker is busy on ``[t, t + c]``; local updates the
  handling made due (``amp`` mode) follow, each ``[end, end + update cost]``. Trace rows get these
  virtual times. The worker's next ``FREE`` is scheduled at the end. Running the math at the start is
  exact because a worker's state is only read by the messages it handles later, after the end;
  outgoing messages and completions are released at the end, as below.
* ``ARRIVE(w, msg)``: a message lands in w's queue; an idle worker is woken by a ``FREE(w)`` at that
  time. Outgoing messages to the same worker
  skip this event and go straight into its queue, where only the worker itself can see them, after
  ``end``. Messages to another worker arrive at ``end + latency + 8 * bytes / bandwidth``; their bytes
  are counted per link, which gives the bandwidth the run used.
* ``COMPLETE(key)``: credit counting as in the threaded backend (count += emitted - 1 when a message is
  handled); when a key's count reaches zero no message of it remains anywhere, and the controller hears
  of it at the end of that last message. Its actions (admit keys, flush, end the epoch) take effect at
  that virtual time: admitted keys' messages are injected into their Input nodes' workers with no link
  cost; a flush sends update messages to every parameterized node's worker.

``wall_s`` is the virtual makespan; ``Worker.clock`` reads the virtual clock, so staleness rows share
the trace's time base. A simulation whose events run out before the controller has finished (a lost
message) raises :class:`~amp_notebook.runtime.watchdog.StuckRunError` with the same diagnosis as the
threaded backend's watchdog: keys in flight, queues, and the nodes still holding state for a key.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from amp_notebook.ir.message import Message
from amp_notebook.runtime.blas import single_threaded_blas
from amp_notebook.runtime.costs import CostModel, CostTable
from amp_notebook.runtime.inbox import Inbox
from amp_notebook.runtime.session import Session
from amp_notebook.runtime.watchdog import StuckRunError, diagnose

ARRIVE, COMPLETE, FREE = 0, 1, 2  # at equal times: arrivals, then completions, then free workers


class VirtualTime:
    """The step's clock in the simulator: the virtual now, advanced by what the cost model charges."""

    def __init__(self, backend: SimulatedBackend) -> None:
        self.backend = backend
        self.bundle_seconds = backend.table.bundle
        self.update_s = backend.table.update_s

    def start(self) -> float:
        return self.backend.virtual_now

    def handled(self, start: float, bundle: Sequence[Message]) -> float:
        return start + self.bundle_seconds(bundle)

    def update_start(self, previous_end: float) -> float:
        return previous_end

    def updated(self, start: float, node: int) -> float:
        return start + self.update_s[node]


class SimulatedBackend:
    """Runs a session to the end in virtual time; ``wall_s`` is the makespan, ``stats()`` the link use."""

    def __init__(self, session: Session, costs: CostModel | None = None) -> None:
        self.session = session
        self.costs = costs if costs is not None else CostModel()
        self.table: CostTable = self.costs.compile(session.plan)
        config = session.config
        workers = config.workers
        self.virtual_now = 0.0
        for worker in session.workers:
            worker.clock = self.now
        self.inboxes = [
            Inbox(session.plan.max_bundle, config.priority, config.order, w.bundle_cap) for w in session.workers
        ]
        self.busy = [False] * workers
        self.heap: list[tuple[float, int, int, int, Any]] = []  # (time, kind, seq, worker, payload)
        self.seq = 0
        self.finished = False
        self.origin = 0.0
        self.wall_s = 0.0
        self.messages = 0
        self.bundles = 0
        self.link_bytes = [[0] * workers for _ in range(workers)]
        self.link_messages = [[0] * workers for _ in range(workers)]
        self._sender = 0  # the worker whose step is delivering messages now
        self._timer = VirtualTime(self)

    # ------------------------------------------------------------------ driver
    def run(self) -> None:
        """Process events until the controller finishes the run (BLAS on one thread: one simulator thread,
        and the same reduction order every run)."""
        with single_threaded_blas():
            self.finished = self.session.begin(self)
            self._loop()
        self.wall_s = self.virtual_now

    def _loop(self) -> None:
        session = self.session
        heap = self.heap
        pop, push = heapq.heappop, heapq.heappush
        workers, inboxes, busy = session.workers, self.inboxes, self.busy
        credits, timer, deliver = session.credits, self._timer, self.deliver
        while heap and not self.finished:
            t, kind, _, w, obj = pop(heap)
            self.virtual_now = t
            if kind == FREE:
                inbox = inboxes[w]
                bundle = inbox.take()
                if bundle is None:
                    busy[w] = False
                    continue
                self._sender = w
                done, flushed, end = workers[w].step(bundle, len(inbox), timer, credits, deliver)
                self.messages += len(bundle)
                self.bundles += 1
                if done or flushed:
                    self.seq += 1
                    push(heap, (end, COMPLETE, self.seq, 0, (done, flushed)))
                self.seq += 1
                push(heap, (end, FREE, self.seq, w, None))
            elif kind == ARRIVE:
                inboxes[w].push(obj)
                if not busy[w]:
                    busy[w] = True
                    self.seq += 1
                    push(heap, (t, FREE, self.seq, w, None))
            else:
                self.finished = session.completed(obj[0], obj[1], self)
        if not self.finished:
            keys, flushes = session.credits.outstanding(), dict(session.credits.flushes)
            raise StuckRunError(
                diagnose(
                    f"the simulation of graph {session.graph.name!r} ran out of events at virtual time "
                    f"{self.virtual_now:.6g} s with the controller not finished",
                    session.plan,
                    session.contexts,
                    keys,
                    flushes,
                    [len(i) for i in self.inboxes],
                    ["idle"] * len(self.inboxes),
                )
            )

    def deliver(self, msgs: list[Message], at: float) -> None:
        """Messages a step emitted at virtual time ``at``: into the sender's own inbox at once (only it can
        see them, after its step), to another worker after the link's latency and transfer time."""
        w = self._sender
        owner = self.session.plan.owner
        table = self.table
        latency, seconds_per_bit = table.latency[w], table.seconds_per_bit[w]
        for m in msgs:
            dst = owner[m.node]
            if dst == w:
                self.inboxes[w].push(m)
                continue
            nbytes = table.message_bytes(m.node, m.direction, m.payload)
            self.link_bytes[w][dst] += nbytes
            self.link_messages[w][dst] += 1
            self.seq += 1
            heapq.heappush(self.heap, (at + latency[dst] + 8 * nbytes * seconds_per_bit[dst], ARRIVE, self.seq, dst, m))

    def inject(self, msgs: list[Message]) -> None:
        """Messages from the controller land in their workers' inboxes now, with no link cost."""
        owner = self.session.plan.owner
        for m in msgs:
            w = owner[m.node]
            self.inboxes[w].push(m)
            if not self.busy[w]:
                self.busy[w] = True
                self.seq += 1
                heapq.heappush(self.heap, (self.virtual_now, FREE, self.seq, w, None))

    def now(self) -> float:
        return self.virtual_now

    # ------------------------------------------------------------------ results
    def stats(self) -> dict[str, Any]:
        """Messages handled, bytes and messages per link, and the bandwidth used (bits / makespan)."""
        total = sum(map(sum, self.link_bytes))
        makespan = self.wall_s
        workers = len(self.link_bytes)
        links = {
            f"{a}->{b}": {"bytes": self.link_bytes[a][b], "messages": self.link_messages[a][b]}
            for a in range(workers)
            for b in range(workers)
            if self.link_messages[a][b]
        }
        return {
            "messages": self.messages,
            "bundles": self.bundles,
            "bytes_sent": total,
            "bandwidth_bits_per_s": 8 * total / makespan if makespan > 0 else 0.0,
            "busiest_link_bits_per_s": 8 * max(map(max, self.link_bytes)) / makespan if makespan > 0 else 0.0,
            "links": links,
            "costs": self.costs.spec(),
        }


__all__ = ["SimulatedBackend"]
