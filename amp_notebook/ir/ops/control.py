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
from amp_notebook.ir.ops.base import Emitted, NodeContext, Op, OpError, Width, positive_int


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

    def __init__(self, predicate: str, branches: int = 2) -> None:
        try:
            self.predicate = Expression(predicate)
        except ExpressionError as exc:
            raise OpError(f"Cond predicate: {exc}") from None
        self.branches = positive_int("Cond", "branches", branches)
        if self.branches < 2:
            raise OpError(f"Cond branches: expected at least 2, got {branches}")
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

    def config(self) -> dict[str, Any]:
        return {"predicate": self.predicate.source, "branches": self.branches}


class Phi(Op):
    """Merges several inputs into one output; backward returns each gradient to the input it came from."""

    kind = "phi"
    group = "control"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)

    def __init__(self, n_inputs: int = 2) -> None:
        self.n_inputs = positive_int("Phi", "n_inputs", n_inputs)
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

    def config(self) -> dict[str, Any]:
        return {"n_inputs": self.n_inputs}


class Isu(Op):
    """Invertible state update: ``forward`` maps field -> expression (None deletes the field) and
    ``backward`` gives the inverse, e.g. ``Isu({"t": "t + 1"}, {"t": "t - 1"})``.

    The reference interpreter checks ``backward(forward(s)) == s`` on every message it runs.
    """

    kind = "isu"
    group = "control"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)

    def __init__(self, forward: Mapping[str, str | None], backward: Mapping[str, str | None]) -> None:
        self.forward_updates = _compile_updates("forward", forward)
        self.backward_updates = _compile_updates("backward", backward)
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

    def config(self) -> dict[str, Any]:
        def dump(updates: dict[str, Expression | None]) -> dict[str, str | None]:
            return {k: None if v is None else v.source for k, v in updates.items()}

        return {"forward": dump(self.forward_updates), "backward": dump(self.backward_updates)}


def _compile_updates(which: str, updates: Mapping[str, str | None]) -> dict[str, Expression | None]:
    if not isinstance(updates, Mapping):
        raise OpError(f"Isu {which}: expected a mapping of field -> expression, got {type(updates).__name__}")
    out: dict[str, Expression | None] = {}
    for name, source in updates.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise OpError(f"Isu {which}: field names must be identifiers not starting with '_', got {name!r}")
        try:
            out[name] = None if source is None else Expression(source)
        except ExpressionError as exc:
            raise OpError(f"Isu {which} field {name!r}: {exc}") from None
    return out
