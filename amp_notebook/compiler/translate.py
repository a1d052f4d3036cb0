"""The translator: reads a model function's AST statement by statement and builds its graph as it goes.

Every Python name holds a compile-time value (``values.py``): a constant, a payload stream (a
:class:`Tensor`: an output port of the draft graph), a state expression, an input, a loss. Straight-line
code is symbolic execution: ``h = nn.relu(nn.linear(x, 64))`` adds two nodes and binds ``h`` to the ReLU's
output. Control flow is where the IR differs from Python, and each construct has its own module:
``loops.py`` (for, while), ``branches.py`` (if), ``recursion.py`` (a function calling itself on
``t.left`` and ``t.right``); ``vocabulary.py`` turns ``amp.nn`` calls into nodes.

Nothing from the user's module runs: names are looked up (``source.py``), expressions are evaluated at
compile time by ``expressions.py`` (constants folded, state values built up), and every construct outside
the vocabulary is refused with the line and what to write instead.
"""

from __future__ import annotations

import ast
import types
from typing import Any

from amp_notebook.compiler import nn
from amp_notebook.compiler.draft import DraftGraph
from amp_notebook.compiler.errors import CompileError
from amp_notebook.compiler.expressions import REFUSED_EXPRESSIONS, Expressions
from amp_notebook.compiler.source import (
    BUILTINS,
    INPUT_TYPE_IDS,
    MISSING,
    VOCABULARY_IDS,
    Source,
    is_amp_module,
    is_constant,
)
from amp_notebook.compiler.values import (
    Builtin,
    LocalFunction,
    Loss,
    Opaque,
    SequenceInput,
    Tensor,
    Undefined,
    Vocab,
)
from amp_notebook.ir.graph import GraphError, Node, Ref
from amp_notebook.ir.ops.base import Op, OpError

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


class Translator(Expressions):
    """The translation of one model function into a draft graph: one walk over its AST (module docstring).

    Owns the draft graph being built, the scope (a compile-time value for every Python name), the loops and
    the recursion being translated, and the state fields taken so far. It never runs the user's code: it reads
    the source only, and the names the function reads are looked up as values, never called."""

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
        from amp_notebook.compiler.while_loops import translate_while

        translate_while(self, node)
