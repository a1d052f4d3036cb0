"""``AmpError``: every exception class of the package derives from it and keeps its built-in base.

The completeness guard imports every module of the package and collects every exception class defined
in it, so a new error class that forgets the base fails here; a second check reads the source so that an
exception class hidden inside a function (which importing cannot see) fails too.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import amp_notebook
from amp_notebook import AmpError
from amp_notebook.ir.graph import GraphError
from amp_notebook.ir.validate import ValidationError
from amp_notebook.runtime.worker import NodeError

PACKAGE_DIR = Path(amp_notebook.__file__).parent
BUILTIN_EXCEPTIONS = {
    obj for obj in vars(builtins).values() if isinstance(obj, type) and issubclass(obj, BaseException)
} - {BaseException, Exception}


def package_exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined at module level anywhere in amp_notebook, by qualified name."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(amp_notebook.__path__, "amp_notebook."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


CLASSES = package_exception_classes()
# Exceptions used as control flow inside the package, caught where they are raised and never seen by users.
# Each needs a reason; the list must not go stale.
INTERNAL = {
    "amp_notebook.compiler.translate.Return": "a `return` statement being translated; caught by the translator",
    "amp_notebook.engine.build.BuildError": "raised by the install hook only (the build has no package to import), "
    "which turns it into the install's failure message",
    "amp_notebook.testing.faults.InjectedFaultError": "the fault the harness injects into its own runs, never raised "
    "by amp_notebook itself; the harness checks it reaches the caller",
    "amp_notebook.testing.faults._Vanish": "ends a worker thread's loop quietly (a harness fault); caught there",
}


def test_internal_control_flow_exceptions_are_few_and_exist() -> None:
    assert set(INTERNAL) <= set(CLASSES), f"stale entries: {sorted(set(INTERNAL) - set(CLASSES))}"
    for name in INTERNAL:
        assert not issubclass(CLASSES[name], AmpError), f"{name} is an AmpError now: drop it from INTERNAL"


def test_the_guard_sees_the_known_classes() -> None:
    names = {name.rsplit(".", 1)[1] for name in CLASSES}
    known = {
        "GraphError", "GraphFileError", "ValidationError", "OpError", "ExpressionError", "InvariantError",
        "NodeError", "DataError", "PlacementError", "OptimizerError", "CostModelError", "BuilderError",
        "PropertyError", "TreeFormatError", "ControlError", "NoRunError", "TraceFileError", "CompileError",
        "TorchImportError",
    }  # fmt: skip
    assert known <= names, f"not found by the guard: {sorted(known - names)}"
    assert len(CLASSES) >= 16


@pytest.mark.parametrize("name", sorted(set(CLASSES) - set(INTERNAL)))
def test_every_exception_class_derives_from_amp_error_and_a_builtin(name: str) -> None:
    cls = CLASSES[name]
    assert issubclass(cls, AmpError), f"{name} must derive from amp_notebook.errors.AmpError"
    if cls is AmpError:
        return
    builtin_bases = [base for base in cls.__mro__ if base in BUILTIN_EXCEPTIONS]
    assert builtin_bases, (
        f"{name} must also keep a built-in base (ValueError, RuntimeError, ...) so that existing except clauses "
        "keep working"
    )


def test_no_exception_class_is_hidden_inside_a_function() -> None:
    """An exception class defined in a function body cannot be found by importing; forbid it in the source."""
    hidden = []
    for path in PACKAGE_DIR.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if not re.search(r"^[ \t]+class \w+\(", text, re.MULTILINE):  # no indented class: nothing to parse
            continue
        tree = ast.parse(text)
        module_level = {n for n in tree.body if isinstance(n, ast.ClassDef)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node not in module_level:
                bases = [ast.unparse(b) for b in node.bases]
                if any(b.endswith(("Error", "Exception")) for b in bases):
                    hidden.append(f"{path.relative_to(PACKAGE_DIR)}: class {node.name}({', '.join(bases)})")
    assert not hidden, f"define exception classes at module level: {hidden}"


def test_old_except_clauses_still_catch() -> None:
    with pytest.raises(ValueError):
        raise GraphError("x")
    with pytest.raises(RuntimeError):
        raise NodeError("n", "linear", "forward", "in", None, ValueError("boom"))
    with pytest.raises(AmpError):
        raise ValidationError("g", [])
    assert amp_notebook.AmpError is AmpError and "AmpError" in amp_notebook.__all__


def test_loading_a_bad_graph_is_one_except_clause(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    for text in ("{", "[]", '{"schema": "amp_notebook.graph", "version": 1, "nodes": 3, "edges": []}'):
        path.write_text(text)
        with pytest.raises(AmpError):
            amp_notebook.load_graph(path)
    with pytest.raises(FileNotFoundError) as info:  # as before, and an AmpError too
        amp_notebook.load_graph(tmp_path / "missing.json")
    assert isinstance(info.value, AmpError)


# ------------------------------------------------------------------------------ no plain built-in raise
# Raising a bare ValueError (TypeError, RuntimeError, ...) on user input would escape ``except AmpError``.
# The source is read with ``ast``: every ``raise`` of a built-in exception class must be one of these.
# NotImplementedError marks an abstract method, StopIteration ends an iterator, an ImportError names a missing
# optional dependency (what tools expect to catch): protocol and environment, not input.
NOT_INPUT = (NotImplementedError, StopIteration, ImportError)
PLAIN_BUILTINS = {
    name for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, Exception) and not issubclass(obj, NOT_INPUT)
}  # fmt: skip
PROTOCOL = {"AttributeError": "__getattr__"}  # a module's lazy __getattr__ must raise AttributeError
# (module, function) -> why a plain built-in exception is right there: internal invariants, never user input
INTERNAL_RAISES = {
    ("runtime/controller.py", "Controller.restore"): "restoring a controller that has started: resume builds a "
    "fresh one, so this is a bug in the caller",
    ("runtime/controller.py", "Controller._retire"): "a backend reporting a key that is not in flight",
    ("runtime/controller.py", "Controller.on_flush_complete"): "a backend reporting a flush that is not in progress",
    ("runtime/controller.py", "Controller.on_average_complete"): "a backend reporting an average that is not under way",
    ("runtime/controller.py", "carry_out"): "an executor without an average handler given an Average action: a bug in "
    "the executor",
    ("runtime/checkpoint_file.py", "_reject_constant"): "json's parse_constant hook: parse_manifest turns what it "
    "raises into a CheckpointError naming the file",
    ("engine/trace.py", "NativeTable.view"): "a read-only property: the engine writes native tables, so Table's "
    "writer half never assigns a view to one",
    ("engine/specs.py", "_dropout"): "kernel_spec called for a Dropout without its node's name: the plan always "
    "passes it, so this is a bug in the caller",
    ("runtime/worker.py", "Worker._forward"): "an output with no edge: the session validates the graph before it "
    "compiles the plan, so only an unvalidated plan built by hand gets here",
    ("runtime/backends/ray_credits.py", "split"): "a weight split into no parts: every caller splits among the "
    "messages it sends, at least one",
    ("runtime/backends/ray_credits.py", "Completion.admit_key"): "the controller admitting a key twice",
    ("runtime/knobs.py", "Knobs.__init__"): "the session builds its knobs from the plan, one value per node",
    ("testing/kills.py", "kill_campaign"): "the kill harness needs os.fork: a platform limit of a test tool",
}
# Modules whose raises are converted later; each entry must still hold a plain raise, so that the list cannot
# go stale.
PENDING_MODULES: set[str] = set()


def plain_raises(tree: ast.Module) -> list[tuple[str, str, int]]:
    """(exception name, enclosing function's qualified name, line) of every ``raise Builtin(...)``."""
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            scope = [*scope, node.name]
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id in PLAIN_BUILTINS:
                found.append((target.id, ".".join(scope), node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree, [])
    return found


def package_plain_raises() -> dict[str, list[tuple[str, str, int]]]:
    return {
        path.relative_to(PACKAGE_DIR).as_posix(): plain_raises(ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
    }


def test_no_plain_builtin_exception_is_raised_on_user_input() -> None:
    found = package_plain_raises()
    assert len(found) > 150  # the scan reads the package
    offending = [
        f"{module}:{line}: raise {name} in {where or 'module level'}"
        for module, raises in found.items()
        if module not in PENDING_MODULES
        for name, where, line in raises
        if (module, where) not in INTERNAL_RAISES and not where.endswith(PROTOCOL.get(name, "\0"))
    ]
    assert not offending, "raise an AmpError subclass that keeps the built-in base (amp_notebook/errors.py):\n" + (
        "\n".join(offending)
    )


def test_the_allowances_are_not_stale() -> None:
    found = package_plain_raises()
    used = {(module, where) for module, raises in found.items() for _, where, _ in raises}
    assert set(INTERNAL_RAISES) <= used, f"stale: {sorted(set(INTERNAL_RAISES) - used)}"
    assert not [m for m in PENDING_MODULES if not found.get(m)], "a pending module raises nothing plain: drop it"


def test_the_scan_sees_what_it_forbids() -> None:
    source = (
        "def f(x):\n    if x:\n        raise ValueError('bad')\n    raise KeyError\n"
        "class C:\n    def g(self):\n        raise NotImplementedError\n    def h(self):\n"
        "        raise SettingError('x', 'bad')\n"
    )
    assert plain_raises(ast.parse(source)) == [("ValueError", "f", 3), ("KeyError", "f", 4)]
