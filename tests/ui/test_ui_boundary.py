"""The widgets read the runtime and the IR through their public faces only.

The dashboard reads a run through ``Run``'s public properties (``plan``, ``mode``, ``status()``, ...) and the
builder edits a graph through ``Graph``'s edit methods (``rename``, ``replace_op``, ``assign_worker``, ...),
so that the runtime and the IR may change their insides without breaking a widget. The source of every UI
module is read with ``ast``: an attribute whose name starts with ``_`` may be read only on ``self`` or
``cls``, or when the UI itself defines that name (a private method of one widget class used by its
classmethods); IPython's display hooks (``_repr_*_``) are public protocol. The graph's containers are
read, never assigned: ``graph.nodes = ...``, ``graph.edges.remove(...)`` and the like go through ``Graph``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import amp_notebook.ui

UI = Path(amp_notebook.ui.__file__).parent
GRAPH_CONTAINERS = {"nodes", "edges", "replica_groups"}
MUTATORS = {"append", "extend", "remove", "pop", "insert", "clear", "update", "setdefault", "__setitem__"}
NODE_FIELDS = {"op", "worker", "optimizer", "min_update_frequency", "name"}


def private_names_defined(trees: dict[str, ast.Module]) -> set[str]:
    """Private names the UI defines: functions, classes and methods, attributes assigned on ``self``/``cls``."""
    names = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name.startswith("_"):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.add(node.attr)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name) and t.id.startswith("_"))
    return names


def on_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def private_read(node: ast.AST) -> str | None:
    """The private name ``node`` reads on something other than self or cls (``x._a``, ``getattr(x, "_a")``)."""
    if isinstance(node, ast.Attribute) and not on_self(node.value):
        name = node.attr
    elif (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr")
        and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and not on_self(node.args[0])
    ):  # fmt: skip
        name = node.args[1].value
    else:
        return None
    if not isinstance(name, str) or not name.startswith("_") or name.startswith("_repr_"):
        return None
    return None if name.startswith("__") and name.endswith("__") else name


def foreign_private_reads(trees: dict[str, ast.Module]) -> list[str]:
    own = private_names_defined(trees)
    return [
        f"{module}:{node.lineno}: {ast.unparse(node)}"
        for module, tree in trees.items()
        for node in ast.walk(tree)
        if (name := private_read(node)) is not None and name not in own
    ]


def graph_rewrites(trees: dict[str, ast.Module]) -> list[str]:
    """Assignments to a graph's containers or a node's fields, and mutating calls on the containers."""
    found = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and not on_self(node.value):
                if node.attr in GRAPH_CONTAINERS | NODE_FIELDS:
                    found.append(f"{module}:{node.lineno}: {ast.unparse(node)} = ...")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                owner = node.func.value
                if isinstance(owner, ast.Attribute) and owner.attr in GRAPH_CONTAINERS:
                    found.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    return found


def ui_trees() -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(UI.glob("*.py"))}


def test_the_ui_reads_no_private_field_of_the_runtime_or_the_ir() -> None:
    trees = ui_trees()
    assert len(trees) >= 10 and "dashboard.py" in trees and "builder_model.py" in trees
    assert foreign_private_reads(trees) == []


def test_the_ui_edits_graphs_through_graph_methods_only() -> None:
    assert graph_rewrites(ui_trees()) == []


def test_the_readers_catch_what_they_forbid() -> None:
    source = (
        "class Panel:\n"
        "    def _own(self):\n        return self._run._controller.mode\n"
        "    def show(self, run, graph):\n"
        "        run._driver.done\n        getattr(run, '_plan')\n        self._own()\n        run._own()\n"
        "        self._panel._repr_mimebundle_()\n"
        "        graph.nodes[name].worker = 3\n        graph.edges = []\n        graph.edges.remove(e)\n"
        "        graph.nodes[name].meta['cell'] = 'x'\n        self.graph = graph\n"
    )
    trees = {"sample.py": ast.parse(source)}
    assert sorted(f.split(": ", 1)[1] for f in foreign_private_reads(trees)) == [
        "getattr(run, '_plan')",
        "run._driver",
        "self._run._controller",
    ]
    assert sorted(f.split(": ", 1)[1] for f in graph_rewrites(trees)) == [
        "graph.edges = ...",
        "graph.edges.remove(e)",
        "graph.nodes[name].worker = ...",
    ]
