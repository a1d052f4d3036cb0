"""Compile a checked :class:`~amp_notebook.ir.expr.Expression` into the native engine's stack code.

``ir/expr.py`` has already parsed and whitelisted the source; this walks the same tree and emits the
instructions of ``src/expr.h`` (one ``(opcode, arg, value)`` row each), the way CPython compiles the same
tree, so evaluation order, short-circuits and which operand ``and``/``or``/``min``/``max`` return are
Python's own:

* ``a and b``: a, JUMP_IF_FALSE_OR_POP end, b (``or``: JUMP_IF_TRUE_OR_POP);
* ``a < b < c``: a, b, DUP, ROT3, LT, JUMP_IF_FALSE_OR_POP cleanup, c, LT, JUMP end; cleanup: ROT2, POP;
* ``x if c else y``: c, POP_JUMP_IF_FALSE else, x, JUMP end; else: y;
* ``min(...)``/``max(...)`` with two or more arguments: the arguments, then MIN/MAX n; with fewer (and
  ``abs`` with other than one) Python raises TypeError once the arguments are evaluated: the arguments,
  then FAIL.

Names become slot loads through the graph's layout (a name with no slot loads slot -1: a missing field
when evaluated, as in Python). What the native engine cannot evaluate raises :class:`NotNativeError` with the
reason, which the compile step reports: ``/`` (a float), float constants, ints beyond int64, and a
function name used as a value.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping

from amp_notebook.errors import AmpError
from amp_notebook.ir.expr import Expression

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

OPCODES = (
    "const",
    "load",
    "neg",
    "pos",
    "not",
    "abs",
    "add",
    "sub",
    "mul",
    "floordiv",
    "mod",
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
    "min",
    "max",
    "jump",
    "jump_if_false_or_pop",
    "jump_if_true_or_pop",
    "pop_jump_if_false",
    "dup",
    "rot2",
    "rot3",
    "pop",
    "fail",
)  # fmt: skip  (the order of src/expr.h Opcode)
OP = {name: i for i, name in enumerate(OPCODES)}

_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "floordiv", ast.Mod: "mod"}
_COMPARE = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_UNARY = {ast.USub: "neg", ast.UAdd: "pos", ast.Not: "not"}

Code = list[tuple[int, int, int]]


class NotNativeError(AmpError, ValueError):
    """Something the native engine cannot run; the message says what and why (the compile step adds where).
    ``engine="auto"`` falls back to the Python engine on it; ``engine="native"`` raises it."""


def compile_expression(expr: Expression, slots: Mapping[str, int]) -> Code:
    """The stack code of ``expr`` with field names resolved through ``slots``; raises :class:`NotNativeError`."""
    code: Code = []
    _Emitter(expr.source, slots, code).visit(ast.parse(expr.source.strip(), mode="eval").body)
    return code


class _Emitter:
    def __init__(self, source: str, slots: Mapping[str, int], code: Code) -> None:
        self.source = source
        self.slots = slots
        self.code = code

    def emit(self, op: str, arg: int = 0, value: int = 0) -> int:
        self.code.append((OP[op], arg, value))
        return len(self.code) - 1

    def patch(self, at: int, target: int) -> None:
        op, _, value = self.code[at]
        self.code[at] = (op, target, value)

    def refuse(self, why: str) -> NotNativeError:
        return NotNativeError(
            f"expression {self.source!r} {why}; the native engine evaluates state expressions over int64"
        )

    def visit(self, node: ast.expr) -> None:  # one branch per syntax node of the whitelist
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool):
                self.emit("const", 1, int(value))
            elif isinstance(value, int):
                if not INT64_MIN <= value <= INT64_MAX:
                    raise self.refuse(f"holds the constant {value}, beyond int64")
                self.emit("const", 0, value)
            else:
                raise self.refuse(f"holds the float constant {value!r}")
        elif isinstance(node, ast.Name):
            if node.id in ("min", "max", "abs"):
                raise self.refuse(f"uses the function {node.id!r} as a value")
            self.emit("load", self.slots.get(node.id, -1))
        elif isinstance(node, ast.UnaryOp):
            self.visit(node.operand)
            self.emit(_UNARY[type(node.op)])
        elif isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Div):
                raise self.refuse("divides with '/', which gives a float (use '//' for an int)")
            self.visit(node.left)
            self.visit(node.right)
            self.emit(_BINARY[type(node.op)])
        elif isinstance(node, ast.BoolOp):
            jump = "jump_if_false_or_pop" if isinstance(node.op, ast.And) else "jump_if_true_or_pop"
            pending = []
            for value in node.values[:-1]:
                self.visit(value)
                pending.append(self.emit(jump))
            self.visit(node.values[-1])
            for at in pending:
                self.patch(at, len(self.code))
        elif isinstance(node, ast.Compare):
            self._compare(node)
        elif isinstance(node, ast.IfExp):
            self.visit(node.test)
            to_else = self.emit("pop_jump_if_false")
            self.visit(node.body)
            to_end = self.emit("jump")
            self.patch(to_else, len(self.code))
            self.visit(node.orelse)
            self.patch(to_end, len(self.code))
        elif isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name)  # the checker allowed only min/max/abs
            for arg in node.args:
                self.visit(arg)
            name, n = node.func.id, len(node.args)
            if name == "abs" and n == 1:
                self.emit("abs")
            elif name in ("min", "max") and n >= 2:
                self.emit(name, n)
            else:
                self.emit("fail", n)
        else:  # the checker's whitelist has nothing else
            raise self.refuse(f"holds {type(node).__name__}")

    def _compare(self, node: ast.Compare) -> None:
        self.visit(node.left)
        cleanups = []
        for op, comparator in zip(node.ops[:-1], node.comparators[:-1], strict=True):
            self.visit(comparator)
            self.emit("dup")
            self.emit("rot3")
            self.emit(_COMPARE[type(op)])
            cleanups.append(self.emit("jump_if_false_or_pop"))
        self.visit(node.comparators[-1])
        self.emit(_COMPARE[type(node.ops[-1])])
        if cleanups:
            to_end = self.emit("jump")
            for at in cleanups:
                self.patch(at, len(self.code))
            self.emit("rot2")
            self.emit("pop")
            self.patch(to_end, len(self.code))


__all__ = ["OPCODES", "NotNativeError", "compile_expression"]
