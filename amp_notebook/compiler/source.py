"""Reading a model function without running it: its source text, its AST, and the names it reads.

The compiler never calls the user's function, its helpers, or anything its source names. It needs:

* the source text (``inspect.getsourcelines``, which reads the file or, in a notebook, IPython's cell cache)
  and where it starts, so every error can name the file's line;
* the values of the free names the body reads (globals, closure cells, builtins), taken from the
  function's ``__globals__`` dict and its closure cells by plain lookups, and classified by their exact
  type: immutable constants (int, float, bool, str, None and tuples of them) are read, ``amp_notebook``
  modules, the ``amp.nn`` vocabulary and a few builtins are recognised by identity, and anything else (a
  list, a dict, an object, a user function) is refused when the body uses it, with no method of it called;
* the parameters' default values (already evaluated by Python when the ``def`` ran), under the same rule.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from amp_notebook.compiler import nn
from amp_notebook.compiler.errors import CompileError

# builtins the compiler understands (by identity); every other builtin is refused where it is called
BUILTINS = {name: getattr(builtins, name) for name in ("range", "len", "enumerate", "zip", "min", "max", "abs")}
BUILTINS.update({name: getattr(builtins, name) for name in ("int", "float", "str", "bool", "tuple")})
_CONST_TYPES = (int, float, bool, str, type(None))
MISSING = object()


def is_constant(value: Any, depth: int = 0) -> bool:
    """True for an immutable constant: int, float, bool, str, None, or a tuple of those (checked by exact
    type, so no user ``__eq__``/``__index__``/``__iter__`` runs)."""
    kind = type(value)
    if kind in _CONST_TYPES:
        return True
    if kind is tuple and depth < 8:
        return all(is_constant(v, depth + 1) for v in value)
    return False


@dataclass
class Source:
    """A model function's source, parsed, with where it lives and how to look up the names it reads."""

    name: str
    text: str  # dedented source, decorators included
    tree: ast.FunctionDef
    filename: str
    first_line: int  # the file line of the text's first line
    globals: Mapping[str, Any] = field(default_factory=dict)
    closure: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    read_globals: dict[str, Any] = field(default_factory=dict)  # free names the body read, for pyform

    @staticmethod
    def from_function(fn: Any) -> Source:
        if isinstance(fn, types.MethodType):
            fn = fn.__func__
        if not isinstance(fn, types.FunctionType):
            raise CompileError(
                f"amp.compile expects a plain Python function (def model(...): ...), got {type(fn).__name__}; "
                "a class, a lambda's value, a builtin or a torch module cannot be compiled (see amp.from_torch)"
            )
        name = fn.__name__
        if fn.__name__ == "<lambda>":
            raise CompileError("amp.compile needs a def with a name, not a lambda", function=name)
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError) as exc:
            raise CompileError(
                f"cannot read the source of {name}() ({exc}); define it in a file or a notebook cell (code made "
                "by exec has no source to read)",
                function=name,
            ) from None
        text = textwrap.dedent("".join(lines))
        source = Source.from_text(text, name, fn.__code__.co_filename, first, fn.__globals__, _defaults(fn))
        source.closure = _closure(fn)
        return source

    @staticmethod
    def from_text(
        text: str,
        name: str,
        filename: str = "<amp.compile>",
        first_line: int = 1,
        namespace: Mapping[str, Any] | None = None,
        defaults: dict[str, Any] | None = None,
    ) -> Source:
        """A function given as text (``amp.from_torch`` writes its models this way); without ``defaults`` the
        parameters' defaults must be literals."""
        try:
            module = ast.parse(text)
        except SyntaxError as exc:
            raise CompileError(f"the source does not parse: {exc.msg}", line=exc.lineno, function=name) from None
        defs = [n for n in module.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name]
        if not defs:
            raise CompileError(f"no 'def {name}(...)' found in the source given", function=name)
        tree = defs[0]
        if isinstance(tree, ast.AsyncFunctionDef):
            raise CompileError(
                "async functions cannot be compiled: a model is a plain def",
                line=first_line + tree.lineno - 1,
                function=name,
            )
        source = Source(name, text, tree, filename, first_line, namespace if namespace is not None else {})
        source.defaults = _defaults_from_ast(source) if defaults is None else defaults
        return source

    # ------------------------------------------------------------------ lines
    def line(self, node: ast.AST | None) -> int | None:
        lineno = getattr(node, "lineno", None)
        return None if lineno is None else self.first_line + lineno - 1

    def line_text(self, node: ast.AST | None) -> str | None:
        lineno = getattr(node, "lineno", None)
        if lineno is None:
            return None
        lines = self.text.splitlines()
        return lines[lineno - 1] if 0 < lineno <= len(lines) else None

    def error(self, node: ast.AST | None, message: str) -> CompileError:
        return CompileError(
            message, line=self.line(node), text=self.line_text(node), function=self.name, filename=self.filename
        )

    def snippet(self, node: ast.AST) -> str:
        """The source of an expression or a statement's head, for messages."""
        text = ast.get_source_segment(self.text, node) or ast.unparse(node)
        return text.splitlines()[0] if "\n" in text else text

    # ------------------------------------------------------------------ names
    def lookup(self, name: str) -> Any:
        """The value of a free name (closure, globals, then builtins) or MISSING; plain lookups only."""
        if name in self.closure:
            value = self.closure[name]
        else:
            value = self.globals.get(name, MISSING)
            if value is MISSING:
                value = BUILTINS.get(name, MISSING)
                if value is MISSING and hasattr(builtins, name):
                    value = getattr(builtins, name)
                return value
        self.read_globals[name] = value
        return value


def _closure(fn: types.FunctionType) -> dict[str, Any]:
    cells = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        try:
            cells[name] = cell.cell_contents
        except ValueError:  # an empty cell: a name assigned later in the enclosing function
            continue
    return cells


def _defaults(fn: types.FunctionType) -> dict[str, Any]:
    code = fn.__code__
    positional = code.co_varnames[: code.co_argcount]
    out: dict[str, Any] = {}
    values = fn.__defaults__ or ()
    for name, value in zip(positional[len(positional) - len(values) :], values, strict=True):
        out[name] = value
    out.update(fn.__kwdefaults__ or {})
    return out


def _defaults_from_ast(source: Source) -> dict[str, Any]:
    """Defaults of a function given as text (no function object): literal constants only."""
    args = source.tree.args
    out: dict[str, Any] = {}
    pairs = list(zip(args.args[len(args.args) - len(args.defaults) :], args.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    for arg, node in pairs:
        try:
            out[arg.arg] = ast.literal_eval(node)
        except ValueError:
            raise source.error(node, f"the default of {arg.arg} must be a literal constant") from None
    return out


def is_amp_module(value: Any) -> bool:
    return isinstance(value, types.ModuleType) and (
        value.__name__ == "amp_notebook" or value.__name__.startswith("amp_notebook.")
    )


def module_attribute(module: types.ModuleType, name: str) -> Any:
    """``module.name`` read from the module's ``__dict__`` (no module ``__getattr__`` runs)."""
    return vars(module).get(name, MISSING)


VOCABULARY_IDS = {id(fn): name for name, fn in nn.VOCABULARY.items()}
INPUT_TYPE_IDS = {id(cls): cls for cls in nn.INPUT_TYPES}
