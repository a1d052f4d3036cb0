"""(Dis)aggregation: Concat, Split, Bcast, Ungroup and Group; Flatmap, Collect and Distribute; sparse ops.

Concat joins messages of matching state into one; Split and Bcast fan one message out; Ungroup turns a
matrix into a stream of row messages numbered by a counter field in the state, and Group collects such a
stream back into a matrix. Each fan-out op waits for the gradients of all its outputs that carry one
before sending its own backward, so every forward message still gets exactly one backward.

For structures known only from a key's data (trees, graphs): Flatmap turns a table into one message per
row addressed by a state field taken from the row; Collect merges the messages whose state maps to the
same group key (a tree node's children into the node) and Distribute routes by a state expression.
Gather, ScatterSum/ScatterMean, SelectRows, SumRows and MeanRows do sparse message passing on one graph
per message (node states (N, H), edge index payloads). Discard is a sink for a value nobody reads (the
Tree-LSTM's cell state in front of a classifier that reads only ``h``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from amp_notebook.ir.expr import Expression, ExpressionError
from amp_notebook.ir.message import State
from amp_notebook.ir.ops.base import Emitted, JoinMixin, NodeContext, Op, OpError, Width, positive_int
from amp_notebook.ir.ops.control import Cond


class Concat(JoinMixin, Op):
    """Concatenates the payloads of ``n_inputs`` messages with matching state along the last axis."""

    kind = "concat"
    group = "aggregation"

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
        pieces = np.split(g, np.cumsum(sizes)[:-1], axis=-1)
        return [(p, gi, s) for p, gi, s in zip(self._ins, pieces, states, strict=True)]

    def config(self) -> dict[str, Any]:
        return {"n_inputs": self.n_inputs, "match_on": None if self.match_on is None else list(self.match_on)}


class _FanOut(Op):
    """Shared backward of Split and Bcast: collect the gradients of every output that carries one."""

    group = "aggregation"

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
        pieces = np.split(x, np.cumsum(self.sizes)[:-1], axis=-1)
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


# --------------------------------------------------------------------------------------------------------
# Dynamic (dis)aggregation by state information: Flatmap, Collect, Distribute.
#
# These let one static graph walk a per-instance structure (a tree, say) whose shape is only known from
# the key's data: Flatmap turns one message holding a table into one message per row addressed by a
# state field, Collect merges the messages whose state maps to the same group (the children of one tree
# node) into one, and Distribute routes each message to a branch chosen by its state.


class Flatmap(Op):
    """One message holding a matrix (n, 1 + k) -> n messages, one per row, addressed by column 0.

    Row i's column 0 becomes the state field ``field`` (``state.replace(pos=int(row[0]))``) and the rest
    of the row, ``row[1:]``, becomes the payload: with ``keep_2d=True`` (the default) as a batch of one
    row of shape (1, k), what Linear and the other payload ops expect; with ``keep_2d=False`` as shape
    (k,), what Embedding ids and SoftmaxCrossEntropy targets expect (k = 1: a batch of one id or label).
    A tree's ``np.column_stack([leaf_positions, leaf_words])`` becomes one word-id message per leaf with
    state ``pos``; ``np.column_stack([positions, labels])`` one target message per node.

    Column 0 must hold integers; in a float matrix (positions next to float features) it is rounded to
    the nearest integer and must lie within 1e-3 of it. Its values must be distinct (two rows with the
    same value would carry equal states), and the incoming state must not have ``field`` yet.

    Backward collects the n row gradients (only float payloads carry any, so an id or label table
    usually gets none) and sends one gradient of the input's shape, zero in column 0.
    """

    kind = "flatmap"
    group = "aggregation"

    def __init__(self, field: str = "pos", keep_2d: bool = True) -> None:
        self.field = _field_name("Flatmap", "field", field)
        if not isinstance(keep_2d, bool):
            raise OpError(f"Flatmap keep_2d: expected True or False, got {keep_2d!r}")
        self.keep_2d = keep_2d

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        found = widths.get("in")
        if found is not None and found < 2:
            raise OpError(
                f"Flatmap input 'in': expected width >= 2 (column 0 holds {self.field!r}, the rest the payload), "
                f"got {found}",
                port="in",
            )
        return {"out": None if found is None else found - 1}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        if self.field in state:
            raise OpError(
                f"Flatmap: state {state} already has field {self.field!r}; choose another field name, or remove "
                f"the field upstream with an Isu ({{{self.field!r}: None}})",
                port="in",
            )
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] < 2:
            raise OpError(
                f"Flatmap input 'in': expected a matrix (n, 1 + k) with k >= 1, column 0 holding {self.field!r}, "
                f"got shape {x.shape}; build it with np.column_stack([positions, values])",
                port="in",
            )
        values = _row_addresses(self.field, x[:, 0])
        rows = x[:, 1:]
        out = [
            ("out", rows[i : i + 1] if self.keep_2d else rows[i], state.replace(**{self.field: v}))
            for i, v in enumerate(values)
        ]
        if ctx.train and values:
            ctx.cache[state] = _RowGradients(x.shape, {v: i for i, v in enumerate(values)})
        return out

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        parent = state.replace(**{self.field: None})
        entry: _RowGradients = ctx.cache[parent]
        if entry.grad is None:
            entry.grad = np.zeros(entry.shape, dtype=np.result_type(g, np.float64))
        entry.grad[entry.rows[state[self.field]], 1:] = np.reshape(g, -1)
        entry.remaining -= 1
        if entry.remaining:
            return []
        del ctx.cache[parent]
        return [("in", entry.grad, parent)]

    def config(self) -> dict[str, Any]:
        return {"field": self.field, "keep_2d": self.keep_2d}


class _RowGradients:
    """What Flatmap's backward fills in: the input's shape, row of each field value, rows still owed."""

    __slots__ = ("grad", "remaining", "rows", "shape")

    def __init__(self, shape: tuple[int, ...], rows: dict[int, int]) -> None:
        self.shape = shape
        self.rows = rows
        self.remaining = len(rows)
        self.grad: np.ndarray | None = None


def _row_addresses(field: str, column: np.ndarray) -> list[int]:
    if column.dtype.kind == "f":
        rounded = np.rint(column)
        bad = np.flatnonzero(np.abs(column - rounded) > 1e-3)
        if bad.size:
            raise OpError(
                f"Flatmap input 'in': column 0 holds {field!r} and must hold integers, found "
                f"{float(column[bad[0]])!r} in row {bad[0]}",
                port="in",
            )
        column = rounded
    elif column.dtype.kind not in "iu":
        raise OpError(f"Flatmap input 'in': expected an int (or float) matrix, got dtype {column.dtype}", port="in")
    values = [int(v) for v in column]
    first: dict[int, int] = {}
    for i, v in enumerate(values):
        if v in first:
            raise OpError(
                f"Flatmap input 'in': column 0 repeats {field}={v} (rows {first[v]} and {i}); each row needs a "
                f"distinct {field!r}, or two messages would carry equal states",
                port="in",
            )
        first[v] = i
    return values


def _field_name(op: str, what: str, name: Any) -> str:
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("_") or name == "key":
        raise OpError(f"{op} {what}: expected a state field name other than 'key' (an identifier), got {name!r}")
    return name


def _expression(op: str, what: str, source: Any) -> Expression:
    try:
        return Expression(source)
    except ExpressionError as exc:
        raise OpError(f"{op} {what}: {exc}") from None


class Collect(Op):
    """The dynamic merge by state information: a "group by a key function" over the message stream.

    Messages of one key id whose ``key`` expression evaluates equal form a group; the ``index``
    expression gives each member its slot ``0 .. count-1`` (``count`` an int or an expression over the
    first member's state). When every slot is filled Collect emits ONE message: the members' payloads
    concatenated along the last axis in slot order, with the state of the slot-0 member in which
    ``field`` is set to the group's key value. Members are matched on the key id and the key value
    only, so other fields that distinguish groups (a loop counter) must appear in the key expression.

    A Tree-LSTM joins each node's two children into their parent with
    ``Collect(key="pos // 2", index="pos % 2", count=2, field="pos")``: the children at heap positions
    2p and 2p+1 become one message [left; right] with ``pos = p``. Because the state changes on each
    pass, a Collect may close a loop in place of an Isu (``STATE_UPDATING``).

    Backward splits the gradient by the members' widths and returns each piece with its member's own
    state (cached at forward).
    """

    kind = "collect"
    group = "aggregation"

    def __init__(self, key: str, index: str, count: int | str, field: str) -> None:
        self.key = _expression("Collect", "key", key)
        self.index = _expression("Collect", "index", index)
        if isinstance(count, str):
            self.count: int | Expression = _expression("Collect", "count", count)
        else:
            self.count = positive_int("Collect", "count", count)
        self.field = _field_name("Collect", "field", field)

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        found = widths.get("in")
        if found is None or not isinstance(self.count, int):
            return {"out": None}
        return {"out": self.count * found}

    def _evaluate(self, what: str, expr: Expression, state: State) -> Any:
        try:
            return expr.evaluate(state)
        except ExpressionError as exc:
            raise OpError(f"Collect {what}: {exc}", port="in") from exc

    def _group_size(self, state: State) -> int:
        if isinstance(self.count, int):
            return self.count
        n = self._evaluate("count", self.count, state)
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise OpError(
                f"Collect count {self.count.source!r} gave {n!r} on state {state}; expected a positive int",
                port="in",
            )
        return n

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        value = self._evaluate("key", self.key, state)
        slot = self._evaluate("index", self.index, state)
        group = (state["key"], value)
        members: list[tuple[Any, State] | None] | None = ctx.joins.get(group)  # type: ignore[assignment]
        n = len(members) if members is not None else self._group_size(state)
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < n:
            raise OpError(
                f"Collect index {self.index.source!r} gave slot {slot!r} on state {state}; expected an int in "
                f"[0, {n}) (count {self._count_source()}); fix the index expression or the count",
                port="in",
            )
        if members is None:
            members = [None] * n
            ctx.joins[group] = members  # type: ignore[assignment]
        taken = members[slot]
        if taken is not None:
            raise OpError(
                f"Collect: slot {slot} of group {self.key.source}={value!r} (key {state['key']}) is filled twice, by "
                f"state {taken[1]} and by {state}; members of a group need distinct {self.index.source!r}",
                port="in",
            )
        members[slot] = (x, state)
        if any(m is None for m in members):
            return []
        del ctx.joins[group]
        xs = [m[0] for m in members]  # type: ignore[index]
        states = [m[1] for m in members]  # type: ignore[index]
        lead = np.shape(xs[0])[:-1]
        for i, xi in enumerate(xs):
            if np.shape(xi)[:-1] != lead:
                raise OpError(
                    f"Collect: member in slot {i} (state {states[i]}) has leading shape {np.shape(xi)[:-1]}, "
                    f"expected {lead} (as slot 0); members are concatenated along the last axis",
                    port="in",
                )
        out_state = states[0].replace(**{self.field: value})
        if ctx.train:
            if out_state in ctx.cache:
                raise OpError(
                    f"Collect: two groups produced the same output state {out_state} while the first is in flight; "
                    f"setting {self.field!r} to {self.key.source!r} must give each group its own state",
                    port="in",
                )
            ctx.cache[out_state] = ([np.shape(xi)[-1] for xi in xs], states)
        return [("out", np.concatenate(xs, axis=-1), out_state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        sizes, states = ctx.cache.pop(state)
        pieces = np.split(g, np.cumsum(sizes)[:-1], axis=-1)
        return [("in", gi, s) for gi, s in zip(pieces, states, strict=True)]

    def _count_source(self) -> str:
        return repr(self.count.source) if isinstance(self.count, Expression) else str(self.count)

    def config(self) -> dict[str, Any]:
        count = self.count.source if isinstance(self.count, Expression) else self.count
        return {"key": self.key.source, "index": self.index.source, "count": count, "field": self.field}


class Distribute(Cond):
    """The dynamic partition by state information: each message goes to output ``b{i}`` where ``i`` is
    the value of the ``by`` expression on its state (an edge type, a node arity).

    A multi-way Cond whose predicate is an index; unlike Cond it names its outputs ``b0 .. b{n-1}`` for
    any number of branches (one included), so a builder can loop over edge types without a special
    case for two. Backward sends each gradient back unchanged, like Cond.
    """

    kind = "distribute"
    group = "control"

    def __init__(self, by: str, branches: int) -> None:  # Cond.__init__ would name two branches true/false
        self.predicate = _expression("Distribute", "by", by)
        self.branches = positive_int("Distribute", "branches", branches)
        self._outs = tuple(f"b{i}" for i in range(self.branches))

    def choose(self, state: State) -> str:
        try:
            value = self.predicate.evaluate(state)
        except ExpressionError as exc:
            raise OpError(f"Distribute by: {exc}", port="in") from exc
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.branches:
            raise OpError(
                f"Distribute by {self.predicate.source!r} gave {value!r} on state {state}; expected an int branch "
                f"index in [0, {self.branches}); raise branches or fix the expression",
                port="in",
            )
        return self._outs[value]

    def config(self) -> dict[str, Any]:
        return {"by": self.predicate.source, "branches": self.branches}


# --------------------------------------------------------------------------------------------------------
# Sparse message passing on one graph per message: node states (N, H), edges as int index payloads.


def _index_vector(op: str, port: str, index: Any, size: int) -> np.ndarray:
    idx = np.asarray(index)
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise OpError(
            f"{op} input {port!r}: expected a 1-D integer index vector, got shape {idx.shape} dtype {idx.dtype}",
            port=port,
        )
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise OpError(
            f"{op} input {port!r}: indices must lie in [0, {size}) (the number of rows), found "
            f"[{idx.min()}, {idx.max()}]; fix the edge list or the node count",
            port=port,
        )
    return idx


class _Sparse(JoinMixin, Op):
    """Shared shape of the index ops: a differentiable ``x`` joined by state with int index payloads.

    The output carries ``x``'s state. Index payloads are usually per key (an Input), so with the node
    states coming round a loop with a counter, join them on the key alone (``match_on=()``) and feed a
    fresh index message for every pass.
    """

    group = "aggregation"

    def __init__(self, match_on: tuple[str, ...] | list[str] | None = None) -> None:
        self.match_on = None if match_on is None else tuple(match_on)

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        return {"out": widths.get("x")}

    def config(self) -> dict[str, Any]:
        return {"match_on": None if self.match_on is None else list(self.match_on)}


class Gather(_Sparse):
    """``out = x[index]``: node states (N, H) and an index (E,) give one row per edge (E, H).

    With ``index = edges[:, 0]`` it reads each edge's source node. Backward adds the rows back into
    zeros of shape (N, H) (``np.add.at``, so repeated indices accumulate); the index gets no gradient.
    """

    kind = "gather"
    nondiff_inputs = frozenset({"index"})

    def input_ports(self) -> tuple[str, ...]:
        return ("x", "index")

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        got = self.join(ctx, port, x, state, ("x", "index"))
        if got is None:
            return []
        (xs, sx), (index, _) = got["x"], got["index"]
        idx = _index_vector("Gather", "index", index, len(xs))
        if ctx.train:
            ctx.cache[sx] = (idx, np.shape(xs))
        return [("out", xs[idx], sx)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return _rows_backward(ctx, g, state)


def _rows_backward(ctx: NodeContext, g: Any, state: State) -> Emitted:
    """Backward of taking rows ``x[idx]``: each row's gradient added back where it came from."""
    idx, shape = ctx.cache.pop(state)
    dx = np.zeros(shape, dtype=g.dtype)
    np.add.at(dx, idx, g)
    return [("x", dx, state)]


class ScatterSum(_Sparse):
    """``out[index[e]] += x[e]``: per-edge rows (E, H) summed into their destination nodes (N, H).

    ``like`` is any payload whose first dimension is N (the node states, say, via a Bcast); it only
    gives the output's row count and gets no gradient, nor does the index. A node that no edge points
    to gets zeros. Backward gives each edge its destination's gradient, ``g[index]``.
    """

    kind = "scatter_sum"
    nondiff_inputs = frozenset({"index", "like"})

    def input_ports(self) -> tuple[str, ...]:
        return ("x", "index", "like")

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        got = self.join(ctx, port, x, state, ("x", "index", "like"))
        if got is None:
            return []
        (xs, sx), (index, _), (like, _) = got["x"], got["index"], got["like"]
        n = len(like)
        idx = _index_vector(type(self).__name__, "index", index, n)
        if len(idx) != len(xs):
            raise OpError(
                f"{type(self).__name__} inputs 'x' and 'index': expected one index per row of 'x' ({len(xs)}), "
                f"got {len(idx)}",
                port="index",
            )
        out = np.zeros((n, *np.shape(xs)[1:]), dtype=xs.dtype)
        np.add.at(out, idx, xs)
        scale = self.row_scale(idx, n)
        if scale is not None:
            out *= scale.reshape((n,) + (1,) * (out.ndim - 1))
        if ctx.train:
            ctx.cache[sx] = (idx, scale)
        return [("out", out, sx)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        idx, scale = ctx.cache.pop(state)
        if scale is not None:
            g = g * scale.reshape((len(scale),) + (1,) * (np.ndim(g) - 1))
        return [("x", g[idx], state)]

    def row_scale(self, idx: np.ndarray, n: int) -> np.ndarray | None:
        """A factor per output row (None: plain sum)."""
        return None


class ScatterMean(ScatterSum):
    """Like ScatterSum but each node gets the mean of its incoming rows (0 where none arrive)."""

    kind = "scatter_mean"

    def row_scale(self, idx: np.ndarray, n: int) -> np.ndarray | None:
        counts = np.bincount(idx, minlength=n)
        return 1.0 / np.maximum(counts, 1)


class SumRows(Op):
    """Graph-level readout: the rows (N, ...) summed into one row (1, ...); backward broadcasts."""

    kind = "sum_rows"
    group = "aggregation"

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        x = np.asarray(x)
        if x.ndim < 1:
            raise OpError(f"{type(self).__name__} input 'in': expected rows (N, ...), got a scalar", port="in")
        n = self.divisor(len(x))
        y = x.sum(axis=0, keepdims=True)
        if n != 1:
            y = y / n
        if ctx.train:
            ctx.cache[state] = x.shape
        return [("out", y, state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        shape = ctx.cache.pop(state)
        n = self.divisor(shape[0])
        grad = np.broadcast_to(g if n == 1 else g / n, shape).copy()
        return [("in", grad, state)]

    def divisor(self, n: int) -> int:
        """What the sum of ``n`` rows is divided by (1: a plain sum)."""
        return 1


class MeanRows(SumRows):
    """Graph-level readout: the mean of the rows (N, ...) as one row (1, ...); backward broadcasts / N."""

    kind = "mean_rows"

    def divisor(self, n: int) -> int:
        if n == 0:
            raise OpError("MeanRows input 'in': expected at least one row, got 0 (the mean of nothing)", port="in")
        return n


class SelectRows(_Sparse):
    """``out = x[rows]``: a subset of the rows of ``x`` (E, ...), chosen by ``rows``, either a boolean
    mask of length E or an int index vector; used to split one graph's edges by type.

    Backward scatters the gradient back into zeros of x's shape (repeated indices accumulate).
    """

    kind = "select_rows"
    nondiff_inputs = frozenset({"rows"})

    def input_ports(self) -> tuple[str, ...]:
        return ("x", "rows")

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        got = self.join(ctx, port, x, state, ("x", "rows"))
        if got is None:
            return []
        (xs, sx), (rows, _) = got["x"], got["rows"]
        rows = np.asarray(rows)
        if rows.dtype.kind == "b":
            if rows.shape != (len(xs),):
                raise OpError(
                    f"SelectRows input 'rows': a boolean mask needs shape ({len(xs)},) (one flag per row of 'x'), "
                    f"got {rows.shape}",
                    port="rows",
                )
            idx = np.flatnonzero(rows)
        else:
            idx = _index_vector("SelectRows", "rows", rows, len(xs))
        if ctx.train:
            ctx.cache[sx] = (idx, np.shape(xs))
        return [("out", xs[idx], sx)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return _rows_backward(ctx, g, state)


# --------------------------------------------------------------------------------------------------------
# Small helpers the compound cells need.


class Discard(Op):
    """A sink: consumes a message and sends nothing on, not even a gradient (its input is not
    differentiable, so the producer sees no gradient from here: a Split fills zeros for that piece).

    Every output must feed an input, so this is how a graph drops a value it does not need, such as
    the memory cell c of a Tree-LSTM node state [h; c] in front of a classifier that reads h only.
    """

    kind = "discard"
    group = "io"
    nondiff_inputs = frozenset({"in"})

    def output_ports(self) -> tuple[str, ...]:
        return ()

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        return {}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        return []

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return []
