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
