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


class NodeError(RuntimeError):
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
        t0 = timer.start()
        outs = self.handle_bundle(bundle)
        t1 = timer.handled(t0, bundle)
        first = bundle[0]
        if self.tracing:
            self.buffer.record(first.node, first.direction, first.key, t0, t1, depth)
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
        """Handle the messages of one bundle (same node, direction and port); their outgoing messages."""
        if len(bundle) == 1:
            return self.handle(bundle[0])
        outs: list[Message] = []
        for msg in bundle:
            outs.extend(self.handle(msg))
        return outs

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
            node = msg.node
            raise NodeError(
                self.plan.names[node], type(self._ops[node]).__name__, DIRECTION_NAMES[msg.direction], msg.port,
                msg.state, exc,
            ) from exc  # fmt: skip

    def _forward(self, msg: Message) -> list[Message]:
        node = msg.node
        ctx = self.contexts[node]
        op = self._ops[node]
        train = msg.train and self._receives[node]
        ctx.train = train
        emitted = op.forward(ctx, msg.port, msg.payload, msg.state)
        if train and self._parameterized[node]:
            ctx.fwd_version[msg.state] = ctx.version
        route = self._fwd_route[node]
        out: list[Message] = []
        for port, y, s in emitted:
            dst = route.get(port)
            if dst is not None:
                out.append(Message(dst[0], dst[1], FWD, y, s, msg.train))
            elif port == LOSS_PORT:
                if train:
                    out.extend(self._route_back(node, op.backward(ctx, LOSS_PORT, 1.0, s)))
            else:
                raise RuntimeError(f"output {port!r} is not connected (the graph was not validated?)")
        if ctx.reports:
            for r in ctx.reports:
                self.reports.append((node, r))
            ctx.reports.clear()
        return out

    def _backward(self, msg: Message) -> list[Message]:
        node = msg.node
        ctx = self.contexts[node]
        emitted = self._ops[node].backward(ctx, msg.port, msg.payload, msg.state)  # before n_grads += 1
        if self._parameterized[node]:
            key = msg.key
            staleness = ctx.version - ctx.fwd_version.pop(msg.state)
            self.buffer.record_staleness(node, key, staleness, self.clock())
            ctx.n_grads += 1
            ctx.grad_keys.add(key)
            if self.local_updates and ctx.n_grads >= self.plan.min_update_frequency[node]:
                self.due_updates.append(node)
        return self._route_back(node, emitted)

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
        optimizer = self.plan.optimizers[node]
        assert optimizer is not None
        optimizer.step(ctx.params, ctx.grads, ctx.opt_state, 1.0 / len(ctx.grad_keys))
        ctx.reset_grads()
        ctx.version += 1
        return True
