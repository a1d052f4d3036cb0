"""A small safe expression language over state fields.

Cond predicates and Isu updates must serialize to JSON without code, and nothing a user types may run
arbitrary Python. Expressions are parsed with :mod:`ast` and checked against a whitelist: names (state
fields), int/float/bool constants, arithmetic, comparisons, boolean logic, ``x if c else y`` and calls of
``min``, ``max``, ``abs`` only. No ``**`` (``t ** t ** t`` would stall a run), no attributes,
subscripts, dunders, lambdas or other calls. A checked tree is compiled once; evaluation sees only the
state's fields and the three allowed functions.

Size is bounded before anything is parsed: at most ``MAX_LENGTH`` characters, and a syntax tree at most
``MAX_DEPTH`` levels deep (measured without recursion). Python's own parser and compiler recurse on nested
input and give up with ``MemoryError`` or ``RecursionError`` (``'-' * 100000 + '1'``, a 200,000-term sum),
which would say nothing useful and could take the kernel with them; here such input is an
:class:`ExpressionError` like any other, and the parser never sees it.

>>> e = Expression("t < length")
>>> e.evaluate({"t": 2, "length": 5})
True
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from amp_notebook.errors import AmpError

ALLOWED_FUNCTIONS: dict[str, Any] = {"min": min, "max": max, "abs": abs}
MAX_LENGTH = 1000  # characters; the graph JSON Schema (ir/graph.schema.json) caps expression strings the same
MAX_DEPTH = 50  # levels of the syntax tree: ``t + 1 + 1 + ...`` nests one level per term

_ALLOWED_NODES = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div,
    ast.FloorDiv, ast.Mod, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd, ast.Compare, ast.Eq,
    ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Name, ast.Load, ast.Constant, ast.IfExp, ast.Call,
)  # fmt: skip


class ExpressionError(AmpError, ValueError):
    """An expression that is not in the safe language, or that failed to evaluate."""


class Expression:
    """A checked, compiled expression over state fields."""

    __slots__ = ("_code", "_globals", "names", "source")

    def __init__(self, source: str) -> None:
        if not isinstance(source, str):
            raise ExpressionError(f"expected an expression string, got {type(source).__name__}")
        self.source = source
        if len(source) > MAX_LENGTH:
            raise ExpressionError(
                f"{_short(source)}: expected at most {MAX_LENGTH} characters, found {len(source)}; an expression "
                "over state fields is short (such as 't < length'): compute long formulas in the data instead"
            )
        if _bracket_depth(source) > MAX_DEPTH:
            raise ExpressionError(_too_deep(source, f"more than {MAX_DEPTH} nested brackets"))
        try:
            tree = ast.parse(source.strip(), mode="eval")
        except SyntaxError as exc:
            raise ExpressionError(f"{source!r} is not a valid expression: {exc.msg}") from None
        except ValueError as exc:  # null bytes or lone surrogates in the text
            raise ExpressionError(f"{_short(source)} is not a valid expression: {exc}") from None
        except (RecursionError, MemoryError):  # nesting the bracket count cannot see, such as '- - - ... 1'
            raise ExpressionError(_too_deep(source, "too deeply nested for the parser")) from None
        depth = _tree_depth(tree)
        if depth > MAX_DEPTH:
            raise ExpressionError(_too_deep(source, f"{depth} levels of nesting"))
        names: set[str] = set()
        for node in ast.walk(tree):
            _check_node(source, node, names)
        self.names = frozenset(names)
        self._code = compile(tree, "<amp-expression>", "eval")
        self._globals = {"__builtins__": {}, **ALLOWED_FUNCTIONS}

    def evaluate(self, fields: Mapping[str, Any]) -> Any:
        """The value on ``fields`` (a State or any mapping of field names to values)."""
        # a State lends its own dict of fields: nothing is copied on the runtime's hot path
        env = fields._fields if hasattr(fields, "_fields") else dict(fields)  # type: ignore[attr-defined]
        try:
            return eval(self._code, self._globals, env)  # checked tree, no builtins
        except NameError:
            missing = sorted(self.names - env.keys())
            raise ExpressionError(
                f"{self.source!r} reads state field(s) {missing} but the state has only "
                f"{sorted(env)}; add the field upstream (Batch.fields or an Isu) or change the expression"
            ) from None
        except Exception as exc:  # arithmetic errors such as division by zero
            raise ExpressionError(f"{self.source!r} failed on state {dict(env)}: {exc!r}") from exc

    def __repr__(self) -> str:
        return f"Expression({self.source!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expression) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)


def _short(source: str) -> str:
    return repr(source) if len(source) <= 60 else f"{source[:40]!r}... ({len(source)} characters)"


def _too_deep(source: str, found: str) -> str:
    return (
        f"{_short(source)}: expected at most {MAX_DEPTH} levels of nesting, found {found}; write a shorter "
        "expression (a long sum or chain of signs nests one level per term)"
    )


def _bracket_depth(source: str) -> int:
    depth = deepest = 0
    for char in source:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth -= 1
    return deepest


def _tree_depth(tree: ast.AST) -> int:
    """Depth of a syntax tree, walked with an explicit stack (a recursive walk would overflow first)."""
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _check_node(source: str, node: ast.AST, names: set[str]) -> None:
    if not isinstance(node, _ALLOWED_NODES):
        raise ExpressionError(
            f"{source!r}: {type(node).__name__} is not allowed; expressions may use state fields, numbers, "
            "+ - * / // %, comparisons, and/or/not, 'a if c else b' and min/max/abs (no ** so no expression can "
            "run for long)"
        )
    if isinstance(node, ast.Name):
        if node.id.startswith("_"):
            raise ExpressionError(f"{source!r}: names starting with '_' are not allowed (found {node.id!r})")
        if node.id not in ALLOWED_FUNCTIONS:
            names.add(node.id)
    elif isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, bool)):
            raise ExpressionError(f"{source!r}: only int, float and bool constants are allowed, found {node.value!r}")
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in ALLOWED_FUNCTIONS:
            raise ExpressionError(
                f"{source!r}: only calls of {sorted(ALLOWED_FUNCTIONS)} are allowed, found {ast.unparse(node.func)}"
            )
        if node.keywords:
            raise ExpressionError(f"{source!r}: keyword arguments are not allowed in calls")
