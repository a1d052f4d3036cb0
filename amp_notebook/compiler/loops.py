"""Loops: ``for`` over a sequence or a ``range`` (and the loop machine ``while_loops.py`` shares), and
compile-time unrolling.

A loop in the graph runs once per key per iteration, so its counter lives in the messages' state. For a
loop with counter field ``c`` (named after the Python variable, or ``t`` for ``for x in seq``), start
``a``, condition ``cond`` and step ``k``, every payload value ``v`` the body reads or assigns is *carried*::

    v --Isu 'v_enter' {c: a}--> Phi 'v_loop' --Cond 'v_test' on cond--true--> body ... v'
                                   ^                                                 |
                                   +------------ Isu 'v_next' {c: c + k} <-----------+
                                                  --false--> Isu 'v_exit' {c: None} --> after the loop

The Isu on entry adds the counter (its inverse deletes it again on the way back), the one on the back-edge
advances it (and steps it back for gradients), and the Cond decides per message whether to go round again,
so the deduced counter and bound are all the graph needs to run any number of iterations per key. A value
the body only reads goes round unchanged (that is how an outer value reaches every iteration). On exit the
counter is removed again when its final value is known from the state (``max(a, b)`` for ``range(a, b)``,
``length`` for a sequence), so the loop leaves no trace in the state; a ``while`` loop with a condition of
another form keeps its counter field.

The elements of a sequence (``for x in seq``, ``seq[t]``) do not go round the loop: the sequence passes an
Ungroup *before* the loop, which emits its rows numbered by the counter, and each iteration's join picks
the row whose counter matches. ``for i in nn.unroll(n)`` (or over a tuple of constants) is not a loop in the
graph: the body is translated once per item, with ``i`` a constant.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from amp_notebook.compiler import scan
from amp_notebook.compiler.source import MISSING, is_constant
from amp_notebook.compiler.values import (
    Builtin,
    LocalFunction,
    SequenceInput,
    StateExpr,
    Tensor,
    Undefined,
)
from amp_notebook.ir import ops as O

if TYPE_CHECKING:
    from amp_notebook.compiler.translate import Translator


@dataclass
class Loop:
    """What ``graph_loop`` needs: the counter field, its start, the condition, the step, how to strip the
    counter on exit (None: keep it), the element streams, and the name the body sees the counter by."""

    counter: str
    start: Any  # int or StateExpr
    condition: StateExpr
    step: int
    exit: Any  # int or StateExpr, or None
    elements: dict[str, Tensor] = field(default_factory=dict)
    visible: str | None = None
    rows: dict[tuple[str, str], Tensor] = field(default_factory=dict)  # (name, counter name) -> ungrouped rows


def translate_for(tr: Translator, node: ast.For) -> None:
    if node.orelse:
        raise tr.error(node, "for ... else is not compiled; write what follows the loop after it")
    header = node.iter
    head = tr.expr(header.func) if isinstance(header, ast.Call) else None
    if isinstance(head, Builtin) and head.name == "unroll":
        _unrolled(tr, node, _unroll_items(tr, header))
        return
    if isinstance(head, Builtin) and head.name == "range":
        _range_loop(tr, node, header)
        return
    if isinstance(head, Builtin) and head.name in ("enumerate", "zip"):
        _sequence_loop(tr, node, head.name)
        return
    value = tr.expr(header)
    if isinstance(value, SequenceInput):
        _sequence_loop(tr, node, None)
        return
    if isinstance(value, tuple | list) and all(is_constant(v) for v in value):
        _unrolled(tr, node, tuple(value))
        return
    if isinstance(value, Tensor):
        raise tr.error(
            node,
            f"'for ... in {tr.source.snippet(header)}' iterates a tensor, whose length is known only when the graph "
            "runs; declare the input as nn.Sequence(...) (its length is a state field), or use range(n)",
        )
    raise tr.error(
        node,
        f"for loops run over an nn.Sequence input, range(...), enumerate/zip of sequences or "
        f"nn.unroll(...); got {type(value).__name__}",
    )


def _unroll_items(tr: Translator, header: ast.Call) -> tuple[Any, ...]:
    if len(header.args) != 1 or header.keywords:
        raise tr.error(header, "nn.unroll takes one argument: a count or a tuple of constants")
    value = tr.expr(header.args[0])
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return tuple(range(value))
    if isinstance(value, tuple | list) and all(is_constant(v) for v in value):
        return tuple(value)
    raise tr.error(header, f"nn.unroll needs a constant count or tuple, got {type(value).__name__}")


def _unrolled(tr: Translator, node: ast.For, items: tuple[Any, ...]) -> None:
    from amp_notebook.compiler.translate import Return

    for item in items:
        tr.assign(node.target, item)
        try:
            tr.block(node.body)
        except Return as ret:
            raise tr.error(ret.node, "return inside a loop is not compiled; return after the loop") from None


def _range_loop(tr: Translator, node: ast.For, header: ast.Call) -> None:
    if not isinstance(node.target, ast.Name):
        raise tr.error(node.target, "a range loop binds one name: for i in range(n):")
    bounds = [tr.expr(a) for a in header.args]
    if header.keywords or not 1 <= len(bounds) <= 3:
        raise tr.error(header, "range takes one to three positional arguments")
    for b in bounds:
        if isinstance(b, Tensor) or not (isinstance(b, StateExpr) or (isinstance(b, int) and not isinstance(b, bool))):
            raise tr.error(header, "range bounds must be ints or state values (len(seq), an nn.Field, a counter)")
    start, stop = (0, bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
    step = bounds[2] if len(bounds) == 3 else 1
    if not isinstance(step, int) or step == 0:
        raise tr.error(header, "the step of range must be a non-zero int constant")
    counter = tr.fresh_field(node.target.id)
    op = ast.Lt() if step > 0 else ast.Gt()
    condition = StateExpr(
        ast.Compare(ast.Name(counter, ast.Load()), [op], [tr.state_node(header, stop)]),
        frozenset({counter}) | _fields(stop),
    )
    loop = Loop(counter, start, condition, step, exit_value(tr, header, start, stop, step), visible=node.target.id)
    graph_loop(tr, node, loop, node.body)


def _sequence_loop(tr: Translator, node: ast.For, wrapper: str | None) -> None:
    header = node.iter
    if wrapper is None:
        sources, targets = [header], [node.target]
        visible = None
    else:
        assert isinstance(header, ast.Call)
        extra = [k for k in header.keywords if not (wrapper == "zip" and k.arg == "strict")]
        if extra or not header.args:
            raise tr.error(header, f"{wrapper}(...) takes sequences as positional arguments here")
        if not isinstance(node.target, ast.Tuple) or any(isinstance(t, ast.Starred) for t in node.target.elts):
            raise tr.error(node.target, f"unpack {wrapper}(...) into names: for i, x in enumerate(seq):")
        if wrapper == "enumerate":
            if len(header.args) != 1 or len(node.target.elts) != 2 or not isinstance(node.target.elts[0], ast.Name):
                raise tr.error(node, "write for i, x in enumerate(seq): with seq an nn.Sequence input")
            sources, targets, visible = [header.args[0]], [node.target.elts[1]], node.target.elts[0].id
        else:
            if len(header.args) != len(node.target.elts):
                raise tr.error(node, "zip(...) needs as many names as sequences: for x, y in zip(xs, ys):")
            sources, targets, visible = list(header.args), list(node.target.elts), None
    sequences = [tr.expr(s) for s in sources]
    for s, value in zip(sources, sequences, strict=True):
        if not isinstance(value, SequenceInput):
            raise tr.error(
                s, f"{tr.source.snippet(s)} is not an nn.Sequence input; only sequences have a length known per key"
            )
    lengths = {s.length for s in sequences}
    if len(lengths) > 1:
        raise tr.error(header, f"zipped sequences must share their length field, got {sorted(lengths)}")
    (length,) = lengths
    counter = tr.fresh_field(visible or "t")
    condition = StateExpr(
        ast.Compare(ast.Name(counter, ast.Load()), [ast.Lt()], [ast.Name(length, ast.Load())]),
        frozenset({counter, length}),
    )
    loop = Loop(counter, 0, condition, 1, StateExpr.field(length), visible=visible)
    for target, seq in zip(targets, sequences, strict=True):
        if not isinstance(target, ast.Name):
            raise tr.error(target, "a sequence element binds one name")
        loop.elements[target.id] = _ungroup(tr, node, seq.tensor, counter)
    graph_loop(tr, node, loop, node.body)


def exit_value(tr: Translator, where: ast.AST, start: Any, stop: Any, step: int) -> Any:
    """The counter after ``for c in range(start, stop, step)``: start + step * (number of iterations)."""
    if isinstance(start, int) and isinstance(stop, int):
        count = max(0, -(-(stop - start) // step)) if step > 0 else max(0, -(-(start - stop) // -step))
        return start + step * count
    if abs(step) == 1:
        bound = ast.Call(
            ast.Name("max" if step > 0 else "min", ast.Load()),
            [tr.state_node(where, start), tr.state_node(where, stop)],
            [],
        )
        return StateExpr(bound, _fields(start) | _fields(stop))
    distance = f"({tr_source(tr, where, stop)}) - ({tr_source(tr, where, start)})"
    if step < 0:
        distance = f"({tr_source(tr, where, start)}) - ({tr_source(tr, where, stop)})"
    k = abs(step)
    text = f"({tr_source(tr, where, start)}) + {step} * max(0, ({distance} + {k - 1}) // {k})"
    return StateExpr(ast.parse(text, mode="eval").body, _fields(start) | _fields(stop))


def tr_source(tr: Translator, where: ast.AST, value: Any) -> str:
    return ast.unparse(tr.state_node(where, value))


def _fields(value: Any) -> frozenset[str]:
    return value.fields if isinstance(value, StateExpr) else frozenset()


def _ungroup(tr: Translator, where: ast.AST, tensor: Tensor, counter: str) -> Tensor:
    tr.require_scope(tensor, where, "the sequence")
    node = tr.add(where, O.Ungroup(counter), [tensor], name=tr.g.fresh(f"{tensor.ref.node}_rows"))
    return tr.out(node)


def indexed_row(tr: Translator, node: ast.Subscript) -> Tensor:
    """``seq[i]`` inside the loop over ``i``: the row the loop's Ungroup emitted for this iteration."""
    for loop in reversed(tr.loops):
        if isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Name):
            row = loop.rows.get((node.value.id, node.slice.id))
            if row is not None:
                return row
    raise tr.error(
        node,
        f"{tr.source.snippet(node)}: a tensor is indexed only by the counter of a loop it was defined before "
        "(for i in range(n): ... x[i] ... reads row i of x, one row per iteration); tensors are not sliced",
    )


def graph_loop(tr: Translator, node: ast.stmt, loop: Loop, body: list[ast.stmt]) -> None:
    """Translate a loop in the graph (see the module docstring)."""
    from amp_notebook.compiler.translate import Return

    c = loop.counter
    if loop.visible is not None:
        for sub in scan.indexed_by(body, loop.visible):
            assert isinstance(sub.value, ast.Name)
            key = (sub.value.id, loop.visible)
            value = tr.binding(sub.value.id)
            if key in loop.rows or sub.value.id in scan.assigned_names(body):
                continue
            if isinstance(value, SequenceInput):
                value = value.tensor
            if isinstance(value, Tensor):
                loop.rows[key] = _ungroup(tr, sub, value, c)
    names = _names_used(tr, body)
    carried = [
        n
        for n in names
        if n not in loop.elements
        and n != loop.visible
        and isinstance(tr.binding(n), Tensor | SequenceInput)
        and not _only_indexed(body, n, loop.visible)
    ]
    before = {n: tr.binding(n) for n in carried}
    phis, exits = {}, {}
    for n in carried:
        value = before[n]
        tensor = value.tensor if isinstance(value, SequenceInput) else value
        if c in tensor.fields:
            raise tr.error(node, f"{n} already carries the state field {c!r}; rename the loop variable")
        tr.require_scope(tensor, node, n)
        enter = tr.add(node, O.Isu({c: _src(tr, node, loop.start)}, {c: None}), [tensor], name=tr.g.fresh(f"{n}_enter"))
        phi = tr.add(node, O.Phi(2), [tr.out(enter), None], name=tr.g.fresh(f"{n}_loop"))
        test = tr.add(node, O.Cond(loop.condition.source), [tr.out(phi)], name=tr.g.fresh(f"{n}_test"))
        phis[n], exits[n] = phi, tr.out(test, "false")
        inside = tr.out(test, "true")
        tr.bind(n, SequenceInput(inside, value.length, value.name) if isinstance(value, SequenceInput) else inside)
    assigned = scan.assigned_names(body)
    previous = {n: tr.binding(n) for n in [*assigned, *loop.elements, *([loop.visible] if loop.visible else [])]}
    for n, element in loop.elements.items():
        tr.bind(n, element)
    if loop.visible is not None:
        tr.bind(loop.visible, StateExpr.field(c))
    tr.required.append(c)
    tr.loops.append(loop)
    try:
        tr.block(body)
    except Return as ret:
        raise tr.error(ret.node, "return inside a loop is not compiled; return after the loop") from None
    finally:
        tr.required.pop()
        tr.loops.pop()
    tr.g.line = tr.source.line(node)
    for n in carried:
        new = tr.binding(n)
        tensor = new.tensor if isinstance(new, SequenceInput) else new
        if not isinstance(tensor, Tensor):
            raise tr.error(node, f"{n} is a tensor before the loop but a {type(new).__name__} at the end of its body")
        start = phis[n]
        width = tr.out(start).width
        if tensor.width is not None and width is not None and tensor.width != width:
            raise tr.error(
                node,
                f"{n} has width {width} when the loop starts but {tensor.width} at the end of its body; "
                "a value carried round a loop keeps its width",
            )
        if tensor.fields != tr.out(start).fields:
            raise tr.error(
                node,
                f"{n} comes out of the loop body with state fields {sorted(tensor.fields)}, expected "
                f"{sorted(tr.out(start).fields)}",
            )
        back = tr.add(
            node, O.Isu({c: f"{c} + {loop.step}"}, {c: f"{c} - {loop.step}"}), [tensor], name=tr.g.fresh(f"{n}_next")
        )
        tr.g.connect(tr.out(back).ref, start.name, "in1")
    line = tr.source.line(node)
    for n in carried:
        out = exits[n]
        if loop.exit is not None:
            exit_node = tr.add(
                node, O.Isu({c: None}, {c: _src(tr, node, loop.exit)}), [out], name=tr.g.fresh(f"{n}_exit")
            )
            out = tr.out(exit_node)
        value = before[n]
        tr.bind(n, SequenceInput(out, value.length, value.name) if isinstance(value, SequenceInput) else out)
    for n, old in previous.items():
        if n in carried:
            continue
        now = tr.binding(n)
        stale = isinstance(now, StateExpr) and c in now.fields
        if old is MISSING or n in loop.elements or n == loop.visible or isinstance(now, Tensor) or stale:
            tr.bind(
                n,
                Undefined(
                    f"it is set inside the loop at line {line} and is not defined after it; "
                    "set it before the loop to carry its last value out"
                ),
            )
    if loop.exit is not None:
        tr.fields.discard(c)


def _src(tr: Translator, where: ast.AST, value: Any) -> str:
    return ast.unparse(tr.state_node(where, value))


def _only_indexed(body: list[ast.stmt], name: str, counter: str | None) -> bool:
    """True when ``name`` is read in ``body`` only as ``name[counter]`` (its rows come from an Ungroup)."""
    if counter is None:
        return False
    indexed = {
        id(s.value) for s in scan.indexed_by(body, counter) if isinstance(s.value, ast.Name) and s.value.id == name
    }
    reads = [n for n in scan.walk(body) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    return bool(reads) and all(id(r) in indexed for r in reads)


def _names_used(tr: Translator, body: list[ast.stmt]) -> list[str]:
    """Names a loop body reads or assigns, with the free names of the nested functions it calls."""
    names = dict.fromkeys([*scan.read_names(body), *scan.assigned_names(body)])
    for n in list(names):
        fn = tr.binding(n)
        if isinstance(fn, LocalFunction):
            names.update(dict.fromkeys(scan.free_names(fn.node)))
    return list(names)
