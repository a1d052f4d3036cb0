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

* ``FREE(w)`` at time t: worker w takes its next message (backward first). It runs ``Worker.step`` at
  once and computes the message's cost c, so the worker is busy on ``[t, t + c]``; local updates the
  handling made due (``amp`` mode) follow, each ``[end, end + update cost]``. Trace rows get these
  virtual times. The worker's next ``FREE`` is scheduled at the end. Running the math at the start is
  exact because a worker's state is only read by the messages it handles later, after the end;
  outgoing messages and completions are released at the end, as below.
* ``ARRIVE(w, msg)``: a message lands in w's queue; an idle worker is woken by a ``FREE(w)`` at that
  time. Outgoing messages to the same worker
  skip this event and go straight into its queue, where only the worker itself can see them, after
  ``end``. Messages to another worker arrive at ``end + latency + 8 * bytes / bandwidth``; their bytes
  are counted per link, which gives the bandwidth the run used. Where the cost model charges receiving
  (``receive_overhead_s``, ``receive_s_per_byte``), w owes that time from the arrival and pays it in its
  next step, which ends that much later.
* ``COMPLETE(key)``: credit counting as in the threaded backend (count += emitted - 1 when a message is
  handled); when a key's count reaches zero no message of it remains anywhere, and the controller hears
  of it at the end of that last message. Its actions (admit keys, flush, end the epoch) take effect at
  that virtual time: admitted keys' messages are injected into their Input nodes' workers with no link
  cost; a flush sends update messages to every parameterized node's worker.

``wall_s`` is the virtual makespan; the step's timer (:class:`VirtualTime`) reads the virtual clock, so
staleness rows share the trace's time base. Completion is counted in one
:class:`~amp_notebook.runtime.credits.Credits` ledger, as on threads. A simulation whose events run out
before the controller has finished (a lost message) raises
:class:`~amp_notebook.runtime.watchdog.StuckRunError` with the same diagnosis as the threaded backend's
watchdog: keys in flight, queues, and the nodes still holding state for a key.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from numpy import ndarray

from amp_notebook.errors import RunStateError
from amp_notebook.ir.message import Message
from amp_notebook.runtime.backend import admit_by_messages
from amp_notebook.runtime.blas import single_threaded_blas
from amp_notebook.runtime.controller import Action, KeyInfo
from amp_notebook.runtime.costs import CostModel, CostTable
from amp_notebook.runtime.credits import Credits
from amp_notebook.runtime.inbox import Inbox
from amp_notebook.runtime.knobs import KnobChange
from amp_notebook.runtime.session import Session
from amp_notebook.runtime.watchdog import Diagnosis, StuckRunError, diagnose
from amp_notebook.runtime.worker import Deliver

ARRIVE, COMPLETE, FREE = 0, 1, 2  # at equal times: arrivals, then completions, then free workers


class VirtualTime:
    """The step's clock in the simulator: the virtual now, advanced by what the cost model charges."""

    def __init__(self, table: CostTable) -> None:
        self.now = 0.0  # set by the simulator before each step
        self.owed = 0.0  # receiving time the stepping worker owes (set by the simulator before each step)
        self.ends = table.ends
        # (start, bundle) -> when it ends: one call per step; receiving time only where the model charges it
        self.handled = self._handled_and_received if table.receives else table.ends
        self.update_s = table.update_s

    def _handled_and_received(self, start: float, bundle: Sequence[Message]) -> float:
        return self.ends(start, bundle) + self.owed

    def start(self) -> float:
        return self.now

    def update_start(self, previous_end: float) -> float:
        return previous_end

    def updated(self, start: float, node: int) -> float:
        return start + self.update_s[node]


class SimulatedBackend:
    """Runs a session to the end in virtual time; ``wall_s`` is the makespan, ``stats()`` the link use.
    Implements :class:`~amp_notebook.runtime.backend.Backend`. Owns the event heap, the inboxes, the
    virtual clock and the credit ledger; never changes the session beyond the protocol's calls."""

    def __init__(self, session: Session, costs: CostModel | None = None) -> None:
        self.session = session
        self.costs = costs if costs is not None else CostModel()
        self.table: CostTable = self.costs.compile(session.plan)
        config = session.config
        workers = config.workers
        self.ledger = Credits()
        self.started = threading.Event()
        self.inboxes = [
            Inbox(session.knobs, config.inbox_priority, config.order, w.bundle_cap, session.plan.parameterized)
            for w in session.workers
        ]
        self.busy = [False] * workers
        self.owed = [0.0] * workers  # receiving time each worker pays in its next step
        self.heap: list[tuple[float, int, int, int, Any]] = []  # (time, kind, seq, worker, payload)
        self._seq = itertools.count()
        self.finished = False
        self.origin = 0.0
        self.wall_s = 0.0
        self.messages = 0
        self.bundles = 0
        self.link_bytes = [[0] * workers for _ in range(workers)]
        self.link_messages = [[0] * workers for _ in range(workers)]
        self._timer = VirtualTime(self.table)
        self._calls: deque[Callable[[], list[Action]]] = deque()
        session.knobs.subscribe(self.knobs_changed)

    # ------------------------------------------------------------------ driver
    def run(self) -> None:
        """Process events until the controller finishes the run (BLAS on one thread: one simulator thread,
        and the same reduction order every run)."""
        self.started.set()
        with single_threaded_blas():
            self.finished = self.session.begin(self)
            self._loop()
        self.wall_s = self.virtual_now

    def _loop(self) -> None:
        session = self.session
        heap, seq, calls = self.heap, self._seq, self._calls
        pop, push = heapq.heappop, heapq.heappush
        workers, inboxes, busy = session.workers, self.inboxes, self.busy
        ledger, timer = self.ledger, self._timer
        receives, owed = self.table.receives, self.owed
        delivers = [self._deliver_from(w) for w in range(len(workers))]
        messages = bundles = 0
        finished = self.finished
        while calls and not finished:  # queued while the run began
            finished = session.carry_out(calls.popleft()(), self)
        while heap and not finished:
            t, kind, _, w, obj = pop(heap)
            timer.now = t
            if kind == FREE:
                inbox = inboxes[w]
                bundle = inbox.take()
                if bundle is None:
                    busy[w] = False
                    continue
                if receives:
                    timer.owed, owed[w] = owed[w], 0.0
                completed, end = workers[w].step(bundle, inbox.size, timer, ledger, delivers[w])
                messages += len(bundle)
                bundles += 1
                if completed is not None:
                    push(heap, (end, COMPLETE, next(seq), 0, completed))
                push(heap, (end, FREE, next(seq), w, None))
            elif kind == ARRIVE:
                if receives:  # (message, its receiving time)
                    obj, receive_s = obj
                    owed[w] += receive_s
                inboxes[w].push(obj)
                if not busy[w]:
                    busy[w] = True
                    push(heap, (t, FREE, next(seq), w, None))
            else:
                self.messages, self.bundles = self.messages + messages, self.bundles + bundles
                messages = bundles = 0
                finished = session.completed(obj[0], obj[1], self)
                while calls and not finished:  # queued by the session's callbacks
                    finished = session.carry_out(calls.popleft()(), self)
        self.finished = finished
        self.messages, self.bundles = self.messages + messages, self.bundles + bundles
        if not finished:
            raise StuckRunError(
                self.diagnose(
                    f"the simulation of graph {session.graph.name!r} ran out of events at virtual time "
                    f"{self.virtual_now:.6g} s with the controller not finished"
                )
            )

    def _deliver_from(self, w: int) -> Deliver:
        """Worker ``w``'s delivery: messages a step emitted at virtual time ``at`` go into its own inbox at once
        (only it can see them, after its step), to another worker after the link's latency and transfer time."""
        owner, heap, seq, push = self.session.plan.owner, self.heap, self._seq, heapq.heappush
        table = self.table
        message_bytes, cache = table.message_bytes, table._cache
        latency, seconds_per_bit = table.latency[w], table.seconds_per_bit[w]
        link_bytes, link_messages = self.link_bytes[w], self.link_messages[w]
        own = self.inboxes[w].push
        receive_s = table.receive_s if table.receives else None

        def deliver(msgs: list[Message], at: float) -> None:
            for m in msgs:
                dst = owner[m.node]
                if dst == w:
                    own(m)
                    continue
                payload = m.payload  # probe the cost cache with its key (CostTable._lookup) before asking it
                hit = None
                if payload.__class__ is ndarray:
                    hit = cache.get((m.node, m.direction, payload.shape, payload.dtype))
                nbytes = hit[2] if hit is not None else message_bytes(m.node, m.direction, payload)
                link_bytes[dst] += nbytes
                link_messages[dst] += 1
                arrives = at + latency[dst] + 8 * nbytes * seconds_per_bit[dst]
                push(heap, (arrives, ARRIVE, next(seq), dst, m if receive_s is None else (m, receive_s(nbytes))))

        return deliver

    # ------------------------------------------------------------------ the Backend protocol
    def admit(self, infos: Sequence[KeyInfo]) -> list[bool]:
        return [admit_by_messages(self.session, self, info) for info in infos]

    def inject(self, msgs: list[Message]) -> None:
        """Messages from the controller land in their workers' inboxes now, with no link cost."""
        owner = self.session.plan.owner
        for m in msgs:
            w = owner[m.node]
            self.inboxes[w].push(m)
            if not self.busy[w]:
                self.busy[w] = True
                heapq.heappush(self.heap, (self._timer.now, FREE, next(self._seq), w, None))

    def now(self) -> float:
        return self._timer.now

    @property
    def virtual_now(self) -> float:
        """The virtual time of the event in hand (the clock lives in the step's timer)."""
        return self._timer.now

    def call(self, fn: Callable[[], list[Action]]) -> None:
        """Run ``fn() -> actions`` after the event in hand (the simulator's one thread is its driver)."""
        self._calls.append(fn)

    def knobs_changed(self, change: KnobChange) -> None:
        """Inboxes and workers read the knobs in place."""

    def sync_state(self) -> None:
        """Nothing to bring back: the workers step the session's own contexts."""

    def epoch_ended(self, nodes: Sequence[int]) -> None:
        """Nothing to hand back: the workers read the session's contexts and optimizers."""

    def diagnose(self, reason: str) -> Diagnosis:
        """What is in flight, queued and held now (no worker is ever inside a step between events)."""
        keys, flushes = self.ledger.in_flight()
        session = self.session
        depths = [len(i) for i in self.inboxes]
        return diagnose(reason, session.plan, session.contexts, keys, flushes, depths, ["idle"] * len(depths))

    def shutdown(self, timeout: float | None = None) -> None:
        """Nothing runs outside ``run``."""

    def restart(self, checkpoint: Any) -> None:
        """Never called: simulated workers are never lost (nothing raises a WorkerLostError here)."""
        raise RunStateError("restart: a simulated run loses no worker, so there is nothing to restart")

    # ------------------------------------------------------------------ results
    def stats(self) -> dict[str, Any]:
        """Messages handled, bytes and messages per link, and the bandwidth used (bits / makespan)."""
        return link_stats(self.messages, self.bundles, self.link_bytes, self.link_messages, self.wall_s, self.costs)

    def worker_time(self) -> list[dict[str, Any]] | None:
        """None: simulated workers spend virtual time, which the trace holds."""
        return None


def link_stats(
    messages: int,
    bundles: int,
    link_bytes: Sequence[Sequence[int]],
    link_messages: Sequence[Sequence[int]],
    makespan: float,
    costs: CostModel,
) -> dict[str, Any]:
    """A simulation's statistics (either engine's): messages and bundles handled, bytes and messages per link
    (``[from][to]``), the bandwidth used (bits / makespan) and the cost model."""
    total = sum(map(sum, link_bytes))
    workers = len(link_bytes)
    links = {
        f"{a}->{b}": {"bytes": link_bytes[a][b], "messages": link_messages[a][b]}
        for a in range(workers)
        for b in range(workers)
        if link_messages[a][b]
    }
    return {
        "messages": messages,
        "bundles": bundles,
        "bytes_sent": total,
        "bandwidth_bits_per_s": 8 * total / makespan if makespan > 0 else 0.0,
        "busiest_link_bits_per_s": 8 * max(map(max, link_bytes)) / makespan if makespan > 0 else 0.0,
        "links": links,
        "costs": costs.spec(),
    }


__all__ = ["SimulatedBackend", "link_stats"]
