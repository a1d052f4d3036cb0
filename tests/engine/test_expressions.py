"""Native expressions against ``Expression.evaluate`` on random expressions and states (hypothesis).

The oracle is Python itself. Where Python's unbounded ints pass through a value beyond int64 the native
engine stops with its own overflow status instead: a small evaluator here walks the same tree in
Python's order and says where the first such value appears, so the test knows which expressions must
overflow natively and that all others must agree with Python in value, in bool-ness, and in the kind of
error (missing field, division by zero, a wrong number of arguments to min/max/abs).
"""

from __future__ import annotations

import ast

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_notebook import engine
from amp_notebook.engine.expressions import NotNativeError, compile_expression
from amp_notebook.engine.plan import check
from amp_notebook.ir.expr import Expression, ExpressionError
from amp_notebook.ir.message import State
from amp_notebook.ir.ops import Cond, Isu

FIELDS = ("a", "b", "c", "key")
LAYOUT = ("key", "flush", "a", "b", "c")
SLOTS = {n: i for i, n in enumerate(LAYOUT)}
INT64 = 2**63
OK, MISSING, ZERO_DIVISION, OVERFLOW, TYPE_ERROR = range(5)

leaf = st.one_of(
    st.sampled_from((*FIELDS, "zz")),  # zz: a field no state holds
    st.integers(-5, 5).map(str),
    st.sampled_from(["True", "False", "3037000500", "9223372036854775807"]),
)


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(inner, st.sampled_from(["+", "-", "*", "//", "%"]), inner).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})"
    )
    compare = st.lists(st.tuples(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), inner), min_size=1, max_size=3)
    chain = st.tuples(inner, compare).map(lambda t: "(" + t[0] + "".join(f" {o} {x}" for o, x in t[1]) + ")")
    boolean = st.tuples(st.sampled_from([" and ", " or "]), st.lists(inner, min_size=2, max_size=3)).map(
        lambda t: "(" + t[0].join(t[1]) + ")"
    )
    unary = st.tuples(st.sampled_from(["-", "+", "not "]), inner).map(lambda t: f"({t[0]}{t[1]})")
    ifexp = st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})")
    call = st.tuples(st.sampled_from(["min", "max", "abs"]), st.lists(inner, min_size=0, max_size=3)).map(
        lambda t: f"{t[0]}({', '.join(t[1])})"
    )
    return st.one_of(binary, chain, boolean, unary, ifexp, call)


expressions = st.recursive(leaf, _extend, max_leaves=12)
values = st.one_of(st.integers(-6, 6), st.booleans(), st.sampled_from([2**62, -(2**63), 2**63 - 1]))
states = st.fixed_dictionaries({}, optional={f: values for f in FIELDS})


class Int64OverflowError(Exception):
    pass


def _checked(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool) and not -INT64 <= value < INT64:
        raise Int64OverflowError
    return value


def oracle(node: ast.expr, env: dict) -> object:
    """Python's evaluation order and results, stopping (Int64OverflowError) at the first value beyond int64."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise NameError(node.id)
        return env[node.id]
    if isinstance(node, ast.UnaryOp):
        v = oracle(node.operand, env)
        return _checked({ast.USub: lambda: -v, ast.UAdd: lambda: +v, ast.Not: lambda: not v}[type(node.op)]())
    if isinstance(node, ast.BinOp):
        a, b = oracle(node.left, env), oracle(node.right, env)
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: a // b, ast.Mod: lambda: a % b}  # fmt: skip
        return _checked(ops[type(node.op)]())
    if isinstance(node, ast.BoolOp):
        v = None
        for operand in node.values:
            v = oracle(operand, env)
            if (not v) if isinstance(node.op, ast.And) else v:
                return v
        return v
    if isinstance(node, ast.Compare):
        left = oracle(node.left, env)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = oracle(comparator, env)
            if not eval(f"left {type(op).__name__} right".replace("NotEq", "!=").replace("LtE", "<=").replace(
                    "GtE", ">=").replace("Lt", "<").replace("Gt", ">").replace("Eq", "=="),
                    {"left": left, "right": right}):  # fmt: skip
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return oracle(node.body, env) if oracle(node.test, env) else oracle(node.orelse, env)
    if isinstance(node, ast.Call):
        args = [oracle(a, env) for a in node.args]
        return _checked({"min": min, "max": max, "abs": abs}[node.func.id](*args))  # type: ignore[union-attr]
    raise AssertionError(node)


def kind_of(exc: BaseException) -> int:
    if isinstance(exc, NameError) or "reads state field" in str(exc):
        return MISSING
    cause = exc.__cause__ if isinstance(exc, ExpressionError) else exc
    if isinstance(cause, ZeroDivisionError):
        return ZERO_DIVISION
    if isinstance(cause, TypeError):
        return TYPE_ERROR
    raise AssertionError(f"unexpected error {exc!r}")


@settings(max_examples=600, deadline=None)
@given(source=expressions, fields=states)
def test_native_evaluation_equals_python(source: str, fields: dict) -> None:
    native = engine.native()
    expr = Expression(source)
    codec = native.StateCodec(list(LAYOUT), State)
    program = native.Program(np.asarray(compile_expression(expr, SLOTS), dtype=np.int64).reshape(-1, 3), len(LAYOUT))
    state = State(fields)
    status, value, is_bool = program.evaluate(codec, state)
    try:
        expected = oracle(ast.parse(source, mode="eval").body, dict(fields))
    except Int64OverflowError:
        assert status == OVERFLOW, (source, fields)
        return
    except (NameError, ZeroDivisionError, TypeError) as exc:
        with pytest.raises(ExpressionError) as python:
            expr.evaluate(state)
        assert kind_of(python.value) == kind_of(exc)
        assert status == kind_of(exc), (source, fields, status)
        return
    assert expr.evaluate(state) == expected  # the oracle is Python's evaluation
    assert status == OK, (source, fields, status)
    assert value == expected and is_bool == isinstance(expected, bool), (source, fields, value, is_bool, expected)


@pytest.mark.parametrize(
    "source, why",
    [
        ("t / 2", "'/'"),
        ("t < 0.5", "float constant"),
        ("t + 99999999999999999999", "beyond int64"),
        ("min + 1", "function"),
    ],
)
def test_what_the_native_form_cannot_evaluate_is_refused_with_the_reason(source: str, why: str) -> None:
    with pytest.raises(NotNativeError, match=why.replace("(", r"\(")):
        compile_expression(Expression(source), {"t": 2})


def test_a_graph_with_a_float_expression_is_not_native_and_the_reason_names_the_node() -> None:
    support = check(["loop", "halve"], [Cond("t < length"), Isu({"t": "t / 2"}, {"t": "t * 2"})], {"length"})
    assert not support.native
    (reason,) = support.reasons
    assert "Isu 'halve'" in reason and "forward['t']" in reason and "'/'" in reason
    assert check(["loop"], [Cond("t < length")], {"length"}).native


def test_invalid_programs_are_refused_at_the_boundary() -> None:
    native = engine.native()
    for code in ([[1, 9, 0]], [[0, 0, 1], [19, 7, 0]], [[6, 0, 0]], []):  # bad slot, bad jump, underflow, empty
        with pytest.raises(ValueError, match="invalid expression program"):
            native.Program(np.asarray(code, dtype=np.int64).reshape(-1, 3), len(LAYOUT))
