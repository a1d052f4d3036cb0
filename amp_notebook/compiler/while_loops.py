"""``while`` loops on a counter: the loop machine of ``loops.py`` with the counter and bound deduced.

``while <condition>:`` compiles when the condition reads a counter that the body updates by a constant
step as its last statement (``t += 1``, ``t -= 2``): the counter's start is its value before the loop
(a constant or a state value), the condition becomes the Cond's predicate, and the step the back-edge's
Isu (invertible: the backward pass steps the counter back). When the condition has the form
``t < bound`` (``<=``, ``>``, ``>=``, either side) the counter's final value is known from the state
(``max(start, bound)`` counting up), so it leaves the state on exit and ``t`` reads that value after the
loop; otherwise the field stays in the state with its final value. A condition on a payload value, a
condition that no update can change, and a non-invertible update are refused.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from amp_notebook.compiler import scan
from amp_notebook.compiler.loops import Loop, exit_value, graph_loop
from amp_notebook.compiler.values import StateExpr

if TYPE_CHECKING:
    from amp_notebook.compiler.translate import Translator


def translate_while(tr: Translator, node: ast.While) -> None:
    if node.orelse:
        raise tr.error(node, "while ... else is not compiled; write what follows the loop after it")
    tr.condition(node.test, "a while condition")
    counters = [
        n for n in _updated_counters(tr, node) if n in {x.id for x in ast.walk(node.test) if isinstance(x, ast.Name)}
    ]
    if not counters:
        raise tr.error(
            node,
            f"the condition {tr.source.snippet(node.test)!r} reads no counter that the loop updates, so it would run "
            "forever or never: start a counter before the loop (t = 0) and end the body with t += 1",
        )
    if len(counters) > 1:
        raise tr.error(node, f"the loop updates several counters its condition reads ({counters}); use one")
    (name,) = counters
    last = node.body[-1]
    step = _counter_step(last, name)
    if step is None and _counter_name(last) == name:
        raise tr.error(
            last,
            f"the update of the counter {name} must be invertible ({name} += k or {name} -= k with "
            "a constant k): the backward pass steps the counter back through the loop",
        )
    if step is None or name in scan.assigned_names(node.body[:-1]):
        where = next((s for s in node.body[:-1] if name in scan.assigned_names([s])), last)
        raise tr.error(
            where,
            f"update the counter {name} once, as the last statement of the loop body ({name} += 1): "
            "it changes once per iteration, on the way round",
        )
    start = tr.lookup(name, node)
    if not (isinstance(start, StateExpr) or (isinstance(start, int) and not isinstance(start, bool))):
        raise tr.error(node, f"the counter {name} must start as an int or a state value, got {type(start).__name__}")
    if isinstance(start, StateExpr) and start.fields & {name}:
        raise tr.error(node, f"{name} is still in the state from an earlier loop; count with another name")
    counter = tr.fresh_field(name)
    tr.bind(name, StateExpr.field(counter))
    try:
        condition = tr.expr(node.test)
    finally:
        tr.bind(name, start)
    if not isinstance(condition, StateExpr):
        raise tr.error(node.test, "a while condition must be a state expression over its counter")
    loop = Loop(counter, start, condition, step, _while_exit(tr, node, name, start, step), visible=name)
    graph_loop(tr, node, loop, node.body[:-1])
    if loop.exit is None:
        tr.bind(name, StateExpr.field(counter))  # the field stays in the state with its final value
    else:
        tr.bind(name, loop.exit)


def _updated_counters(tr: Translator, node: ast.While) -> list[str]:
    names = [_counter_name(stmt) for stmt in scan.walk(node.body)]
    return list(dict.fromkeys(n for n in names if n is not None))


def _counter_name(stmt: ast.AST) -> str | None:
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target.id
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    return None


def _counter_step(stmt: ast.stmt, name: str) -> int | None:
    """The constant k of ``name += k``, ``name -= k``, ``name = name + k`` or ``name = name - k``."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
        op, amount = stmt.op, stmt.value
    elif (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and stmt.targets[0].id == name
        and isinstance(stmt.value, ast.BinOp)
        and isinstance(stmt.value.left, ast.Name)
        and stmt.value.left.id == name
    ):
        op, amount = stmt.value.op, stmt.value.right
    else:
        return None
    if not (isinstance(amount, ast.Constant) and isinstance(amount.value, int) and not isinstance(amount.value, bool)):
        return None
    if isinstance(op, ast.Add):
        return amount.value or None
    if isinstance(op, ast.Sub):
        return -amount.value or None
    return None


def _while_exit(tr: Translator, node: ast.While, name: str, start: Any, step: int) -> Any:
    """The counter's value when a ``while name < bound`` (<=, >, >=) loop ends, or None for other forms."""
    test = node.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if isinstance(right, ast.Name) and right.id == name and not (isinstance(left, ast.Name) and left.id == name):
        left, right = right, left
        op = {ast.Lt: ast.Gt(), ast.Gt: ast.Lt(), ast.LtE: ast.GtE(), ast.GtE: ast.LtE()}.get(type(op), op)
    if not (isinstance(left, ast.Name) and left.id == name) or name in {
        x.id for x in ast.walk(right) if isinstance(x, ast.Name)
    }:
        return None
    bound = tr.expr(right)
    if isinstance(op, ast.LtE | ast.GtE):
        bound = tr.binary(test, ast.Add() if isinstance(op, ast.LtE) else ast.Sub(), bound, 1)
        op = ast.Lt() if isinstance(op, ast.LtE) else ast.Gt()
    if (isinstance(op, ast.Lt) and step > 0) or (isinstance(op, ast.Gt) and step < 0):
        return exit_value(tr, test, start, bound, step)
    return None
