"""Imports in the runtime point one way: no cycle among its modules, and no reach into the UI but the one hook.

The import graph is read from the source with ``ast``: every ``import`` of an ``amp_notebook.runtime``
module by another, at module level or inside a function (a lazy import that closes a cycle is still a
cycle: a parameter followed through the code goes back and forth), leaving out imports under
``if TYPE_CHECKING:``, which type checkers alone follow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import amp_notebook

PACKAGE = Path(amp_notebook.__file__).parent
RUNTIME = "amp_notebook.runtime"
# the runtime's one reach into the UI: a result's report (amp_notebook/runtime/result.py documents it)
UI_HOOKS = {("amp_notebook.runtime.result", "TrainResult.report")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, str | None]]:
    return imports_in(path.read_text(encoding="utf-8"))


def imports_in(source: str) -> list[tuple[str, str | None]]:
    """(imported module, enclosing function or None at module level) for every import outside TYPE_CHECKING."""
    tree = ast.parse(source)
    found: list[tuple[str, str | None]] = []

    def visit(node: ast.AST, where: str | None, scope: list[str]) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child, where, scope)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, where) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, where))
            found.extend((f"{node.module}.{alias.name}", where) for alias in node.names)
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            scope = [*scope, node.name]
            if not isinstance(node, ast.ClassDef):
                where = ".".join(scope)
        for child in ast.iter_child_nodes(node):
            visit(child, where, scope)

    visit(tree, None, [])
    return found


MODULES = {module_name(p): p for p in (PACKAGE / "runtime").rglob("*.py")}


def test_the_runtime_import_graph_has_no_cycle() -> None:
    graph = nx.DiGraph()
    graph.add_nodes_from(MODULES)
    for name, path in MODULES.items():
        for target, _ in imports(path):
            if target in MODULES and target != name and not name.startswith(target + "."):
                graph.add_edge(name, target)
    assert graph.number_of_edges() > 30  # the reader sees the imports (a guard against a test that cannot fail)
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, f"import cycles among runtime modules: {cycles}"


def test_no_runtime_module_imports_the_ui_but_through_the_report_hook() -> None:
    at_module_level, in_functions = [], set()
    for name, path in MODULES.items():
        for target, where in imports(path):
            if target == "amp_notebook.ui" or target.startswith("amp_notebook.ui."):
                if where is None:
                    at_module_level.append(f"{name} imports {target}")
                else:
                    in_functions.add((name, where))
    assert not at_module_level
    assert in_functions == UI_HOOKS


def test_the_reader_sees_lazy_and_type_only_imports_for_what_they_are() -> None:
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import amp_notebook.ui.report\n"
        "import amp_notebook.runtime.session\n"
        "class A:\n    def f(self):\n        from amp_notebook.ui.report import Report\n"
    )
    found = imports_in(source)
    assert ("amp_notebook.runtime.session", None) in found
    assert ("amp_notebook.ui.report", "A.f") in found
    assert all(where is not None for target, where in found if target.startswith("amp_notebook.ui"))
