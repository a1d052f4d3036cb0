"""Static facts about statements, read before they are translated: which names a block reads and assigns.

Loops and branches need them first: a loop carries every payload value its body reads or assigns, and a
branch routes every payload value either side touches through its Cond. Nested ``def`` bodies are not
entered (their own reads are found when they are called); the ``def``'s name counts as assigned.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def walk(stmts: Sequence[ast.AST]) -> Iterator[ast.AST]:
    """Every node under ``stmts`` in source order, not entering nested function or class bodies."""
    todo = list(reversed(stmts))
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, _SCOPES):
            continue
        todo.extend(reversed(list(ast.iter_child_nodes(node))))


def assigned_names(stmts: Sequence[ast.AST]) -> list[str]:
    out: dict[str, None] = {}
    for node in walk(stmts):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out[node.id] = None
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = None
    return list(out)


def read_names(stmts: Sequence[ast.AST]) -> list[str]:
    """Names read (loaded) in ``stmts`` and augmented assignments' targets, in order of first appearance."""
    out: dict[str, None] = {}
    for node in walk(stmts):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            out[node.id] = None
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = None
    return list(out)


def free_names(fn: ast.FunctionDef) -> list[str]:
    """Names a nested function reads that it does not bind itself (its parameters or assignments)."""
    args = fn.args
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    local = params | set(assigned_names(fn.body))
    return [n for n in read_names(fn.body) if n not in local]


def yields(tree: ast.AST) -> ast.AST | None:
    """The first yield (or await) in a function body, nested functions excluded."""
    for node in walk(list(ast.iter_child_nodes(tree))):
        if isinstance(node, ast.Yield | ast.YieldFrom | ast.Await):
            return node
    return None


def indexed_by(stmts: Sequence[ast.AST], counter: str) -> list[ast.Subscript]:
    """Subscripts ``v[counter]`` with ``v`` a plain name: rows of a value read once per loop iteration."""
    return [
        node
        for node in walk(stmts)
        if isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and isinstance(node.slice, ast.Name)
        and node.slice.id == counter
        and isinstance(node.ctx, ast.Load)
    ]
