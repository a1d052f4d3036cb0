"""The worker as a pure state machine: ``handle(bundle) -> outgoing messages``, and the worker *step*.

A worker owns the contexts of the nodes placed on it and nothing else; threads, queues and clocks
belong to the backend that drives it (the threaded backend, the simulator, a Ray actor, the reference
tests), so the same logic runs everywhere. It handles *bundles*: messages the inbox gave together, all for
one node, direction and port (a lone message is a bundle of one). For a bundle it:

* forward: runs the op (caching only for training keys whose backward will come back), remembers the
  parameter version at forward for staleness, routes each output along its edge; a loss's ``loss``
  output starts the backward pass at once for training keys;
* backward: runs the op's backward, records each gradient's staleness (version now - version at its
  forward) on parameterized nodes, counts them toward ``min_update_frequency`` and, in ``amp`` mode, marks
  the node due for an update once it holds enough; routes gradients only along edges that carry them;
* update (a flush in ``sync``/``pipeline`` mode): applies the node's optimizer to what it holds.

A bundle of several messages runs as one call of the op (``forward_bundle``/``backward_bundle``); a bundle
of one calls ``forward``/``backward`` directly, the one fast path, inside the same methods. Each message
keeps its own state, cache entry, staleness row and credit either way, and an op's exception is wrapped in
one place (:meth:`Worker.handle`) as a :class:`NodeError` naming the node, direction, port and state.

:meth:`Worker.step` is everything that follows, written once for every backend: handle a bundle, write its
trace row, and if the handling made local updates due, send the outgoing messages on *first* and then
update (the previous stage need not wait for our optimizer step; the bundle keeps its share of the ledger
until the update is done, so its keys cannot complete mid-update), then release the bundle. What differs
between backends is passed in: a :class:`Timer`, the step's only clock (measured time on threads, virtual
time in the simulator; staleness rows take their time from it too), the ledger's step side
(:class:`~amp_notebook.runtime.ledger.StepLedger`), and ``deliver(messages, at)``, which hands outgoing
messages to their workers. Live thresholds (``min_update_frequency``, ``max_bundle``) are read from the
session's :class:`~amp_notebook.runtime.knobs.Knobs` in place.

**The bundle budget** (``bundle_budget_s``). A bundle's outputs leave together once its last message is done, so
the worker they feed waits for the whole lump; that pays where messages are small and the call's own cost is
much of theirs, not where each is already a batch. So each worker keeps, per node and direction, the seconds
per message of the bundles it handled there (by the step's timer: measured on threads, virtual in a simulation,
so a simulated schedule stays exact), as a moving average (:func:`per_message_seconds`), and a bundle takes no
more messages than fit in the budget at that rate: ``max(1, int(budget / seconds))``, under ``max_bundle``. A node
not yet timed on this worker bundles up to ``max_bundle``. The native engine keeps the same average with the
same arithmetic (``Worker::step`` in ``src/step.cc``; the cap in ``src/worker.cc``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from amp_notebook.errors import AmpError
from amp_notebook.ir.message import BWD, FWD, PHASES, UPDATE, Message, State
from amp_notebook.ir.ops import LOSS_PORT, NodeContext
from amp_notebook.runtime.knobs import Knobs
from amp_notebook.runtime.ledger import Completed, StepLedger
from amp_notebook.runtime.plan import Plan
from amp_notebook.trace.buffers import WorkerBuffer

Deliver = Callable[[list[Message], float], None]


class Timer(Protocol):
    """The clock of a step: measured (threads) or computed from a cost model (the simulator)."""

    def start(self) -> float:
        """When the handling of a bundle starts."""
        ...

    def handled(self, start: float, bundle: Sequence[Message]) -> float:
        """When the handling of ``bundle`` (begun at ``start``) ends."""
        ...

    def update_start(self, previous_end: float) -> float:
        """When a local update that follows the work ending at ``previous_end`` starts."""
        ...

    def updated(self, start: float, node: int) -> float:
        """When ``node``'s update (begun at ``start``) ends."""
        ...


class NodeError(AmpError, RuntimeError):
    """An exception raised inside a node, with the node, direction, port and message state."""

    def __init__(self, node: str, kind: str, direction: str, port: str, state: Any, cause: BaseException) -> None:
        self.node, self.kind, self.direction, self.port, self.state = node, kind, direction, port, state
        super().__init__(
            f"{kind} {node!r} failed on a {direction} message at port {port!r} with state {state}: "
            f"{type(cause).__name__}: {cause}"
        )


PER_MESSAGE_WEIGHT = 0.25  # the newest bundle's weight in a node's seconds per message (per_message_seconds)


def per_message_seconds(average: float, seconds: float) -> float:
    """A node's seconds per message on a worker after a bundle that took ``seconds`` per message: the first
    bundle's figure (``average`` 0.0: none yet), then an exponential moving average. The native engine computes
    the same in the same order (``src/step.cc``), so both engines' simulated schedules stay equal."""
    return seconds if average == 0.0 else average + (seconds - average) * PER_MESSAGE_WEIGHT


class Worker:
    """One worker's nodes as a state machine (module docstring). Owns the contexts of its nodes, its trace
    buffer and its loss reports; never touches a queue, a thread, a clock or another worker's nodes."""

    def __init__(
        self,
        index: int,
        plan: Plan,
        contexts: dict[int, NodeContext],
        local_updates: bool,
        knobs: Knobs | None = None,
        buffer: WorkerBuffer | None = None,
        tracing: bool = True,
        bundle_budget_s: float | None = None,
    ) -> None:
        self.index = index
        self.plan = plan
        self.contexts = contexts
        self.local_updates = local_updates
        self.knobs = knobs if knobs is not None else Knobs(1, plan.min_update_frequency)
        self.buffer = buffer if buffer is not None else WorkerBuffer()
        self.tracing = tracing
        self.due_updates: list[int] = []
        self.reports: deque[tuple[int, dict[str, Any]]] = deque()
        self.numerics: Any = None  # a runtime.numerics.Guard: checks losses and gradients (None: no checks)
        # bound once: the hot path reads these per message (the knobs' lists change in place)
        self._ops = plan.ops
        self._fwd_route = plan.fwd_route
        self._bwd_route = plan.bwd_route
        self._receives = plan.receives_backward
        self._parameterized = plan.parameterized
        self._thresholds = self.knobs.min_update_frequency
        self._caps = self.knobs.max_bundle
        self._budget = bundle_budget_s  # None: no limit (module docstring, "The bundle budget")
        # seconds per message of this worker's bundles, per node and direction (index 3 * node + direction; 0.0:
        # not timed yet), kept for nodes whose max_bundle is over 1
        self._per_message = [0.0] * (3 * len(plan.names))
        self._by_phase = (self._forward, self._backward, self._update)  # indexed by a message's direction

    # ------------------------------------------------------------------ the step
    def step(
        self, bundle: list[Message], depth: int, timer: Timer, ledger: StepLedger, deliver: Deliver
    ) -> tuple[Completed | None, float]:
        """Handle ``bundle`` and do what follows (module docstring); returns the keys and flushes that
        completed (None when none did) and when the step ended (after any local updates)."""
        first = bundle[0]
        t0 = timer.start()
        try:  # handle(bundle, t0), without a call of its own: the hot path
            outs = self._by_phase[first.direction](bundle, first, t0)
        except NodeError:
            raise
        except Exception as exc:
            raise self._op_error(bundle, exc) from exc
        t1 = timer.handled(t0, bundle)
        if self._budget is not None and self._caps[first.node] > 1:
            at = 3 * first.node + first.direction
            self._per_message[at] = per_message_seconds(self._per_message[at], (t1 - t0) / len(bundle))
        if self.tracing:
            if len(bundle) == 1:
                self.buffer.record(first.node, first.direction, first.key, t0, t1, depth)
            else:
                self.buffer.record_bundle(first.node, first.direction, [m.key for m in bundle], t0, t1, depth)
        if self.due_updates:
            return self._update_after(bundle, outs, t1, depth, timer, ledger, deliver)
        completed = ledger.release(bundle, outs)
        if outs:
            deliver(outs, t1)
        return completed, t1

    def _update_after(
        self,
        bundle: list[Message],
        outs: list[Message],
        t1: float,
        depth: int,
        timer: Timer,
        ledger: StepLedger,
        deliver: Deliver,
    ) -> tuple[Completed | None, float]:
        """The rest of a step whose handling made local updates due: send on, update, then release."""
        if outs:
            ledger.send_on(bundle, outs)
            deliver(outs, t1)
        end = t1
        key = bundle[0].key
        for node in self.due_updates:
            u0 = timer.update_start(end)
            self.apply_update(node)
            end = timer.updated(u0, node)
            if self.tracing:
                self.buffer.record(node, UPDATE, key, u0, end, depth)
        self.due_updates.clear()
        return ledger.release(bundle, []), end

    def bundle_cap(self, node: int, direction: int) -> int:
        """How many messages the inbox may give this node at once: its ``max_bundle``, and for the gradients
        of a node that updates locally no more than it still needs before its next update, so updates fall
        after the same gradients as without bundling (``min_update_frequency`` keeps its meaning)."""
        cap = self._caps[node]
        if cap > 1 and direction == BWD and self.local_updates and self._parameterized[node]:
            cap = min(cap, max(1, self._thresholds[node] - self.contexts[node].n_grads))
        if cap > 1 and self._budget is not None:  # the bundle budget (module docstring)
            seconds = self._per_message[3 * node + direction]
            if seconds > 0.0:
                cap = min(cap, max(1, int(self._budget / seconds)))
        return cap

    # ------------------------------------------------------------------ handling a bundle
    def handle(self, bundle: list[Message], at: float = 0.0) -> list[Message]:
        """Handle one bundle (same node, direction and port; often one message) at time ``at`` (the
        staleness rows' time); returns the outgoing messages. An op's error becomes a :class:`NodeError`."""
        first = bundle[0]
        try:
            return self._by_phase[first.direction](bundle, first, at)
        except NodeError:
            raise
        except Exception as exc:
            raise self._op_error(bundle, exc) from exc

    def _op_error(self, bundle: list[Message], cause: BaseException) -> NodeError:
        """The one place an op's exception is wrapped: the node, direction, port and the state (a bundle's
        first, with the bundle's keys)."""
        first = bundle[0]
        state: Any = first.state
        if len(bundle) > 1:
            keys = sorted({m.key for m in bundle})
            state = f"{first.state} (in a bundle of {len(bundle)} messages, keys {keys})"
        return self._node_error(first.node, PHASES[first.direction], first.port, state, cause)

    def _forward(self, bundle: list[Message], first: Message, at: float = 0.0) -> list[Message]:
        node = first.node
        ctx = self.contexts[node]
        op = self._ops[node]
        key_trains = first.train
        train = key_trains and self._receives[node]
        if len(bundle) == 1:
            ctx.train = train
            state = first.state
            emitted = op.forward(ctx, first.port, first.payload, state)
            if train and self._parameterized[node]:
                ctx.fwd_version[state] = ctx.version
        else:
            if 0 < sum(m.train for m in bundle) < len(bundle):  # training and validation keys: one call each
                trains = [m for m in bundle if m.train]
                validates = [m for m in bundle if not m.train]
                return self._forward(trains, trains[0], at) + self._forward(validates, validates[0], at)
            ctx.train = train
            states = [m.state for m in bundle]
            emitted = self._call_bundle(op.forward_bundle, ctx, bundle)
            if train and self._parameterized[node]:
                version, fwd_version = ctx.version, ctx.fwd_version
                for s in states:
                    fwd_version[s] = version
        route = self._fwd_route[node]
        out: list[Message] = []
        losses: list[State] | None = None
        for port, y, s in emitted:
            dst = route.get(port)
            if dst is not None:
                out.append(Message(dst[0], dst[1], FWD, y, s, key_trains))
            elif port == LOSS_PORT:
                if train:
                    losses = [s] if losses is None else [*losses, s]
            else:
                raise RuntimeError(f"output {port!r} is not connected (the graph was not validated?)")
        if losses is not None:  # the loss's own backward starts the backward pass (its gradient is 1)
            if len(losses) == 1:
                back = op.backward(ctx, LOSS_PORT, 1.0, losses[0])
            else:
                back = op.backward_bundle(ctx, LOSS_PORT, [1.0] * len(losses), losses)
            out += self._route_back(node, back)
        if ctx.reports:
            self._take_reports(node, ctx)
        return out

    def _backward(self, bundle: list[Message], first: Message, at: float) -> list[Message]:
        node = first.node
        ctx = self.contexts[node]
        op = self._ops[node]
        if len(bundle) == 1:
            emitted = op.backward(ctx, first.port, first.payload, first.state)
        else:
            emitted = self._call_bundle(op.backward_bundle, ctx, bundle)
        if self._parameterized[node]:  # after the op, which saw n_grads before these gradients
            self._count_gradients(node, ctx, bundle, at)
        return self._route_back(node, emitted)

    def _update(self, bundle: list[Message], first: Message, at: float) -> list[Message]:
        """A flush's update messages: each node applies what it holds."""
        for m in bundle:
            self.apply_update(m.node)
        return []

    def _call_bundle(self, call: Callable[..., Any], ctx: NodeContext, bundle: list[Message]) -> Any:
        """``op.forward_bundle`` or ``op.backward_bundle`` on a bundle of several messages. An op that runs once
        per message anyway (``bundling == "per_message"``: control flow, routing, joins) is called message by
        message, so that an error names the state of the message that raised it."""
        first = bundle[0]
        if self._ops[first.node].bundling != "per_message":
            return call(ctx, first.port, [m.payload for m in bundle], [m.state for m in bundle])
        emitted = []
        for m in bundle:
            try:
                emitted += call(ctx, m.port, [m.payload], [m.state])
            except Exception as exc:
                raise self._op_error([m], exc) from exc
        return emitted

    def _count_gradients(self, node: int, ctx: NodeContext, bundle: list[Message], at: float) -> None:
        """Each gradient's staleness row (version now - version at its forward, at time ``at``), and the count
        toward the node's next update."""
        record, fwd_version, version = self.buffer.record_staleness, ctx.fwd_version, ctx.version
        for m in bundle:
            record(node, m.key, version - fwd_version.pop(m.state), at)
            ctx.grad_keys.add(m.key)
        ctx.n_grads += len(bundle)
        if self.local_updates and ctx.n_grads >= self._thresholds[node]:
            self.due_updates.append(node)

    def _route_back(self, node: int, emitted: list[tuple[str, Any, State]]) -> list[Message]:
        route = self._bwd_route[node]
        out = []
        for port, g, s in emitted:
            src = route.get(port)
            if src is not None:
                out.append(Message(src[0], src[1], BWD, g, s))
        return out

    def _take_reports(self, node: int, ctx: NodeContext) -> None:
        """Move a loss node's reports to the worker's queue for the session (the non-finite check's place:
        a NaN/inf loss raises before the outgoing messages leave, or is left out with on_nonfinite="skip")."""
        numerics = self.numerics
        for r in ctx.reports:
            if numerics is None or numerics.loss_ok(node, r):
                self.reports.append((node, r))
        ctx.reports.clear()

    # ------------------------------------------------------------------ updates
    def apply_update(self, node: int) -> bool:
        """Step the node's optimizer on the mean over keys of its accumulated gradients."""
        ctx = self.contexts[node]
        if ctx.n_grads == 0:
            return False
        if self.numerics is not None and not self.numerics.gradients_ok(node, ctx):  # raises, or drops them
            ctx.reset_grads()
            return False
        optimizer = self.plan.optimizers[node]
        assert optimizer is not None
        try:
            optimizer.step(ctx.params, ctx.grads, ctx.opt_state, 1.0 / len(ctx.grad_keys))
        except Exception as exc:  # a local update runs outside handle(): name the node here too
            held = State(keys=tuple(sorted(ctx.grad_keys)))
            raise self._node_error(node, "update", "", held, exc) from exc
        ctx.reset_grads()
        ctx.version += 1
        return True

    def _node_error(self, node: int, direction: str, port: str, state: Any, cause: BaseException) -> NodeError:
        return NodeError(self.plan.names[node], type(self._ops[node]).__name__, direction, port, state, cause)


__all__ = ["PER_MESSAGE_WEIGHT", "Deliver", "NodeError", "Timer", "Worker", "per_message_seconds"]
