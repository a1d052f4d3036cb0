"""Control flow: Cond, Phi and the invertible state update (Isu).

These three let one static graph run per-instance control flow (paper, section 3). A Cond routes a
message to one branch by a predicate on its state; a Phi merges branches (and loop back-edges) into one
stream, remembering which input each state came through so its backward goes back the same way; an Isu
changes the state (a loop counter, say) by an update whose inverse backward applies, so no cache is
needed and every pass around a loop carries a distinct state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amp_notebook.ir.expr import Expression, ExpressionError
from amp_notebook.ir.message import State
from amp_notebook.ir.ops.base import Emitted, NodeContext, Op, OpError, Width
from amp_notebook.ir.ops.facts import COUNT, EXPR, MAX_COUNT, UPDATES, Field, Int


class Cond(Op):
    """Routes each message to one output by a predicate over its state.

    With ``branches=2`` the outputs are ``true`` and ``false`` and the predicate's truth picks one;
    with more, the outputs are ``b0 .. b{n-1}`` and the predicate must give the branch index (``key % 4``
    sends keys round-robin to four replicas).
    """

    kind = "cond"
    group = "control"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)
    fields = (
        Field("predicate", EXPR, "an expression over state fields that picks the branch, such as 't < length'",
              example="t < length"),
        Field("branches", Int(2, MAX_COUNT), "number of outputs: 2 (true, false) or more (b0, b1, ... chosen by an "
              "int)", default=2),
    )  # fmt: skip
    predicate: Expression
    branches: int

    def setup(self) -> None:
        self._outs = ("true", "false") if self.branches == 2 else tuple(f"b{i}" for i in range(self.branches))

    def output_ports(self) -> tuple[str, ...]:
        return self._outs

    def choose(self, state: State) -> str:
        try:
            value = self.predicate.evaluate(state)
        except ExpressionError as exc:
            raise OpError(f"predicate failed: {exc}") from exc
        if self.branches == 2:
            return "true" if value else "false"
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.branches:
            raise OpError(
                f"predicate {self.predicate.source!r} gave {value!r} on state {state}; a {self.branches}-way "
                f"Cond needs an int branch index in [0, {self.branches})"
            )
        return self._outs[value]

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        return [(self.choose(state), x, state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return [("in", g, state)]

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        choose = self.choose
        return [(choose(s), x, s) for x, s in zip(xs, states, strict=True)]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        return [("in", g, s) for g, s in zip(gs, states, strict=True)]


class Phi(Op):
    """Merges several inputs into one output; backward returns each gradient to the input it came from."""

    kind = "phi"
    group = "control"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)
    fields = (Field("n_inputs", COUNT, "number of streams merged (the loop entry and its back-edges)", default=2),)
    n_inputs: int

    def setup(self) -> None:
        self._ins = tuple(f"in{i}" for i in range(self.n_inputs))

    def input_ports(self) -> tuple[str, ...]:
        return self._ins

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        known = {port: w for port, w in widths.items() if w is not None}
        if len(set(known.values())) > 1:
            raise OpError(f"Phi inputs: expected equal widths, got {known}")
        return {"out": next(iter(known.values()), None)}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        if ctx.train:
            if state in ctx.cache:
                self._twice(state)
            ctx.cache[state] = port
        return [("out", x, state)]

    def _twice(self, state: State) -> None:
        raise OpError(
            f"state {state} reached the Phi twice while the first is still in flight; a loop needs "
            "an Isu that changes the state on every pass"
        )

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return [(ctx.cache.pop(state), g, state)]

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        if ctx.train:
            cache = ctx.cache
            for s in states:
                if s in cache:
                    self._twice(s)
                cache[s] = port
        return [("out", x, s) for x, s in zip(xs, states, strict=True)]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        pop = ctx.cache.pop
        return [(pop(s), g, s) for g, s in zip(gs, states, strict=True)]


class Isu(Op):
    """Invertible state update: ``forward`` maps field -> expression (None deletes the field) and
    ``backward`` gives the inverse, e.g. ``Isu({"t": "t + 1"}, {"t": "t - 1"})``.

    The reference interpreter checks ``backward(forward(s)) == s`` on every message it runs.
    """

    kind = "isu"
    group = "control"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)
    updates_state = True
    fields = (
        Field("forward", UPDATES, 'state field updates on the way forward, such as {"t": "t + 1"}',
              example={"t": "t + 1"}, attr="forward_updates"),
        Field("backward", UPDATES, 'the inverse updates on the way back, such as {"t": "t - 1"}',
              example={"t": "t - 1"}, attr="backward_updates"),
    )  # fmt: skip
    forward_updates: dict[str, Expression | None]
    backward_updates: dict[str, Expression | None]

    def setup(self) -> None:
        if not self.forward_updates:
            raise OpError("Isu forward: expected at least one field update, got none")

    def apply(self, updates: dict[str, Expression | None], state: State) -> State:
        changes: dict[str, Any] = {}
        for name, expr in updates.items():
            if expr is None:
                changes[name] = None
                continue
            try:
                changes[name] = expr.evaluate(state)
            except ExpressionError as exc:
                raise OpError(f"update of field {name!r} failed: {exc}") from exc
        if "key" in changes:
            raise OpError("Isu may not change the 'key' field: the controller counts messages by key")
        return state.replace(**changes)

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        return [("out", x, self.apply(self.forward_updates, state))]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return [("in", g, self.apply(self.backward_updates, state))]

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        apply, updates = self.apply, self.forward_updates
        return [("out", x, apply(updates, s)) for x, s in zip(xs, states, strict=True)]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        apply, updates = self.apply, self.backward_updates
        return [("in", g, apply(updates, s)) for g, s in zip(gs, states, strict=True)]
