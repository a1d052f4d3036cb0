"""``if`` statements: on constants at compile time, on state values as Cond and Phi.

An ``if`` whose test is a constant (a size, a flag given to ``amp.compile``) keeps one branch: the other is
never translated. An ``if`` on a state value (``t == 0``, ``len(seq) > 5``, an ``nn.Field``) is control
flow in the graph: every payload value that either branch reads or assigns passes a Cond on the test (each
message goes down the side its state selects), both branches are translated, and every name either side
assigns is merged after the ``if`` by a Phi (which sends each gradient back the way its message came)::

    h --Cond 'h_if' on test --true--> body    ... h1 --+
                             --false-> orelse ... h2 --+--> Phi 'h_merge' --> h after the if

A value only one side changes still passes both (unchanged on the other); a value neither side reads
stays where it is. Names set on one side only are undefined after the ``if``. An ``if`` on a payload value
(``if h.sum() > 0``) is refused: payloads exist only when the graph runs, and the IR routes by state.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from amp_notebook.compiler import scan
from amp_notebook.compiler.source import MISSING, is_constant
from amp_notebook.compiler.values import LeafTest, LocalFunction, SequenceInput, StateExpr, Tensor, Undefined
from amp_notebook.ir import ops as O

if TYPE_CHECKING:
    from amp_notebook.compiler.translate import Translator


def translate_if(tr: Translator, node: ast.If) -> None:
    test = tr.condition(node.test, "an if")
    if isinstance(test, LeafTest):
        raise tr.error(
            node,
            "t.is_leaf splits a recursive function into its leaf and branch parts: write it as the "
            "function's first statement, if t.is_leaf: ... else: ...",
        )
    if isinstance(test, StateExpr):
        _state_if(tr, node, test)
        return
    if not is_constant(test):
        raise tr.error(node.test, f"an if tests a constant or a state value, not a {type(test).__name__}")
    tr.block(node.body if test else node.orelse)


def _state_if(tr: Translator, node: ast.If, test: StateExpr) -> None:
    from amp_notebook.compiler.translate import Return

    names = dict.fromkeys([*scan.read_names(node.body + node.orelse), *scan.assigned_names(node.body + node.orelse)])
    for n in list(names):
        fn = tr.binding(n)
        if isinstance(fn, LocalFunction):
            names.update(dict.fromkeys(scan.free_names(fn.node)))
    routed = [n for n in names if isinstance(tr.binding(n), Tensor | SequenceInput)]
    scope = tr.scope
    saved = dict(scope.vars)
    conds = {}
    for n in routed:
        value = tr.binding(n)
        tensor = value.tensor if isinstance(value, SequenceInput) else value
        tr.require_scope(tensor, node, n)
        conds[n] = tr.add(node, O.Cond(test.source), [tensor], name=tr.g.fresh(f"{n}_if"))

    def branch(stmts: list[ast.stmt], port: str) -> dict[str, Any]:
        scope.vars = dict(saved)
        for n in routed:
            tr.bind(n, _like(tr.binding(n), tr.out(conds[n], port)))
        try:
            tr.block(stmts)
        except Return as ret:
            raise tr.error(
                ret.node,
                "return inside an if on a state value is not compiled; assign the result in "
                "both branches and return it after the if",
            ) from None
        return dict(scope.vars)

    after_true = branch(node.body, "true")
    after_false = branch(node.orelse, "false")
    scope.vars = dict(saved)
    tr.g.line = tr.source.line(node)
    changed = [
        n
        for n in dict.fromkeys([*after_true, *after_false])
        if n in routed
        or after_true.get(n, MISSING) is not saved.get(n, MISSING)
        or after_false.get(n, MISSING) is not saved.get(n, MISSING)
    ]
    line = tr.source.line(node)
    for n in changed:
        a, b = after_true.get(n, MISSING), after_false.get(n, MISSING)
        tr.bind(n, _merge(tr, node, test, n, a, b, line))


def _merge(tr: Translator, node: ast.If, test: StateExpr, name: str, a: Any, b: Any, line: int | None) -> Any:
    if a is b:
        return a
    ta = a.tensor if isinstance(a, SequenceInput) else a
    tb = b.tensor if isinstance(b, SequenceInput) else b
    if isinstance(ta, Tensor) and isinstance(tb, Tensor):
        if ta.width is not None and tb.width is not None and ta.width != tb.width:
            raise tr.error(
                node,
                f"{name} has width {ta.width} after the if branch but {tb.width} after the else "
                "branch; both sides must give it the same width",
            )
        if ta.dtype != tb.dtype or ta.fields != tb.fields:
            raise tr.error(
                node, f"{name} differs in kind between the branches of the if ({ta.describe()} vs {tb.describe()})"
            )
        phi = tr.add(node, O.Phi(2), [ta, tb], name=tr.g.fresh(f"{name}_merge"))
        return _like(a, tr.out(phi))
    if is_constant(a) and is_constant(b) and a == b:
        return a
    numbers = (int, StateExpr)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        fields = test.fields | _fields(a) | _fields(b)
        return StateExpr(ast.IfExp(test.node, tr.state_node(node, a), tr.state_node(node, b)), fields)
    if a is MISSING or b is MISSING or isinstance(a, Undefined) or isinstance(b, Undefined):
        return Undefined(f"it is set in only one branch of the if at line {line}; set it before the if or in both")
    return Undefined(f"it holds different kinds of values in the two branches of the if at line {line}")


def _like(template: Any, tensor: Tensor) -> Any:
    if isinstance(template, SequenceInput):
        return SequenceInput(tensor, template.length, template.name)
    return tensor


def _fields(value: Any) -> frozenset[str]:
    return value.fields if isinstance(value, StateExpr) else frozenset()
