"""The worker as a pure state machine: ``handle(message) -> outgoing messages``, and the worker *step*.

A worker owns the contexts of the nodes placed on it and nothing else; threads, queues and clocks
belong to the backend that drives it (the threaded backend, the simulator, the reference tests), so the
same logic runs everywhere. For each message it:

* forward: runs the op (caching only for training keys whose backward will come back), remembers the
  parameter version at forward for staleness, routes each output along its edge; a loss's ``loss``
  output starts the backward pass at once for training keys;
* backward: runs the op's backward, records the gradient's staleness (version now - version at forward)
  on parameterized nodes, counts it toward ``min_update_frequency`` and, in ``amp`` mode, marks the
  node due for an update once it holds enough; routes gradients only along edges that carry them;
* update (a flush in ``sync``/``pipeline`` mode): applies the node's optimizer to what it holds.

:meth:`Worker.step` is everything that follows, written once for every backend: handle a bundle (the
messages the inbox gave together), write its trace row, and if the handling made local updates due, send
the outgoing messages on *first* and then update (the previous stage need not wait for our optimizer
step; the bundle keeps its credits until the update is done, so its keys cannot complete mid-update),
then release the credits. What differs between backends is passed in: a :class:`Timer` (measured time on
threads, virtual time in the simulator), the shared :class:`~amp_notebook.runtime.credits.Credits`, and
``deliver(messages, at)``, which hands outgoing messages to their workers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from amp_notebook.errors import AmpError
from amp_notebook.ir.message import BWD, DIRECTION_NAMES, FWD, UPDATE, Message, State
from amp_notebook.ir.ops import LOSS_PORT, NodeContext
from amp_notebook.runtime.credits import Credits
from amp_notebook.runtime.plan import Plan
from amp_notebook.trace.buffers import PHASE_UPDATE, WorkerBuffer

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


class Worker:
    def __init__(
        self,
        index: int,
        plan: Plan,
        contexts: dict[int, NodeContext],
        local_updates: bool,
        buffer: WorkerBuffer | None = None,
        clock: Callable[[], float] | None = None,
        tracing: bool = True,
    ) -> None:
        self.index = index
        self.plan = plan
        self.contexts = contexts
        self.local_updates = local_updates
        self.buffer = buffer if buffer is not None else WorkerBuffer()
        self.clock = clock or (lambda: 0.0)
        self.tracing = tracing
        self.due_updates: list[int] = []
        self.reports: deque[tuple[int, dict[str, Any]]] = deque()
        self.numerics: Any = None  # a runtime.numerics.Guard: checks losses and gradients (None: no checks)
        # bound once: the hot path reads these per message
        self._ops = plan.ops
        self._fwd_route = plan.fwd_route
        self._bwd_route = plan.bwd_route
        self._receives = plan.receives_backward
        self._parameterized = plan.parameterized

    def step(
        self, bundle: list[Message], depth: int, timer: Timer, credits: Credits, deliver: Deliver
    ) -> tuple[list[int], list[int], float]:
        """Handle ``bundle`` and do what follows (module docstring); returns the keys and flushes that
        completed and when the step ended (after any local updates)."""
        first = bundle[0]
        t0 = timer.start()
        outs = self.handle(first) if len(bundle) == 1 else self.handle_bundle(bundle)
        t1 = timer.handled(t0, bundle)
        if self.tracing:
            if len(bundle) == 1:
                self.buffer.record(first.node, first.direction, first.key, t0, t1, depth)
            else:
                self.buffer.record_bundle(first.node, first.direction, [m.key for m in bundle], t0, t1, depth)
        end = t1
        due = self.due_updates
        if due:
            if outs:
                credits.add(outs)
                deliver(outs, t1)
                outs = []
            record = self.buffer.record
            for node in due:
                u0 = timer.update_start(end)
                self.apply_update(node)
                end = timer.updated(u0, node)
                if self.tracing:
                    record(node, PHASE_UPDATE, first.key, u0, end, depth)
            due.clear()
        done, flushed = credits.release(bundle, outs)
        if outs:
            deliver(outs, t1)
        return done, flushed, end

    def handle_bundle(self, bundle: list[Message]) -> list[Message]:
        """Handle the messages of one bundle (same node, direction and port) as one call of the op
        (``forward_bundle``/``backward_bundle``); each message keeps its own state, cache entry, staleness
        record and credit. Returns the outgoing messages."""
        if len(bundle) == 1:
            return self.handle(bundle[0])
        first = bundle[0]
        try:
            if first.direction == FWD:
                train = first.train
                if any(m.train is not train for m in bundle):  # training and validation keys: one call each
                    return [out for flag in (True, False) for out in self._forward_bundle([m for m in bundle
                            if m.train is flag])]  # fmt: skip
                return self._forward_bundle(bundle)
            if first.direction == BWD:
                return self._backward_bundle(bundle)
            for msg in bundle:
                self.apply_update(msg.node)
            return []
        except NodeError:
            raise
        except Exception as exc:
            node = first.node
            keys = sorted({m.key for m in bundle})
            raise NodeError(
                self.plan.names[node], type(self._ops[node]).__name__, DIRECTION_NAMES[first.direction], first.port,
                f"{first.state} (in a bundle of {len(bundle)} messages, keys {keys})", exc,
            ) from exc  # fmt: skip

    def _forward_bundle(self, bundle: list[Message]) -> list[Message]:
        if not bundle:
            return []
        first = bundle[0]
        node = first.node
        ctx = self.contexts[node]
        op = self._ops[node]
        train = first.train and self._receives[node]
        ctx.train = train
        states = [m.state for m in bundle]
        emitted = self._call_bundle(op.forward_bundle, ctx, bundle)
        if train and self._parameterized[node]:
            version, fwd_version = ctx.version, ctx.fwd_version
            for s in states:
                fwd_version[s] = version
        return self._route_forward(node, ctx, emitted, first.train, train)

    def _backward_bundle(self, bundle: list[Message]) -> list[Message]:
        first = bundle[0]
        node = first.node
        ctx = self.contexts[node]
        emitted = self._call_bundle(self._ops[node].backward_bundle, ctx, bundle)
        if self._parameterized[node]:  # after the op, which saw n_grads before these gradients
            self._count_gradients(node, ctx, bundle)
        return self._route_back(node, emitted)

    def _call_bundle(self, call: Callable[..., Any], ctx: NodeContext, bundle: list[Message]) -> Any:
        """``op.forward_bundle`` or ``op.backward_bundle`` on the bundle. An op that runs once per message
        anyway (``bundling == "per_message"``: control flow, routing, joins) is called message by message,
        so that an error names the state of the message that raised it."""
        first = bundle[0]
        if self._ops[first.node].bundling != "per_message":
            return call(ctx, first.port, [m.payload for m in bundle], [m.state for m in bundle])
        emitted = []
        for m in bundle:
            try:
                emitted += call(ctx, m.port, [m.payload], [m.state])
            except Exception as exc:
                raise self._error(m, exc) from exc
        return emitted

    def _route_forward(
        self, node: int, ctx: NodeContext, emitted: list[tuple[str, Any, State]], key_trains: bool, train: bool
    ) -> list[Message]:
        """Messages for the outputs along their edges; a loss's outputs start the backward pass at once (for
        training keys); the loss reports collected."""
        route = self._fwd_route[node]
        out: list[Message] = []
        losses: list[State] = []
        for port, y, s in emitted:
            dst = route.get(port)
            if dst is not None:
                out.append(Message(dst[0], dst[1], FWD, y, s, key_trains))
            elif port == LOSS_PORT:
                if train:
                    losses.append(s)
            else:
                raise RuntimeError(f"output {port!r} is not connected (the graph was not validated?)")
        if losses:
            op = self._ops[node]
            out.extend(self._route_back(node, op.backward_bundle(ctx, LOSS_PORT, [1.0] * len(losses), losses)))
        if ctx.reports:
            self._take_reports(node, ctx)
        return out

    def _count_gradients(self, node: int, ctx: NodeContext, msgs: list[Message]) -> None:
        """Each gradient's staleness row (version now - version at its forward), and the count toward the
        node's next update."""
        record, now, fwd_version, version = self.buffer.record_staleness, self.clock(), ctx.fwd_version, ctx.version
        for m in msgs:
            record(node, m.key, version - fwd_version.pop(m.state), now)
            ctx.grad_keys.add(m.key)
        ctx.n_grads += len(msgs)
        if self.local_updates and ctx.n_grads >= self.plan.min_update_frequency[node]:
            self.due_updates.append(node)

    def bundle_cap(self, node: int, direction: int) -> int:
        """How many messages the inbox may give this node at once: its ``max_bundle``, and for the gradients
        of a node that updates locally no more than it still needs before its next update, so updates fall
        after the same gradients as without bundling (``min_update_frequency`` keeps its meaning)."""
        cap = self.plan.max_bundle[node]
        if cap > 1 and direction == BWD and self.local_updates and self._parameterized[node]:
            ctx = self.contexts[node]
            cap = min(cap, max(1, self.plan.min_update_frequency[node] - ctx.n_grads))
        return cap

    def handle(self, msg: Message) -> list[Message]:
        try:
            if msg.direction == FWD:
                return self._forward(msg)
            if msg.direction == BWD:
                return self._backward(msg)
            assert msg.direction == UPDATE
            self.apply_update(msg.node)
            return []
        except NodeError:
            raise
        except Exception as exc:
            raise self._error(msg, exc) from exc

    def _error(self, msg: Message, exc: Exception) -> NodeError:
        """The NodeError for ``exc`` raised while handling ``msg``: its node, direction, port and state."""
        node = msg.node
        kind, direction = type(self._ops[node]).__name__, DIRECTION_NAMES[msg.direction]
        return NodeError(self.plan.names[node], kind, direction, msg.port, msg.state, exc)

    def _forward(self, msg: Message) -> list[Message]:
        node = msg.node
        ctx = self.contexts[node]
        train = msg.train and self._receives[node]
        ctx.train = train
        emitted = self._ops[node].forward(ctx, msg.port, msg.payload, msg.state)
        if train and self._parameterized[node]:
            ctx.fwd_version[msg.state] = ctx.version
        return self._route_forward(node, ctx, emitted, msg.train, train)

    def _backward(self, msg: Message) -> list[Message]:
        node = msg.node
        ctx = self.contexts[node]
        emitted = self._ops[node].backward(ctx, msg.port, msg.payload, msg.state)  # before n_grads += 1
        if self._parameterized[node]:
            self._count_gradients(node, ctx, [msg])
        return self._route_back(node, emitted)

    def _take_reports(self, node: int, ctx: NodeContext) -> None:
        """Move a loss node's reports to the worker's queue for the session (the non-finite check's place:
        a NaN/inf loss raises before the outgoing messages leave, or is left out with on_nonfinite="skip")."""
        numerics = self.numerics
        for r in ctx.reports:
            if numerics is None or numerics.loss_ok(node, r):
                self.reports.append((node, r))
        ctx.reports.clear()

    def _route_back(self, node: int, emitted: list[tuple[str, Any, State]]) -> list[Message]:
        route = self._bwd_route[node]
        out = []
        for port, g, s in emitted:
            src = route.get(port)
            if src is not None:
                out.append(Message(src[0], src[1], BWD, g, s))
        return out

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
            raise NodeError(self.plan.names[node], type(self._ops[node]).__name__, "update", "", held, exc) from exc
        ctx.reset_grads()
        ctx.version += 1
        return True
