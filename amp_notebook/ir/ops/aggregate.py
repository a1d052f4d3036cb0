"""(Dis)aggregation: Concat, Split, Bcast, Ungroup and Group.

Concat joins messages of matching state into one; Split and Bcast fan one message out; Ungroup turns a
matrix into a stream of row messages numbered by a counter field in the state, and Group collects such a
stream back into a matrix. Each fan-out op waits for the gradients of all its outputs that carry one
before sending its own backward, so every forward message still gets exactly one backward.

Structures known only from a key's data (trees, graphs) use ``dynamic.py`` (Flatmap, Collect,
Distribute) and ``sparse.py`` (Gather, ScatterSum/Mean, SelectRows, SumRows/MeanRows).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from amp_notebook.ir.expr import Expression, ExpressionError
from amp_notebook.ir.message import State
from amp_notebook.ir.ops.base import Emitted, JoinMixin, NodeContext, Op, OpError, Width, split_last
from amp_notebook.ir.ops.facts import COUNT, EXPR, MATCH_ON, STATE_FIELD, Field, SizeOrExpr, Sizes


class Concat(JoinMixin, Op):
    """Concatenates the payloads of ``n_inputs`` messages with matching state along the last axis."""

    kind = "concat"
    group = "aggregation"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)
    fields = (Field("n_inputs", COUNT, "number of inputs joined side by side", default=2), MATCH_ON)
    n_inputs: int

    def setup(self) -> None:
        self._ins = tuple(f"in{i}" for i in range(self.n_inputs))

    def input_ports(self) -> tuple[str, ...]:
        return self._ins

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        parts = [widths.get(p) for p in self._ins]
        return {"out": None if any(w is None for w in parts) else sum(parts)}  # type: ignore[arg-type]

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        got = self.join(ctx, port, x, state, self._ins)
        if got is None:
            return []
        xs = [got[p][0] for p in self._ins]
        lead = xs[0].shape[:-1]
        for p, xi in zip(self._ins, xs, strict=True):
            if xi.shape[:-1] != lead:
                raise OpError(
                    f"Concat input {p!r}: expected leading shape {lead} (as input 'in0'), got {xi.shape[:-1]}"
                )
        out_state = got[self._ins[0]][1]
        if ctx.train:
            ctx.cache[out_state] = ([xi.shape[-1] for xi in xs], [got[p][1] for p in self._ins])
        return [("out", np.concatenate(xs, axis=-1), out_state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        sizes, states = ctx.cache.pop(state)
        pieces = split_last(g, sizes)
        return [(p, gi, s) for p, gi, s in zip(self._ins, pieces, states, strict=True)]


class _FanOut(Op):
    """Shared backward of Split and Bcast: collect the gradients of every output that carries one."""

    group = "aggregation"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)

    def collect(self, ctx: NodeContext, port: str, g: Any, state: State) -> dict[str, Any] | None:
        entry = ctx.cache[state]
        if port in entry[1]:
            raise OpError(
                f"output '{port}' sent a second gradient for state {state} before the other outputs sent theirs; "
                "states leaving a Split or Bcast must come back once each"
            )
        self.check_gradient(port, g.shape if type(g) is np.ndarray else np.shape(g), entry)
        entry[1][port] = g
        if len(entry[1]) < len(ctx.grad_outputs):
            return None
        del ctx.cache[state]
        return entry

    def check_gradient(self, port: str, found: tuple[int, ...], entry: tuple[Any, dict[str, Any]]) -> None:
        """Raise :class:`OpError` if a gradient of shape ``found`` cannot be output ``port``'s (``entry``: the
        forward's input shape and the gradients in so far)."""


class Split(_FanOut):
    """Splits the last axis into pieces of the given ``sizes``, one output each."""

    kind = "split"
    fields = (
        Field("sizes", Sizes("width of one piece"), "widths of the pieces, at least two, such as [32, 32]",
              example=[32, 32]),
    )  # fmt: skip
    sizes: tuple[int, ...]

    def setup(self) -> None:
        self._outs = tuple(f"out{i}" for i in range(len(self.sizes)))
        self._widths = dict(zip(self._outs, self.sizes, strict=True))

    def output_ports(self) -> tuple[str, ...]:
        return self._outs

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        found = widths.get("in")
        if found is not None and found != sum(self.sizes):
            raise OpError(f"Split input 'in': expected width {sum(self.sizes)} (sum of sizes), got {found}")
        return dict(zip(self._outs, self.sizes, strict=True))

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        if x.shape[-1] != sum(self.sizes):
            raise OpError(f"Split input 'in': expected last dimension {sum(self.sizes)}, got {x.shape[-1]}")
        pieces = split_last(x, self.sizes)
        if ctx.train:
            ctx.cache[state] = (x.shape, {})
        return [(p, xi, state) for p, xi in zip(self._outs, pieces, strict=True)]

    def check_gradient(self, port: str, found: tuple[int, ...], entry: tuple[Any, dict[str, Any]]) -> None:
        shape = entry[0]
        if len(found) != len(shape) or found[-1] != self._widths[port] or found[:-1] != shape[:-1]:
            expected = (*shape[:-1], self._widths[port])
            raise OpError(f"Split output '{port}': expected a gradient of shape {expected}, got {found}")

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        entry = self.collect(ctx, port, g, state)
        if entry is None:
            return []
        shape, grads = entry
        dtype = next(iter(grads.values())).dtype
        parts = [
            grads[p] if p in grads else np.zeros((*shape[:-1], n), dtype=dtype)
            for p, n in zip(self._outs, self.sizes, strict=True)
        ]
        return [("in", np.concatenate(parts, axis=-1), state)]


class Bcast(_FanOut):
    """Sends the same payload to ``n_outputs`` outputs; backward sums their gradients."""

    kind = "bcast"
    fields = (Field("n_outputs", COUNT, "number of copies sent on", default=2),)
    n_outputs: int

    def setup(self) -> None:
        self._outs = tuple(f"out{i}" for i in range(self.n_outputs))

    def output_ports(self) -> tuple[str, ...]:
        return self._outs

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        if ctx.train:
            ctx.cache[state] = (None, {})
        return [(p, x, state) for p in self._outs]

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        if ctx.train:
            cache = ctx.cache
            for s in states:
                cache[s] = (None, {})
        outs = self._outs
        return [(p, x, s) for x, s in zip(xs, states, strict=True) for p in outs]

    def check_gradient(self, port: str, found: tuple[int, ...], entry: tuple[Any, dict[str, Any]]) -> None:
        grads = entry[1]
        if grads:
            first = np.shape(next(iter(grads.values())))
            if found != first:
                raise OpError(
                    f"Bcast output '{port}': expected a gradient of shape {first} like the other outputs', got {found}"
                )

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        entry = self.collect(ctx, port, g, state)
        if entry is None:
            return []
        grads = list(entry[1].values())
        total = grads[0].copy()
        for gi in grads[1:]:
            total += gi
        return [("in", total, state)]


class Ungroup(Op):
    """Turns a payload of shape (n, ...) into n row messages whose state gains ``counter = i``.

    With ``chunk`` (an int, or an expression over the state such as ``"bucket"``) message i holds the
    slice of rows ``[i * chunk, (i + 1) * chunk)`` instead, keeping the leading axis: a time-major
    (length * B, H) matrix becomes one (B, H) message per step, and ``chunk=1`` turns a sequence (L, H)
    into (1, H) rows, the batch-of-one that Linear expects. The row count must be a multiple of ``chunk``.
    """

    kind = "ungroup"
    group = "aggregation"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)
    fields = (
        Field("counter", STATE_FIELD, "the state field that numbers the rows, such as 't'", default="t"),
        Field("chunk", SizeOrExpr("rows per message", "an expression giving the rows per message", nullable=True),
              "rows per message, keeping the leading axis (a whole number, or an expression such as 'bucket'), or "
              "null for one row each", default=None),
    )  # fmt: skip
    counter: str
    chunk: int | Expression | None

    def _chunk_rows(self, state: State, n: int) -> int:
        if isinstance(self.chunk, Expression):
            try:
                k = self.chunk.evaluate(state)
            except ExpressionError as exc:
                raise OpError(f"Ungroup chunk: {exc}", port="in") from exc
        else:
            k = self.chunk
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0 or n % k:
            source = self.chunk.source if isinstance(self.chunk, Expression) else self.chunk
            raise OpError(
                f"Ungroup chunk {source!r} gave {k!r} on state {state} for a payload of {n} rows; expected a "
                f"positive int that divides the row count (a time-major matrix of length * chunk rows)",
                port="in",
            )
        return k

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        if self.counter in state:
            raise OpError(
                f"state {state} already has field {self.counter!r}; choose another counter name for this Ungroup"
            )
        if self.chunk is None:
            parts = list(x)
        else:
            k = self._chunk_rows(state, len(x))
            parts = [x[i : i + k] for i in range(0, len(x), k)]
        if ctx.train:
            ctx.cache[state] = [np.zeros(x.shape, dtype=x.dtype), len(parts)]
        return [("out", part, state.replace(**{self.counter: i})) for i, part in enumerate(parts)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        parent = state.replace(**{self.counter: None})
        entry = ctx.cache[parent]
        i = state[self.counter]
        if self.chunk is None:
            entry[0][i] = g
        else:
            k = len(g)
            entry[0][i * k : (i + 1) * k] = g
        entry[1] -= 1
        if entry[1]:
            return []
        del ctx.cache[parent]
        return [("in", entry[0], parent)]


class Group(Op):
    """Collects the row messages ``counter = 0 .. count-1`` of one parent state into one (count, ...) payload.

    ``count`` is an expression over the state (``"length"``, say) giving how many rows to wait for.
    """

    kind = "group"
    group = "aggregation"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)
    fields = (
        Field("count", EXPR, "an expression giving how many rows to collect, such as 'length'", example="length"),
        Field("counter", STATE_FIELD, "the state field that numbers the rows, such as 't'", default="t"),
    )
    count: Expression
    counter: str

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        if self.counter not in state:
            raise OpError(f"state {state} has no counter field {self.counter!r} to group by")
        parent = state.replace(**{self.counter: None})
        rows = ctx.joins.get(parent)
        if rows is None:
            n = self.count.evaluate(state)
            if not isinstance(n, int) or n <= 0:
                raise OpError(f"count {self.count.source!r} gave {n!r} on state {state}; expected a positive int")
            rows = ctx.joins[parent] = [None] * n
        i = state[self.counter]
        if not isinstance(i, int) or not 0 <= i < len(rows) or rows[i] is not None:
            raise OpError(f"counter {self.counter}={i!r} is out of range or repeated for {len(rows)} rows")
        rows[i] = x
        if any(r is None for r in rows):
            return []
        del ctx.joins[parent]
        return [("out", np.stack(rows), parent)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return [("in", g[i], state.replace(**{self.counter: i})) for i in range(len(g))]
