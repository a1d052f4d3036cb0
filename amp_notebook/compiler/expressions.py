"""Expressions in a model function: constants folded, state values built up, payload values refused where
they would steer control flow, calls handed to ``calls.py``.

A mixin of :class:`~amp_notebook.compiler.translate.Translator` (which supplies scopes, names and errors):
``expr(node)`` gives the compile-time value of any expression. Constants are folded with plain arithmetic
on ints, floats, strings and tuples, with sizes bounded so folding cannot run away; expressions over state
values become expression trees for the safe expression language of Cond predicates and Isu updates;
``+ - *`` between tensors become Add, Sub and Mul nodes.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amp_notebook.compiler.source import MISSING, Source, is_amp_module, is_constant, module_attribute
from amp_notebook.compiler.values import Opaque, SequenceInput, StateExpr, Tensor

if TYPE_CHECKING:
    from amp_notebook.compiler.errors import CompileError

MAX_FOLDED_LENGTH = 100_000  # a folded string or tuple longer than this is refused (no run-away folding)

REFUSED_EXPRESSIONS = {
    "Lambda": "lambda is not compiled; write a nested def (it is inlined where it is called)",
    "ListComp": "list comprehensions are not compiled; write a for loop (nn.unroll(n) for a fixed count)",
    "SetComp": "set comprehensions are not compiled",
    "DictComp": "dict comprehensions are not compiled",
    "GeneratorExp": "generator expressions are not compiled; write a for loop",
    "Yield": "yield makes a generator: a model function builds a graph and returns its losses",
    "YieldFrom": "yield from makes a generator: a model function builds a graph and returns its losses",
    "Await": "await is not compiled: a model is plain, synchronous code",
    "NamedExpr": "':=' is not compiled; assign on its own line",
    "Set": "set displays are not compiled",
    "Slice": "slices are only compiled on tuples of constants",
}
_FOLD: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_STATE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
_TENSOR_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul"}


class Expressions:
    """``expr`` and its helpers; mixed into the Translator."""

    source: Source

    if TYPE_CHECKING:

        def error(self, node: ast.AST | None, message: str) -> CompileError: ...
        def lookup(self, name: str, where: ast.AST) -> Any: ...
        def binding(self, name: str) -> Any: ...
        def classify(self, name: str, value: Any, where: ast.AST) -> Any: ...

    def expr(self, node: ast.expr) -> Any:
        handler = getattr(self, f"_expr_{type(node).__name__}", None)
        if handler is None:
            message = REFUSED_EXPRESSIONS.get(type(node).__name__, f"{type(node).__name__} is not compiled")
            raise self.error(node, message)
        return handler(node)

    def _expr_Constant(self, node: ast.Constant) -> Any:  # noqa: N802
        if not is_constant(node.value):
            raise self.error(node, f"constants of type {type(node.value).__name__} are not compiled")
        return node.value

    def _expr_Name(self, node: ast.Name) -> Any:  # noqa: N802
        value = self.lookup(node.id, node)
        if isinstance(value, Opaque):
            raise self.error(node, value.why)
        return value

    def _expr_Tuple(self, node: ast.Tuple) -> tuple[Any, ...]:  # noqa: N802
        return tuple(self.sequence(node.elts))

    def _expr_List(self, node: ast.List) -> list[Any]:  # noqa: N802
        return self.sequence(node.elts)

    def _expr_Dict(self, node: ast.Dict) -> dict[str, Any]:  # noqa: N802
        out: dict[str, Any] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            k = self.expr(key) if key is not None else None
            v = self.expr(value)
            if not isinstance(k, str) or not is_constant(v):
                raise self.error(node, "dicts are compiled only with string keys and constant values (optimizer=...)")
            out[k] = v
        return out

    def sequence(self, elts: list[ast.expr]) -> list[Any]:
        out: list[Any] = []
        for e in elts:
            if isinstance(e, ast.Starred):
                value = self.expr(e.value)
                if not isinstance(value, tuple | list):
                    raise self.error(e, "only tuples and lists can be unpacked with *")
                out.extend(value)
            else:
                out.append(self.expr(e))
        return out

    def _expr_JoinedStr(self, node: ast.JoinedStr) -> str:  # noqa: N802
        parts = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                parts.append(str(part.value))
                continue
            assert isinstance(part, ast.FormattedValue)
            value = self.expr(part.value)
            if not is_constant(value):
                raise self.error(part, "f-strings are compiled only over constants (a name built from a loop index)")
            spec = self.expr(part.format_spec) if part.format_spec is not None else ""
            if part.conversion == ord("r"):
                value = repr(value)
            elif part.conversion == ord("s"):
                value = str(value)
            parts.append(format(value, spec))
        return self.bounded(node, "".join(parts))

    def _expr_Attribute(self, node: ast.Attribute) -> Any:  # noqa: N802
        base = self.expr(node.value)
        from amp_notebook.compiler.recursion import tree_attribute
        from amp_notebook.compiler.values import TreeNode

        if isinstance(base, TreeNode):
            return tree_attribute(self, node, base)
        if is_amp_module(base):
            value = module_attribute(base, node.attr)
            if value is MISSING:
                raise self.error(node, f"{base.__name__} has no attribute {node.attr!r}")
            return self.classify(f"{base.__name__}.{node.attr}", value, node)
        if isinstance(base, Tensor):
            raise self.error(
                node,
                f"{self.source.snippet(node)}: tensor attributes are not known at compile time (payloads exist only "
                "when the graph runs); widths are known: nn.linear infers in_features",
            )
        raise self.error(node, f"attribute {node.attr!r} of {type(base).__name__} values is not compiled")

    def _expr_Subscript(self, node: ast.Subscript) -> Any:  # noqa: N802
        from amp_notebook.compiler.loops import indexed_row

        base = self.expr(node.value)
        if isinstance(base, Tensor | SequenceInput):
            return indexed_row(self, node)
        index = self.expr(node.slice) if not isinstance(node.slice, ast.Slice) else self.slice(node.slice)
        if isinstance(base, tuple | list | str) and isinstance(index, int | slice) and not isinstance(index, bool):
            try:
                return base[index]
            except IndexError:
                raise self.error(node, f"index {index} is out of range for {len(base)} items") from None
        raise self.error(node, f"indexing a {type(base).__name__} with {type(index).__name__} is not compiled")

    def slice(self, node: ast.Slice) -> slice:
        parts = [None if p is None else self.expr(p) for p in (node.lower, node.upper, node.step)]
        if not all(p is None or (isinstance(p, int) and not isinstance(p, bool)) for p in parts):
            raise self.error(node, "slice bounds must be integer constants")
        return slice(*parts)

    def _expr_BinOp(self, node: ast.BinOp) -> Any:  # noqa: N802
        return self.binary(node, node.op, self.expr(node.left), self.expr(node.right))

    def binary(self, node: ast.AST, op: ast.operator, a: Any, b: Any) -> Any:
        symbol = _symbol(op)
        if isinstance(a, Tensor) or isinstance(b, Tensor):
            from amp_notebook.compiler.vocabulary import elementwise_join

            if isinstance(a, Tensor) and isinstance(b, Tensor) and type(op) in _TENSOR_OPS:
                return elementwise_join(self, node, _TENSOR_OPS[type(op)], a, b)
            if type(op) is ast.MatMult:
                raise self.error(
                    node, "'@' is written nn.linear(x, out_features, name=...): the weights are the node's"
                )
            if type(op) in _TENSOR_OPS:
                raise self.error(
                    node,
                    f"'{symbol}' between a tensor and a {type(b if isinstance(a, Tensor) else a).__name__} has no IR "
                    "op; tensors combine with tensors (a constant factor belongs in a Linear's weights)",
                )
            raise self.error(node, f"'{symbol}' on tensors has no IR op; + - * work elementwise between tensors")
        if isinstance(a, StateExpr) or isinstance(b, StateExpr):
            if type(op) not in _STATE_OPS:
                raise self.error(node, f"'{symbol}' is not in the state expression language (+ - * / // % only)")
            return StateExpr(ast.BinOp(self.state_node(node, a), op, self.state_node(node, b)), _fields(a) | _fields(b))
        if not (is_constant(a) or isinstance(a, list)) or not (is_constant(b) or isinstance(b, list)):
            raise self.error(node, f"'{symbol}' on {type(a).__name__} and {type(b).__name__} is not compiled")
        fold = _FOLD.get(type(op))
        if fold is None:
            raise self.error(node, f"'{symbol}' on constants is not compiled")
        if type(op) is ast.Pow and not (
            isinstance(a, int | float) and isinstance(b, int) and abs(b) <= 64 and abs(a) <= 2**32
        ):
            raise self.error(node, "'**' is folded only with an integer exponent <= 64 and a base <= 2**32")
        if type(op) is ast.Mult:
            items, count = (a, b) if isinstance(a, str | tuple | list) else (b, a)
            if (
                isinstance(items, str | tuple | list)
                and isinstance(count, int)
                and count * len(items) > MAX_FOLDED_LENGTH
            ):
                raise self.error(node, f"a folded constant longer than {MAX_FOLDED_LENGTH} items is refused")
        try:
            return self.bounded(node, fold(a, b))
        except (TypeError, ZeroDivisionError, OverflowError) as exc:
            raise self.error(node, f"cannot fold {self.source.snippet(node)!r}: {exc}") from None

    def bounded(self, node: ast.AST, value: Any) -> Any:
        if isinstance(value, str | tuple | list) and len(value) > MAX_FOLDED_LENGTH:
            raise self.error(node, f"a folded constant longer than {MAX_FOLDED_LENGTH} items is refused")
        return value

    def state_node(self, node: ast.AST, value: Any) -> ast.expr:
        """A state expression or a number as an expression tree."""
        if isinstance(value, StateExpr):
            return value.node
        if isinstance(value, bool | int | float) and value is not None:
            return ast.Constant(value)
        raise self.error(node, f"a {type(value).__name__} cannot take part in a state expression (ints only)")

    def _expr_UnaryOp(self, node: ast.UnaryOp) -> Any:  # noqa: N802
        value = self.expr(node.operand)
        if isinstance(value, Tensor):
            raise self.error(node, f"unary '{_symbol(node.op)}' on a tensor has no IR op; use nn.sub(a, b)")
        if isinstance(value, StateExpr):
            if isinstance(node.op, ast.Invert):
                raise self.error(node, "'~' is not in the state expression language")
            return StateExpr(ast.UnaryOp(node.op, value.node), value.fields)
        if not is_constant(value):
            raise self.error(node, f"unary '{_symbol(node.op)}' on {type(value).__name__} is not compiled")
        unary = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}
        try:
            return unary[type(node.op)](value)
        except TypeError as exc:
            raise self.error(node, f"cannot fold: {exc}") from None

    def _expr_Compare(self, node: ast.Compare) -> Any:  # noqa: N802
        values = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
        tensors = [v for v in values if isinstance(v, Tensor)]
        if tensors:
            raise self.error(
                node,
                f"{self.source.snippet(node)!r} compares a tensor's values, which exist only when the graph runs; "
                "control flow may depend on state values (loop counters, len(seq), declared fields), not payloads",
            )
        if any(isinstance(v, StateExpr) for v in values):
            if not all(type(o) in _COMPARE for o in node.ops):
                raise self.error(node, "only == != < <= > >= compare state values")
            parts = [self.state_node(node, v) for v in values]
            fields = frozenset().union(*[_fields(v) for v in values])
            return StateExpr(ast.Compare(parts[0], list(node.ops), parts[1:]), fields)
        result = True
        for op, a, b in zip(node.ops, values, values[1:], strict=False):
            compare = _COMPARE.get(type(op))
            if compare is None or not (is_constant(a) and is_constant(b)):
                raise self.error(node, f"{self.source.snippet(node)!r} is not a comparison of constants")
            try:
                result = compare(a, b)
            except TypeError as exc:
                raise self.error(node, f"cannot compare: {exc}") from None
            if not result:
                return False
        return result

    def _expr_BoolOp(self, node: ast.BoolOp) -> Any:  # noqa: N802
        values = [self.expr(v) for v in node.values]
        if any(isinstance(v, Tensor) for v in values):
            raise self.error(node, f"{self.source.snippet(node)!r}: 'and'/'or' on tensors is payload-dependent")
        if any(isinstance(v, StateExpr) for v in values):
            parts = [self.state_node(node, v) for v in values]
            return StateExpr(ast.BoolOp(node.op, parts), frozenset().union(*[_fields(v) for v in values]))
        result = values[0]
        for v in values[1:]:
            if (isinstance(node.op, ast.And) and not result) or (isinstance(node.op, ast.Or) and result):
                return result
            result = v
        return result

    def _expr_IfExp(self, node: ast.IfExp) -> Any:  # noqa: N802
        test = self.condition(node.test, "a conditional expression")
        if not isinstance(test, StateExpr):
            return self.expr(node.body if test else node.orelse)
        body, orelse = self.expr(node.body), self.expr(node.orelse)
        if isinstance(body, Tensor) or isinstance(orelse, Tensor):
            raise self.error(
                node,
                "a conditional expression on a state value picks between numbers only; "
                "for tensors write an if statement (it becomes a Cond and a Phi)",
            )
        fields = test.fields | _fields(body) | _fields(orelse)
        return StateExpr(ast.IfExp(test.node, self.state_node(node, body), self.state_node(node, orelse)), fields)

    def condition(self, node: ast.expr, what: str) -> Any:
        """Evaluate the test of an if/while/conditional expression, refusing tests on payload values."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                bound = self.binding(sub.id)
                if isinstance(bound, Tensor):
                    raise self.error(
                        node,
                        f"{self.source.snippet(node)!r} in {what} branches on a tensor value ({sub.id}), which exists "
                        "only when the graph runs: payload-dependent control flow is not in the IR. Branch on a state "
                        "value such as a loop counter, len(seq) or an nn.Field (if t == 0:), or compute both sides "
                        "and mix them with a learned gate (g = nn.sigmoid(...); g * a + b), which needs no branch",
                    )
        return self.expr(node)

    def _callee_value(self, node: ast.Call) -> Any:
        return self.binding(node.func.id) if isinstance(node.func, ast.Name) else None

    def _expr_Call(self, node: ast.Call) -> Any:  # noqa: N802
        from amp_notebook.compiler.calls import call

        return call(self, node)


def _fields(value: Any) -> frozenset[str]:
    return value.fields if isinstance(value, StateExpr) else frozenset()


def _symbol(op: ast.AST) -> str:
    symbols = {
        ast.Add: "+",
        ast.Sub: "-",
        ast.Mult: "*",
        ast.Div: "/",
        ast.FloorDiv: "//",
        ast.Mod: "%",
        ast.Pow: "**",
        ast.MatMult: "@",
        ast.LShift: "<<",
        ast.RShift: ">>",
        ast.BitOr: "|",
        ast.BitAnd: "&",
        ast.BitXor: "^",
        ast.USub: "-",
        ast.UAdd: "+",
        ast.Not: "not",
        ast.Invert: "~",
    }
    return symbols.get(type(op), type(op).__name__)
