"""The simulated-hardware backend: a discrete-event scheduler on a virtual clock, no threads, no sleeps.

It drives the same :class:`~amp_notebook.runtime.session.Session` as the threaded backend (graph,
placement, controller, worker state machines, credit counting) but keeps time itself: every handled
message advances a *virtual* clock by what the :class:`~amp_notebook.runtime.costs.CostModel` says it
costs on the simulated device, and every message that crosses workers arrives after the link's latency
and transfer time. The numpy math still runs (training converges exactly as it would); only time is
virtual, so a run is exact, fast and reproducible: the same graph, data, seed and cost model give the
same trace and the same parameters, bit for bit.

State per worker: two FIFO queues, ``bwd`` (backward messages and flush updates) and ``fwd``, taken
backward first, as the threaded backend does (paper, appendix A); and whether it is busy. One event heap
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
the trace's time base.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

from amp_notebook.ir.message import FWD, Message
from amp_notebook.runtime.blas import single_threaded_blas
from amp_notebook.runtime.costs import CostModel, CostTable
from amp_notebook.runtime.session import Session

ARRIVE, COMPLETE, FREE = 0, 1, 2  # at equal times: arrivals, then completions, then free workers


class SimulatedBackend:
    """Runs a session to the end in virtual time; ``wall_s`` is the makespan, ``stats()`` the link use."""

    def __init__(self, session: Session, costs: CostModel | None = None) -> None:
        self.session = session
        self.costs = costs if costs is not None else CostModel()
        self.table: CostTable = self.costs.compile(session.plan)
        workers = session.config.workers
        self.now = 0.0
        for worker in session.workers:
            worker.clock = self._clock
        self.bwd: list[deque[Message]] = [deque() for _ in range(workers)]
        fifo = session.config.priority == "fifo"  # arrival order: one inbox for both directions
        self.fwd: list[deque[Message]] = self.bwd if fifo else [deque() for _ in range(workers)]
        self.busy = [False] * workers
        self.counts: dict[int, int] = {}
        self.heap: list[tuple[float, int, int, int, Any]] = []  # (time, kind, seq, worker, payload)
        self.seq = 0
        self.finished = False
        self.origin = 0.0
        self.wall_s = 0.0
        self.messages = 0
        self.link_bytes = [[0] * workers for _ in range(workers)]
        self.link_messages = [[0] * workers for _ in range(workers)]

    def _clock(self) -> float:
        return self.now

    # ------------------------------------------------------------------ driver
    def run(self) -> None:
        """Process events until the controller finishes the run (BLAS on one thread: one simulator thread,
        and the same reduction order every run)."""
        with single_threaded_blas():
            self._apply(self.session.controller.start())
            self._loop()
        self.wall_s = self.now

    def _loop(self) -> None:
        session = self.session
        heap = self.heap
        pop, push = heapq.heappop, heapq.heappush
        workers = session.workers
        owner = session.plan.owner
        fwdqs, bwdqs, busy, counts = self.fwd, self.bwd, self.busy, self.counts
        cost = self.table.message
        latency, seconds_per_bit = self.table.latency, self.table.seconds_per_bit
        update_s = self.table.update_s
        link_bytes, link_messages = self.link_bytes, self.link_messages
        tracing = session.config.trace
        handled = 0
        while heap and not self.finished:
            t, kind, _, w, obj = pop(heap)
            self.now = t
            if kind == FREE:
                bwdq, fwdq = bwdqs[w], fwdqs[w]
                if bwdq:
                    msg = bwdq.popleft()
                elif fwdq:
                    msg = fwdq.popleft()
                else:
                    busy[w] = False
                    continue
                worker = workers[w]
                depth = len(bwdq) + len(fwdq)
                node = msg.node
                seconds, _ = cost(node, msg.direction, msg.payload)
                outs = worker.handle(msg)
                handled += 1
                end = t + seconds
                key = msg.state["key"]
                record = worker.buffer.record
                if tracing:
                    record(node, msg.direction, key, t, end, depth)
                sent = end  # outgoing messages leave before the node's own update runs (as in the threaded backend)
                due = worker.due_updates
                if due:
                    for u in due:
                        worker.apply_update(u)
                        u_end = end + update_s[u]
                        if tracing:
                            record(u, 2, key, end, u_end, depth)
                        end = u_end
                    due.clear()
                left = counts[key] + len(outs) - 1
                if left:
                    counts[key] = left
                else:
                    del counts[key]
                    self.seq += 1
                    push(heap, (end, COMPLETE, self.seq, 0, key))
                for m in outs:
                    dst = owner[m.node]
                    if dst == w:
                        (fwdq if m.direction == FWD else bwdq).append(m)
                    else:
                        _, nbytes = cost(m.node, m.direction, m.payload)
                        link_bytes[w][dst] += nbytes
                        link_messages[w][dst] += 1
                        self.seq += 1
                        push(heap, (sent + latency[w][dst] + 8 * nbytes * seconds_per_bit[w][dst], ARRIVE, self.seq,
                                    dst, m))  # fmt: skip
                self.seq += 1
                push(heap, (end, FREE, self.seq, w, None))
            elif kind == ARRIVE:
                (fwdqs[w] if obj.direction == FWD else bwdqs[w]).append(obj)
                if not busy[w]:
                    busy[w] = True
                    self.seq += 1
                    push(heap, (t, FREE, self.seq, w, None))
            else:
                self.messages += handled
                handled = 0
                if obj >= 0:
                    session.key_done(obj)
                self._apply(session.controller.on_complete(obj))
        self.messages += handled
        if not self.finished:
            stuck = dict(list(counts.items())[:5])
            raise RuntimeError(
                f"simulation of graph {session.graph.name!r} ran out of events at virtual time {self.now:.6g}s "
                f"with keys still holding messages {stuck} and the controller not finished; a message was lost "
                "(report this as a bug with the graph)"
            )

    def _apply(self, actions: list[Any]) -> None:
        if self.session.apply(actions, self._inject, lambda: self.now):
            self.finished = True

    def _inject(self, key: int, msgs: list[Message]) -> None:
        """Messages from the controller land in their workers' queues now, with no link cost."""
        self.counts[key] = self.counts.get(key, 0) + len(msgs)
        owner = self.session.plan.owner
        for m in msgs:
            w = owner[m.node]
            (self.fwd[w] if m.direction == FWD else self.bwd[w]).append(m)
            if not self.busy[w]:
                self.busy[w] = True
                self.seq += 1
                heapq.heappush(self.heap, (self.now, FREE, self.seq, w, None))

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
            "bytes_sent": total,
            "bandwidth_bits_per_s": 8 * total / makespan if makespan > 0 else 0.0,
            "busiest_link_bits_per_s": 8 * max(map(max, self.link_bytes)) / makespan if makespan > 0 else 0.0,
            "links": links,
            "costs": self.costs.spec(),
        }


__all__ = ["SimulatedBackend"]
