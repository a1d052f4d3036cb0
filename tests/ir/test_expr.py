"""The safe expression language of Cond predicates, Isu updates and Group counts."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_notebook.ir.expr import Expression, ExpressionError
from amp_notebook.ir.message import State

STATE = {"t": 3, "length": 5, "key": 7, "n": -2}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("t + 1", 4),
        ("t - length", -2),
        ("t * length + key", 22),
        ("length / 2", 2.5),
        ("key // 2", 3),
        ("key % 4", 3),
        ("n % 3", 1),
        ("n // 3", -1),
        ("-t", -3),
        ("+n", -2),
        ("(t + 1) * (length - 1)", 16),
        ("1.5 * t", 4.5),
        ("t < length", True),
        ("t <= 3", True),
        ("t > length", False),
        ("t >= 4", False),
        ("t == 3", True),
        ("t != 3", False),
        ("0 <= t < length", True),
        ("0 <= t < length < key", True),
        ("t < length and key > 10", False),
        ("t > length or key > 5", True),
        ("not t < length", False),
        ("not (t > length or n > 0)", True),
        ("True and t", 3),
        ("False or 0", 0),
        ("t if t < length else length", 3),
        ("1 if key % 2 == 0 else 2", 2),
        ("min(t, length)", 3),
        ("max(t, length, key)", 7),
        ("abs(n)", 2),
        ("min(abs(n), t)", 2),
        ("max(0, min(t + 4, length))", 5),
    ],
)
def test_evaluates_like_python(source: str, expected: object) -> None:
    e = Expression(source)
    got = e.evaluate(STATE)
    assert got == expected
    assert type(got) is type(expected)


def test_reads_a_state_record_and_lists_its_names() -> None:
    e = Expression("t < length and max(t, 0) >= 0")
    assert e.names == frozenset({"t", "length"})  # min/max/abs are functions, not fields
    assert e.evaluate(State(key=0, t=1, length=4)) is True


def test_equality_and_hash_follow_the_source() -> None:
    assert Expression("t + 1") == Expression("t + 1")
    assert hash(Expression("t + 1")) == hash(Expression("t + 1"))
    assert Expression("t + 1") != Expression("t+1")
    assert repr(Expression("t")) == "Expression('t')"


@pytest.mark.parametrize(
    ("source", "match"),
    [
        # powers: t ** t ** t could run for ever
        ("2 ** t", "Pow is not allowed"),
        # calls of anything but min/max/abs
        ("open('x')", "only calls of"),
        ("__import__('os')", "only calls of"),
        ("print(t)", "only calls of"),
        ("eval('1')", "only calls of"),
        ("t(1)", "only calls of"),
        ("min(t, key=length)", "keyword arguments"),
        ("max(*t)", "Starred is not allowed"),
        # attributes, subscripts, dunders
        ("t.real", "Attribute is not allowed"),
        ("().__class__", "Attribute is not allowed"),
        ("min.__self__", "Attribute is not allowed"),
        ("(1).__class__.__bases__", "Attribute is not allowed"),
        ("t[0]", "Subscript is not allowed"),
        ("t[1:2]", "Subscript is not allowed"),
        ("__builtins__", "names starting with '_'"),
        ("__import__", "names starting with '_'"),
        ("_private + 1", "names starting with '_'"),
        # lambdas, comprehensions, containers, assignment expressions
        ("lambda: 1", "Lambda is not allowed"),
        ("(lambda x: x)(1)", "only calls of"),
        ("[x for x in t]", "ListComp is not allowed"),
        ("{x for x in t}", "SetComp is not allowed"),
        ("{x: 1 for x in t}", "DictComp is not allowed"),
        ("sum(x for x in t)", "only calls of"),
        ("(x for x in t)", "GeneratorExp is not allowed"),
        ("[1, 2]", "List is not allowed"),
        ("(1, 2)", "Tuple is not allowed"),
        ("{'a': 1}", "Dict is not allowed"),
        ("(t := 1)", "NamedExpr is not allowed"),
        # constants other than int/float/bool
        ("'abc'", "only int, float and bool constants"),
        ("t == 'abc'", "only int, float and bool constants"),
        ("b'x'", "only int, float and bool constants"),
        ("None", "only int, float and bool constants"),
        ("...", "only int, float and bool constants"),
        ("1j", "only int, float and bool constants"),
        ("f'{t}'", "JoinedStr is not allowed"),
        # other operators outside the whitelist
        ("t << 2", "LShift is not allowed"),
        ("t & 1", "BitAnd is not allowed"),
        ("~t", "Invert is not allowed"),
        ("t is length", "Is is not allowed"),
        ("t in length", "In is not allowed"),
        ("t @ t", "MatMult is not allowed"),
    ],
)
def test_refuses_everything_outside_the_language(source: str, match: str) -> None:
    with pytest.raises(ExpressionError, match=match) as info:
        Expression(source)
    assert repr(source) in str(info.value), "the message quotes the offending expression"


@pytest.mark.parametrize("source", ["", "t +", "import os", "x = 1", "t; 1", "def f(): pass"])
def test_refuses_what_is_not_a_single_expression(source: str) -> None:
    with pytest.raises(ExpressionError, match="not a valid expression"):
        Expression(source)


@pytest.mark.parametrize("source", [None, 3, b"t", ["t"]])
def test_refuses_non_strings(source: object) -> None:
    with pytest.raises(ExpressionError, match="expected an expression string"):
        Expression(source)  # type: ignore[arg-type]


def test_builtins_are_out_of_reach_at_evaluation() -> None:
    # a name that looks like a builtin is only ever a state field
    e = Expression("open + len")
    assert e.names == frozenset({"open", "len"})
    with pytest.raises(ExpressionError, match="open"):
        e.evaluate({})
    assert e.evaluate({"open": 1, "len": 2}) == 3


def test_missing_field_names_the_field_and_the_fields_present() -> None:
    e = Expression("t < length")
    with pytest.raises(ExpressionError) as info:
        e.evaluate(State(key=0, t=1))
    message = str(info.value)
    assert "['length']" in message
    assert "['key', 't']" in message
    assert "'t < length'" in message


def test_arithmetic_failure_is_an_expression_error() -> None:
    with pytest.raises(ExpressionError, match="failed on state"):
        Expression("t // n").evaluate({"t": 1, "n": 0})
    with pytest.raises(ExpressionError, match="ZeroDivisionError"):
        Expression("t % n").evaluate({"t": 1, "n": 0})


# ----------------------------------------------------------------------------------- property test
FIELDS = ("a", "b", "c", "t")

leaves = st.one_of(st.sampled_from(FIELDS), st.integers(-20, 20).map(str), st.sampled_from(["True", "False"]))


def _extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(
        children, st.sampled_from(["+", "-", "*", "/", "//", "%", "<", "<=", ">", ">=", "==", "!="]), children
    )
    return st.one_of(
        binary.map(lambda x: f"({x[0]} {x[1]} {x[2]})"),
        st.tuples(children, st.sampled_from(["and", "or"]), children).map(lambda x: f"({x[0]} {x[1]} {x[2]})"),
        children.map(lambda x: f"(not {x})"),
        children.map(lambda x: f"(-{x})"),
        st.tuples(children, children, children).map(lambda x: f"({x[0]} if {x[1]} else {x[2]})"),
        st.tuples(st.sampled_from(["min", "max"]), st.lists(children, min_size=1, max_size=3)).map(
            lambda x: f"{x[0]}({', '.join(x[1])})" if len(x[1]) > 1 else f"{x[0]}({x[1][0]}, 0)"
        ),
        children.map(lambda x: f"abs({x})"),
    )


expressions = st.recursive(leaves, _extend, max_leaves=12)
states = st.fixed_dictionaries({name: st.integers(-1000, 1000) for name in FIELDS})


@settings(max_examples=300, deadline=None)
@given(source=expressions, fields=states)
def test_property_agrees_with_python(source: str, fields: dict[str, int]) -> None:
    expected_error = None
    try:
        expected = eval(source, {"min": min, "max": max, "abs": abs}, dict(fields))
    except ZeroDivisionError as exc:
        expected_error = exc
    e = Expression(source)
    assert e.names <= set(FIELDS)
    if expected_error is not None:
        with pytest.raises(ExpressionError, match="ZeroDivisionError"):
            e.evaluate(State(key=0, **fields))
        return
    got = e.evaluate(State(key=0, **fields))
    assert got == expected
    assert type(got) is type(expected)


# ------------------------------------------------------------------------------------- size and depth limits
@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("-" * 100_000 + "1", r"expected at most 1000 characters, found 100001"),
        ("+".join(["t"] * 200_000), r"expected at most 1000 characters, found 399999"),
        ("x" * 1001, r"expected at most 1000 characters, found 1001"),
        ("-" * 900 + "1", r"expected at most 50 levels of nesting, found 902 levels"),
        ("+".join(["t"] * 60), r"expected at most 50 levels of nesting, found 6\d levels"),
        ("(" * 300 + "t" + ")" * 300, r"expected at most 50 levels of nesting, found more than 50 nested brackets"),
        ("[" * 60, r"more than 50 nested brackets"),
        ("not " * 240 + "t", r"levels of nesting"),
        ("t < length\x00", r"not a valid expression"),
        ("\ud800", r"not a valid expression"),
    ],
)
def test_huge_or_deep_expressions_are_expression_errors_never_memory_or_recursion_errors(
    source: str, match: str
) -> None:
    """Python's parser gives up on such input with MemoryError or RecursionError; ours never reaches it."""
    with pytest.raises(ExpressionError, match=match) as info:
        Expression(source)
    assert len(str(info.value)) < 500, "the message quotes a long expression in full"


def test_expressions_within_the_limits_still_work() -> None:
    assert Expression("+".join(["t"] * 45)).evaluate({"t": 2}) == 90
    assert Expression("-" * 40 + "t").evaluate({"t": 2}) == 2
    assert Expression(" and ".join(["t"] * 150)).evaluate({"t": 1}) == 1  # and/or chains are flat
    assert Expression("1" * 999).evaluate({}) == int("1" * 999)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="t+-*/%()<>=!andornot 0123456789.,[]{}_\x00", max_size=1200))
def test_any_text_is_an_expression_or_an_expression_error(source: str) -> None:
    try:
        expression = Expression(source)
    except ExpressionError:
        return
    with contextlib.suppress(ExpressionError):
        expression.evaluate({"t": 3})
