"""Dynamic (dis)aggregation by state information: Flatmap, Partition, Collect and Distribute.

These let one static graph walk a per-instance structure (a tree, say) whose shape is only known from
the key's data: Flatmap turns one message holding a table into one message per row addressed by a
state field, Partition into one message per *group* of rows (the branches of one tree level),
Collect merges the messages whose state maps to the same group (the children of one tree
node) into one, and Distribute routes each message to a branch chosen by its state.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import Any

import numpy as np

from amp_notebook.ir.expr import Expression, ExpressionError
from amp_notebook.ir.message import State
from amp_notebook.ir.ops.base import Emitted, NodeContext, Op, OpError, Width, split_last
from amp_notebook.ir.ops.control import Cond
from amp_notebook.ir.ops.facts import BOOL, COUNT, EXPR, STATE_FIELDS, Choice, Field, SizeOrExpr, StateField


class _RowSplit(Op):
    """What Flatmap and Partition share: a state field named after column 0 of a table, the ``keep_2d``
    switch, and a backward that writes each part's gradient into its rows of the table's gradient and
    sends it once every part has come back (column 0, the addresses, gets zero)."""

    field: str
    keep_2d: bool

    def _parent(self, state: State) -> State:
        """The state of the table message that a part with ``state`` came from."""
        return state.replace(**{self.field: None})

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        parent = self._parent(state)
        entry: _RowGradients = ctx.cache[parent]
        if entry.grad is None:
            entry.grad = np.zeros(entry.shape, dtype=np.result_type(g, np.float64))
        rows = entry.rows[state[self.field]]  # one row (Flatmap) or an index array (Partition)
        part = entry.grad[rows, 1:]
        entry.grad[rows, 1:] = np.reshape(g, part.shape)
        entry.remaining -= 1
        if entry.remaining:
            return []
        del ctx.cache[parent]
        return [("in", entry.grad, parent)]


class Flatmap(_RowSplit):
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
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)
    fields = (
        Field("field", StateField(), "the state field set from column 0, such as 'pos'", default="pos"),
        Field("keep_2d", BOOL, "true: payloads (1, k); false: vectors (k,)", default=True),
    )

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


class _RowGradients:
    """What Flatmap's (Partition's) backward fills in: the input's shape, the row (rows) of each field value,
    messages still owed."""

    __slots__ = ("grad", "remaining", "rows", "shape")

    def __init__(self, shape: tuple[int, ...], rows: dict[int, Any]) -> None:
        self.shape = shape
        self.rows = rows
        self.remaining = len(rows)
        self.grad: np.ndarray | None = None


class Partition(_RowSplit):
    """One message holding a table (n, 1 + k) -> one message per distinct value v of column 0 (ascending),
    holding the rows whose column 0 equals v, in their order, without column 0, with state field
    ``field = v``: shape (m, k), or with ``keep_2d=False`` (k = 1 only) a vector (m,), what Gather and
    ScatterSum take as an index. A forest's ``[level, child row]`` table becomes one index message per tree
    level (``data.forest``), to be joined with the state table when the loop reaches that level.

    With ``size_field`` each message's state also gets ``size_field = m``, its row count, so control flow
    downstream can read it: a loop over a word's characters stops at ``c < chars``, a Distribute sends
    one-id groups one way and longer ones another (``models.bilstm_tagger``).

    Column 0 follows Flatmap's rules (integers; in a float table within 1e-3 of one); the incoming state
    must not have ``field`` (or ``size_field``) yet. Backward collects the groups' gradients and sends one
    gradient of the input's shape, zero in column 0.
    """

    kind = "partition"
    group = "aggregation"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)
    fields = (
        Field("field", StateField(), "the state field set from column 0, such as 't'", default="t"),
        Field("keep_2d", BOOL, "true: payloads (m, k); false: vectors (m,)", default=True),
        Field("size_field", StateField(nullable=True), "a state field set to each group's row count, such as 'ids', "
              "or null for none", default=None),
    )  # fmt: skip
    size_field: str | None

    def setup(self) -> None:
        if self.size_field is not None and self.size_field == self.field:
            raise OpError(f"Partition size_field: expected a field other than field {self.field!r}, got the same")

    def _parent(self, state: State) -> State:
        if self.size_field is None:
            return state.replace(**{self.field: None})
        return state.replace(**{self.field: None, self.size_field: None})

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        found = widths.get("in")
        if found is not None and (found < 2 or (not self.keep_2d and found != 2)):
            need = "width >= 2" if self.keep_2d else "width 2 (keep_2d=False gives vectors)"
            raise OpError(
                f"Partition input 'in': expected {need} (column 0 holds {self.field!r}), got {found}", port="in"
            )
        return {"out": None if found is None or not self.keep_2d else found - 1}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        for name in (self.field, self.size_field):
            if name is not None and name in state:
                raise OpError(f"Partition: state {state} already has field {name!r}; choose another", port="in")
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] < 2 or (not self.keep_2d and x.shape[1] != 2):
            raise OpError(
                f"Partition input 'in': expected a matrix (n, 1 + k) with column 0 holding {self.field!r} "
                f"(k = 1 with keep_2d=False), got shape {x.shape}",
                port="in",
            )
        values = np.asarray(_integer_column("Partition", self.field, x[:, 0]), dtype=np.int64)
        order = np.argsort(values, kind="stable")
        groups, starts = np.unique(values[order], return_index=True)
        bounds = [*starts.tolist(), len(order)]
        rows = x[:, 1:] if self.keep_2d else x[:, 1]
        out: Emitted = []
        members: dict[int, np.ndarray] = {}
        for v, lo, hi in zip(groups.tolist(), bounds[:-1], bounds[1:], strict=True):
            picked = order[lo:hi]
            members[v] = picked
            fields = {self.field: v} if self.size_field is None else {self.field: v, self.size_field: hi - lo}
            out.append(("out", rows[picked], state.replace(**fields)))
        if ctx.train and out:
            ctx.cache[state] = _RowGradients(x.shape, members)
        return out


def _integer_column(op: str, field: str, column: np.ndarray) -> np.ndarray:
    """Column 0 of a table as integers (a float column must hold integers within 1e-3)."""
    if column.dtype.kind == "f":
        rounded = np.rint(column)
        bad = np.flatnonzero(np.abs(column - rounded) > 1e-3)
        if bad.size:
            raise OpError(
                f"{op} input 'in': column 0 holds {field!r} and must hold integers, found "
                f"{float(column[bad[0]])!r} in row {bad[0]}",
                port="in",
            )
        return rounded.astype(np.int64)
    if column.dtype.kind not in "iu":
        raise OpError(f"{op} input 'in': expected an int (or float) matrix, got dtype {column.dtype}", port="in")
    return column


def _row_addresses(field: str, column: np.ndarray) -> list[int]:
    values = [int(v) for v in _integer_column("Flatmap", field, column)]
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


class Collect(Op):
    """The dynamic merge by state information: a "group by a key function" over the message stream.

    Messages of one key id whose ``key`` expression evaluates equal form a group; the ``index``
    expression gives each member its slot ``0 .. count-1`` (``count`` an int or an expression over the
    first member's state). When every slot is filled Collect emits ONE message: the members' payloads
    concatenated in slot order along the last axis (``axis=-1``, the default) or along the first
    (``axis=0``: members' rows stacked, e.g. word vectors (1, W) -> a sentence (n, W)), with the state of
    the slot-0 member in which ``field`` is set to the group's key value (``field=None`` sets nothing) and
    the fields named in ``drop`` are removed (the members' own addresses, which the merged message has no
    single value for). Members are matched on the key id and the key value only, so other fields that
    distinguish groups (a loop counter) must appear in the key expression.

    A Tree-LSTM joins each node's two children into their parent with
    ``Collect(key="pos // 2", index="pos % 2", count=2, field="pos")``: the children at heap positions
    2p and 2p+1 become one message [left; right] with ``pos = p``. Because the state changes on each
    pass, a Collect may close a loop in place of an Isu (``STATE_UPDATING``). A tagger puts a sentence
    back together from its words with ``Collect(key="0", index="w", count="length", field=None,
    axis=0, drop=["w"])``.

    Backward splits the gradient by the members' sizes along ``axis`` and returns each piece with its
    member's own state (cached at forward).
    """

    kind = "collect"
    group = "aggregation"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)
    updates_state = True
    fields = (
        Field("key", EXPR, "an expression whose value groups messages, such as 'pos // 2'", example="pos // 2"),
        Field("index", EXPR, "an expression giving each message's place in its group, such as 'pos % 2'",
              example="pos % 2"),
        Field("count", SizeOrExpr("a fixed group size", "an expression giving the group size"), "messages per group: "
              "a whole number such as 2, or an expression over state fields", example=2),
        Field("field", StateField(nullable=True), "the state field set to the group's key value, such as 'pos', or "
              "null to set none", example="pos"),
        Field("axis", Choice(0, -1), "-1: members side by side (the default); 0: members' rows stacked", default=-1),
        Field("drop", STATE_FIELDS, "state fields removed from the merged message (the members' own addresses), or "
              "null", default=None),
    )  # fmt: skip
    key: Expression
    index: Expression
    count: int | Expression
    field: str | None
    axis: int
    drop: tuple[str, ...]

    def setup(self) -> None:
        self.drop = self.drop or ()  # config() writes [] for no fields, as it always has
        for name in self.drop:
            if name == "key":
                raise OpError("Collect drop: 'key' is the controller's field; drop other fields")
        if self.field is not None and self.field in self.drop:
            raise OpError(f"Collect drop: {self.field!r} is the field the Collect sets; drop other fields")

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        found = widths.get("in")
        if self.axis == 0:
            return {"out": found}
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
        if self.axis == 0 and np.ndim(x) < 2:
            raise OpError(
                f"Collect axis 0: expected members with rows (at least 2 dimensions, e.g. (1, width)), got shape "
                f"{np.shape(x)} on state {state}",
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
        self._check_shapes(xs, states)
        changes: dict[str, Any] = dict.fromkeys(self.drop)
        if self.field is not None:
            changes[self.field] = value
        out_state = states[0].replace(**changes)
        if ctx.train:
            if out_state in ctx.cache:
                raise OpError(
                    f"Collect: two groups produced the same output state {out_state} while the first is in flight; "
                    f"each group needs its own state: set a field to the key value (field=...) or drop fewer fields",
                    port="in",
                )
            ctx.cache[out_state] = ([np.shape(xi)[self.axis] for xi in xs], states)
        return [("out", np.concatenate(xs, axis=self.axis), out_state)]

    def _check_shapes(self, xs: list[Any], states: list[State]) -> None:
        """Members must agree in every dimension but the one they are concatenated along."""

        def others(x: Any) -> tuple[int, ...]:
            shape = np.shape(x)
            return shape[1:] if self.axis == 0 else shape[:-1]

        expected = others(xs[0])
        for i, xi in enumerate(xs):
            if others(xi) != expected:
                which = "trailing" if self.axis == 0 else "leading"
                raise OpError(
                    f"Collect: member in slot {i} (state {states[i]}) has {which} shape {others(xi)}, "
                    f"expected {expected} (as slot 0); members are concatenated along axis {self.axis}",
                    port="in",
                )

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        sizes, states = ctx.cache.pop(state)
        if self.axis == 0:
            pieces = [g[a:b] for a, b in pairwise([0, *np.cumsum(sizes).tolist()])]
        else:
            pieces = split_last(g, sizes)
        return [("in", gi, s) for gi, s in zip(pieces, states, strict=True)]

    def _count_source(self) -> str:
        return repr(self.count.source) if isinstance(self.count, Expression) else str(self.count)


class Distribute(Cond):
    """The dynamic partition by state information: each message goes to output ``b{i}`` where ``i`` is
    the value of the ``by`` expression on its state (an edge type, a node arity).

    A multi-way Cond whose predicate is an index; unlike Cond it names its outputs ``b0 .. b{n-1}`` for
    any number of branches (one included), so a builder can loop over edge types without a special
    case for two. Backward sends each gradient back unchanged, like Cond.
    """

    kind = "distribute"
    group = "control"
    fields = (
        Field("by", EXPR, "an expression over state fields giving the branch index, such as 'key % 2'",
              example="key % 2", attr="predicate"),
        Field("branches", COUNT, "number of outputs b0, b1, ...", example=2),
    )  # fmt: skip

    def setup(self) -> None:  # Cond's would name two branches true/false
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
