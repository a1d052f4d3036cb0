"""The translator: reads a model function's AST statement by statement and builds its graph as it goes.

Every Python name holds a compile-time value (``values.py``): a constant, a payload stream (a
:class:`Tensor`: an output port of the draft graph), a state expression, an input, a loss. Straight-line
code is symbolic execution: ``h = nn.relu(nn.linear(x, 64))`` adds two nodes and binds ``h`` to the ReLU's
output. Control flow is where the IR differs from Python, and each construct has its own module:
``loops.py`` (for, while), ``branches.py`` (if), ``recursion.py`` (a function calling itself on
``t.left`` and ``t.right``); ``vocabulary.py`` turns ``amp.nn`` calls into nodes.

Nothing from the user's module runs: names are looked up (``source.py``), constants are folded here with
plain arithmetic on ints, floats, strings and tuples (sizes bounded, so folding cannot run away), and every
construct outside the vocabulary is refused with the line and what to write instead.
"""

from __future__ import annotations

import ast
import operator
import types
from collections.abc import Callable
from typing import Any

from amp_notebook.compiler import nn
from amp_notebook.compiler.draft import DraftGraph
from amp_notebook.compiler.errors import CompileError
from amp_notebook.compiler.source import (
    BUILTINS,
    INPUT_TYPE_IDS,
    MISSING,
    VOCABULARY_IDS,
    Source,
    is_amp_module,
    is_constant,
    module_attribute,
)
from amp_notebook.compiler.values import (
    Builtin,
    LocalFunction,
    Loss,
    Opaque,
    SequenceInput,
    StateExpr,
    Tensor,
    Undefined,
    Vocab,
)
from amp_notebook.ir.graph import GraphError, Node, Ref
from amp_notebook.ir.ops.base import Op, OpError

MAX_FOLDED_LENGTH = 100_000  # a folded string or tuple longer than this is refused (no run-away folding)

REFUSED_STATEMENTS = {
    "Try": "try/except is not compiled: a graph has no exceptions (errors show when it runs); remove it",
    "TryStar": "try/except* is not compiled: a graph has no exceptions; remove it",
    "With": "'with' blocks are not compiled (they run code on entry and exit); move that code out of the model",
    "AsyncWith": "'async with' is not compiled: a model is plain, synchronous code",
    "AsyncFor": "'async for' is not compiled: a model is plain, synchronous code",
    "AsyncFunctionDef": "async functions are not compiled: a model is plain, synchronous code",
    "Raise": "raise is not compiled; check sizes with 'assert' on constants, or remove it",
    "Global": "'global' is not compiled: a model may not change names outside itself; return losses instead",
    "Nonlocal": "'nonlocal' is not compiled: a model may not change names outside itself; return values instead",
    "Delete": "del is not compiled; stop using the name instead",
    "Import": "imports inside the model are not compiled; import at module level (from amp_notebook import nn)",
    "ImportFrom": "imports inside the model are not compiled; import at module level (from amp_notebook import nn)",
    "ClassDef": "class definitions inside the model are not compiled; define helpers as nested def",
    "Break": "break is not compiled: a loop in the graph ends by its condition; put the exit test in 'while ...:'",
    "Continue": "continue is not compiled; wrap the rest of the body in an if on a state value",
    "Match": "match is not compiled; use if on state values (t == 0) or on constants",
}
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


class Scope:
    """The names of one function body (the model, an inlined helper or a part of a recursion); ``barrier``
    stops payload values from outside being read (a recursion's body sees only its tree node)."""

    def __init__(self, parent: Scope | None = None, barrier: str | None = None) -> None:
        self.vars: dict[str, Any] = {}
        self.parent = parent
        self.barrier = barrier


class Return(Exception):  # noqa: N818 - control flow of the translator, not an error
    """Raised by a ``return`` statement; carries the returned value to the function being translated."""

    def __init__(self, value: Any, node: ast.Return) -> None:
        self.value = value
        self.node = node


class Translator:
    def __init__(self, source: Source) -> None:
        self.source = source
        self.g = DraftGraph(source.name)
        self.scope = Scope()
        self.losses: list[str] = []
        self.required: list[str] = []  # state fields every payload read now must carry (loop counters, pos)
        self.fields: set[str] = set()  # state field names already taken
        self.inlining: list[LocalFunction] = []
        self.loops: list[Any] = []  # the graph loops being translated, innermost last (loops.Loop)
        self.recursion: Any = None
        self.hint: str | None = None  # the name an assignment is about to bind (default names of zeros inputs)
        self.node_names: dict[str, int | None] = {}  # names given to parameterless nodes -> line

    # ---------------------------------------------------------------- errors and graph helpers
    def error(self, node: ast.AST | None, message: str) -> CompileError:
        return self.source.error(node, message)

    def add(self, where: ast.AST, op: Op, inputs: list[Tensor | None], name: str | None = None, **attrs: Any) -> Node:
        """Add a node fed by ``inputs``; graph and op errors become errors at ``where``'s line."""
        try:
            return self.g.add_node(op, [None if t is None else t.ref for t in inputs], name=name, **attrs)
        except (GraphError, OpError) as exc:
            raise self.error(where, str(exc)) from None

    def tensor(self, ref: Ref) -> Tensor:
        width, dtype, fields = self.g.describe(ref)
        return Tensor(ref, width, dtype, fields)

    def out(self, node: Node, port: str = "out") -> Tensor:
        return self.tensor(Ref(node.name, port))

    def auto_name(self, kind: str, where: ast.AST) -> str:
        """A name for a node the user did not name: its kind, numbered from the second on (relu, relu_2, ...);
        independent of where the function sits in its file, so a written-back model rebuilds the same names."""
        return self.g.fresh(kind)

    def fresh_field(self, stem: str) -> str:
        name, i = stem, 2
        while name in self.fields:
            name, i = f"{stem}{i}", i + 1
        self.fields.add(name)
        return name

    @staticmethod
    def match_on(tensors: list[Tensor]) -> tuple[str, ...] | None:
        """Joins match full states when their inputs carry the same fields, else the key and the common ones."""
        fields = {t.fields for t in tensors}
        if len(fields) <= 1:
            return None
        return tuple(sorted(frozenset.intersection(*fields)))

    # ---------------------------------------------------------------------------------- names
    def lookup(self, name: str, where: ast.AST) -> Any:
        scope: Scope | None = self.scope
        barrier: str | None = None
        while scope is not None:
            if name in scope.vars:
                value = scope.vars[name]
                if barrier is not None and isinstance(value, Tensor | SequenceInput):
                    raise self.error(
                        where,
                        f"{name} is a payload value from outside {barrier}; inside it only the tree node's fields, "
                        "constants and values computed from them can be read (one message per tree node)",
                    )
                if isinstance(value, Undefined):
                    raise self.error(where, f"{name} is not defined here: {value.reason}")
                return value
            barrier = barrier or scope.barrier
            scope = scope.parent
        return self.free(name, where)

    def free(self, name: str, where: ast.AST) -> Any:
        """A name from outside the function: a constant, amp's vocabulary, or something refused."""
        value = self.source.lookup(name)
        if value is MISSING:
            raise self.error(where, f"name {name!r} is not defined")
        return self.classify(name, value, where)

    def classify(self, name: str, value: Any, where: ast.AST) -> Any:
        if is_constant(value):
            return value
        if id(value) in VOCABULARY_IDS:
            return Vocab(VOCABULARY_IDS[id(value)])
        if value is nn.unroll:
            return Builtin("unroll")
        if id(value) in INPUT_TYPE_IDS:
            return value
        if any(value is fn for fn in BUILTINS.values()):
            return Builtin(value.__name__)
        if is_amp_module(value):
            return value
        kind = type(value).__name__
        if isinstance(value, list | dict | set | bytearray):
            why = (
                f"{name} is a {kind} from outside the function (a mutable global or closure variable); the compiler "
                "reads only constants from outside (int, float, str, bool, None, tuples): make it a tuple, or pass "
                f"it as a default argument (def model(..., {name}=(...)))"
            )
        elif isinstance(value, types.BuiltinFunctionType) and getattr(value, "__module__", None) == "builtins":
            why = (
                f"the builtin {name}() is not compiled: the compiler runs nothing from the model, and side effects "
                "(printing, files, input) are not part of a graph; remove the call (the dashboard shows the run)"
            )
        elif isinstance(value, types.FunctionType | types.MethodType | types.BuiltinFunctionType | type):
            why = (
                f"{name} is a function from outside amp.nn; the compiler does not run or inline outside functions "
                "(nothing outside the model runs): use amp.nn, or define the helper inside the model function"
            )
        else:
            why = (
                f"{name} is a {kind} from outside the function; only constants (int, float, str, bool, None, "
                "tuples), amp_notebook modules and amp.nn functions are read from outside"
            )
        return Opaque(name, why)

    def bind(self, name: str, value: Any) -> None:
        self.scope.vars[name] = value

    def binding(self, name: str) -> Any:
        """The value ``name`` holds now (MISSING if none), without errors: for loops and branches."""
        scope: Scope | None = self.scope
        while scope is not None:
            if name in scope.vars:
                return scope.vars[name]
            scope = scope.parent
        return MISSING

    def require_scope(self, value: Tensor, where: ast.AST, what: str) -> Tensor:
        """A payload used inside a loop (a recursion) must carry that loop's counter (the tree position):
        reading one from outside without it would wait for a message that never comes."""
        missing = [f for f in self.required if f not in value.fields]
        if missing:
            raise self.error(
                where,
                f"{what} comes from outside the loop or recursion it is used in (its messages lack the state "
                f"field {missing[0]!r}); read it in the loop body directly or pass it to the helper as an argument",
            )
        return value

    # ---------------------------------------------------------------------------- statements
    def block(self, stmts: list[ast.stmt]) -> None:
        for i, stmt in enumerate(stmts):
            try:
                self.statement(stmt)
            except Return as ret:
                if i + 1 < len(stmts):
                    raise self.error(stmts[i + 1], "unreachable code after return; remove it") from None
                raise ret

    def statement(self, node: ast.stmt) -> None:
        self.g.line = self.source.line(node)
        handler = getattr(self, f"_stmt_{type(node).__name__}", None)
        if handler is None:
            message = REFUSED_STATEMENTS.get(type(node).__name__, f"{type(node).__name__} statements are not compiled")
            raise self.error(node, message)
        handler(node)

    def _stmt_Pass(self, node: ast.Pass) -> None:  # noqa: N802
        return

    def _stmt_Expr(self, node: ast.Expr) -> None:  # noqa: N802
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring
        value = self.expr(node.value)
        if isinstance(value, Loss) or value is None:
            return
        if isinstance(node.value, ast.Call) and isinstance(self._callee_value(node.value), LocalFunction):
            return  # a helper or a recursion called for its losses; its result may go unread
        if isinstance(value, tuple) and all(isinstance(v, Loss) for v in value):
            return
        raise self.error(node, f"the value of {self.source.snippet(node.value)!r} is not used; assign it or remove it")

    def _stmt_Assign(self, node: ast.Assign) -> None:  # noqa: N802
        single = node.targets[0] if len(node.targets) == 1 else None
        self.hint = single.id if isinstance(single, ast.Name) else None
        try:
            value = self.expr(node.value)
        finally:
            self.hint = None
        for target in node.targets:
            self.assign(target, value)

    def _stmt_AnnAssign(self, node: ast.AnnAssign) -> None:  # noqa: N802
        if node.value is None:
            return
        self.hint = node.target.id if isinstance(node.target, ast.Name) else None
        try:
            value = self.expr(node.value)
        finally:
            self.hint = None
        self.assign(node.target, value)

    def _stmt_AugAssign(self, node: ast.AugAssign) -> None:  # noqa: N802
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "only names can be updated (x += ...); the compiler binds names, not objects")
        left = self.lookup(node.target.id, node.target)
        value = self.binary(node, node.op, left, self.expr(node.value))
        self.assign(node.target, value)

    def assign(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.bind(target.id, value)
            return
        if isinstance(target, ast.Tuple | ast.List):
            if any(isinstance(t, ast.Starred) for t in target.elts):
                raise self.error(target, "starred unpacking is not compiled; unpack each value by name")
            if not isinstance(value, tuple | list) or len(value) != len(target.elts):
                got = f"{len(value)} values" if isinstance(value, tuple | list) else type(value).__name__
                raise self.error(target, f"cannot unpack {got} into {len(target.elts)} names")
            for t, v in zip(target.elts, value, strict=True):
                self.assign(t, v)
            return
        raise self.error(
            target,
            f"assigning to {self.source.snippet(target)} changes an object; the compiler only binds names (x = ...)",
        )

    def _stmt_Return(self, node: ast.Return) -> None:  # noqa: N802
        raise Return(None if node.value is None else self.expr(node.value), node)

    def _stmt_FunctionDef(self, node: ast.FunctionDef) -> None:  # noqa: N802
        if node.decorator_list:
            raise self.error(node, "decorators on nested functions are not compiled; remove them")
        from amp_notebook.compiler.scan import yields

        found = yields(node)
        if found is not None:
            raise self.error(found, REFUSED_EXPRESSIONS[type(found).__name__])
        self.bind(node.name, LocalFunction(node, self.scope))

    def _stmt_Assert(self, node: ast.Assert) -> None:  # noqa: N802
        test = self.expr(node.test)
        if not is_constant(test):
            raise self.error(node, "assert is compiled only on constants (sizes); it cannot test a tensor or a state")
        if not test:
            message = self.expr(node.msg) if node.msg is not None else "assertion failed"
            raise self.error(node, f"assert failed at compile time: {message}")

    def _stmt_If(self, node: ast.If) -> None:  # noqa: N802
        from amp_notebook.compiler.branches import translate_if

        translate_if(self, node)

    def _stmt_For(self, node: ast.For) -> None:  # noqa: N802
        from amp_notebook.compiler.loops import translate_for

        translate_for(self, node)

    def _stmt_While(self, node: ast.While) -> None:  # noqa: N802
        from amp_notebook.compiler.loops import translate_while

        translate_while(self, node)

    # --------------------------------------------------------------------------- expressions
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
                        "and combine them with arithmetic (gate * a + (other_gate) * b)",
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
