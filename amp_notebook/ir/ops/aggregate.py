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
from amp_notebook.ir.ops.base import Emitted, JoinMixin, NodeContext, Op, OpError, Width, positive_int, split_last


class Concat(JoinMixin, Op):
    """Concatenates the payloads of ``n_inputs`` messages with matching state along the last axis."""

    kind = "concat"
    group = "aggregation"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)

    def __init__(self, n_inputs: int = 2, match_on: tuple[str, ...] | list[str] | None = None) -> None:
        self.n_inputs = positive_int("Concat", "n_inputs", n_inputs)
        self.match_on = None if match_on is None else tuple(match_on)
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

    def config(self) -> dict[str, Any]:
        return {"n_inputs": self.n_inputs, "match_on": None if self.match_on is None else list(self.match_on)}


class _FanOut(Op):
    """Shared backward of Split and Bcast: collect the gradients of every output that carries one."""

    group = "aggregation"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)

    def collect(self, ctx: NodeContext, port: str, g: Any, state: State) -> dict[str, Any] | None:
        entry = ctx.cache[state]
        entry[1][port] = g
        if len(entry[1]) < len(ctx.grad_outputs):
            return None
        del ctx.cache[state]
        return entry


class Split(_FanOut):
    """Splits the last axis into pieces of the given ``sizes``, one output each."""

    kind = "split"

    def __init__(self, sizes: list[int] | tuple[int, ...]) -> None:
        if len(sizes) < 2:
            raise OpError(f"Split sizes: expected at least 2 pieces, got {list(sizes)}")
        self.sizes = tuple(positive_int("Split", "sizes", s) for s in sizes)
        self._outs = tuple(f"out{i}" for i in range(len(self.sizes)))

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

    def config(self) -> dict[str, Any]:
        return {"sizes": list(self.sizes)}


class Bcast(_FanOut):
    """Sends the same payload to ``n_outputs`` outputs; backward sums their gradients."""

    kind = "bcast"

    def __init__(self, n_outputs: int = 2) -> None:
        self.n_outputs = positive_int("Bcast", "n_outputs", n_outputs)
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

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        entry = self.collect(ctx, port, g, state)
        if entry is None:
            return []
        grads = list(entry[1].values())
        total = grads[0].copy()
        for gi in grads[1:]:
            total += gi
        return [("in", total, state)]

    def config(self) -> dict[str, Any]:
        return {"n_outputs": self.n_outputs}


class Ungroup(Op):
    """Turns a payload of shape (n, ...) into n row messages whose state gains ``counter = i``."""

    kind = "ungroup"
    group = "aggregation"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)

    def __init__(self, counter: str = "t") -> None:
        if not isinstance(counter, str) or not counter.isidentifier() or counter == "key":
            raise OpError(f"Ungroup counter: expected a field name other than 'key', got {counter!r}")
        self.counter = counter

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        if self.counter in state:
            raise OpError(
                f"state {state} already has field {self.counter!r}; choose another counter name for this Ungroup"
            )
        if ctx.train:
            ctx.cache[state] = [np.zeros(x.shape, dtype=x.dtype), len(x)]
        return [("out", row, state.replace(**{self.counter: i})) for i, row in enumerate(x)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        parent = state.replace(**{self.counter: None})
        entry = ctx.cache[parent]
        entry[0][state[self.counter]] = g
        entry[1] -= 1
        if entry[1]:
            return []
        del ctx.cache[parent]
        return [("in", entry[0], parent)]

    def config(self) -> dict[str, Any]:
        return {"counter": self.counter}


class Group(Op):
    """Collects the row messages ``counter = 0 .. count-1`` of one parent state into one (count, ...) payload.

    ``count`` is an expression over the state (``"length"``, say) giving how many rows to wait for.
    """

    kind = "group"
    group = "aggregation"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)

    def __init__(self, count: str, counter: str = "t") -> None:
        try:
            self.count = Expression(count)
        except ExpressionError as exc:
            raise OpError(f"Group count: {exc}") from None
        if not isinstance(counter, str) or not counter.isidentifier() or counter == "key":
            raise OpError(f"Group counter: expected a field name other than 'key', got {counter!r}")
        self.counter = counter

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

    def config(self) -> dict[str, Any]:
        return {"count": self.count.source, "counter": self.counter}
