"""Recursion over a tree in the input: ``def node(t): ... node(t.left) ... node(t.right)`` -> Flatmap/Collect.

A key holds one binary tree in heap layout (``nn.Tree()``: root ``pos`` 1, children ``2 pos`` and
``2 pos + 1``; tables ``leaf_table`` [pos, word] and ``label_table`` [pos, label]). The recursive function
must open with the split ``if t.is_leaf:``; then either::

    def node(t):                                  def node(t):
        if t.is_leaf:                                 if t.is_leaf:
            s = <leaf code using t.word>                  return <leaf code using t.word>
        else:                                         return <branch code using node(t.left), node(t.right)>
            s = <branch code using node(t.left), node(t.right)>
        <code every node runs, t.label>
        return s

It becomes one static graph that walks every tree, as the zoo's Tree-LSTM does by hand: the tree position
is the state field ``pos``::

    leaf_table -> Flatmap 'leaf_rows' (one message per leaf, pos) -> leaf code --+
                                                                                  +-> Phi -> common code
    Collect (key pos // 2, slot pos % 2: both children) -> branch code ----------+         |
          ^                                                                                return value
          +---------------------------- false -- Cond 'is_root' on pos == 1 <-------------+
                                                  true -> Isu (pos removed) -> the value of node(tree)

So ``node(t.left)`` and ``node(t.right)`` are the two halves of the Collect's output (the results of the
children, which arrive as messages with ``pos`` 2p and 2p + 1 and leave merged with ``pos`` p); used side by
side (``nn.concat(l, r)``, ``nn.tree_lstm_branch(l, r, ...)``) they are that output itself. ``t.label``
(a Flatmap of ``label_table``) is read in the common code, which every node passes exactly once. Payload
values from outside the recursion cannot be read inside it (they would have to reach every node).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from amp_notebook.compiler import scan
from amp_notebook.compiler.source import MISSING, is_constant
from amp_notebook.compiler.values import (
    ChildResult,
    LeafTest,
    LocalFunction,
    StateExpr,
    Tensor,
    TreeChild,
    TreeInput,
    TreeNode,
    Undefined,
)
from amp_notebook.ir import ops as O

if TYPE_CHECKING:
    from amp_notebook.compiler.translate import Translator

POS = "pos"


@dataclass
class Recursion:
    """The recursive ``def node(t)`` being translated: its tree input, and what its calls on the children gave."""

    function: LocalFunction
    tree: TreeInput
    children: Tensor | None = None  # the Collect's output: [result of the left child; of the right child]
    width: int | None = None  # the width of one node's result
    pieces: tuple[Tensor, ...] | None = None
    calls: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0})
    words: Tensor | None = None
    labels: Tensor | None = None


def translate_recursion(tr: Translator, node: ast.Call, fn: LocalFunction, args: list[Any], kwargs: dict) -> Tensor:
    from amp_notebook.compiler.translate import Scope

    fdef = fn.node
    spec = fdef.args
    params = [a.arg for a in [*spec.posonlyargs, *spec.args]]
    if len(params) != 1 or spec.kwonlyargs or spec.vararg or spec.kwarg or kwargs or len(args) != 1:
        raise tr.error(
            fdef,
            f"{fdef.name}(t) walks a tree: it takes exactly one parameter, the tree node, and is "
            "called as node(tree) with tree: nn.Tree()",
        )
    if tr.recursion is not None or tr.required:
        raise tr.error(
            node, "a recursion over a tree runs at the top level of the model, not inside a loop or another recursion"
        )
    if POS in tr.fields:
        raise tr.error(node, f"the state field {POS!r} is taken; one recursion over a tree per model")
    leaf_part, branch_part, tail, returns = _parts(tr, fdef, params[0])
    rec = Recursion(fn, args[0])
    tr.recursion = rec
    tr.required.append(POS)
    tr.fields.add(POS)
    base = Scope(parent=fn.scope, barrier=f"the recursion {fdef.name}()")
    saved = tr.scope
    phases: list[list[str]] = []  # the nodes each part made, to put them in source order at the end
    try:
        tr.scope = Scope(parent=base)
        tr.bind(params[0], TreeNode("leaf", rec))
        before = set(tr.g.nodes)
        leaf_result = _run(tr, leaf_part, returns)
        leaf_vars = dict(tr.scope.vars)
        phases.append(_made(tr, before))
        pending: dict[str, Any] = {}
        before = set(tr.g.nodes)
        tr.g.line = tr.source.line(fdef)
        if returns:
            result = _open_phi(tr, fdef, leaf_result, "result", pending)
        else:
            tr.scope = Scope(parent=base)
            for name in dict.fromkeys([*scan.assigned_names(leaf_part), *scan.assigned_names(branch_part)]):
                value = leaf_vars.get(name, MISSING)
                in_branch = name in scan.assigned_names(branch_part)
                if isinstance(value, Tensor) and in_branch:
                    tr.bind(name, _open_phi(tr, fdef, value, name, pending))
                elif is_constant(value) and in_branch:
                    tr.bind(name, value)
                else:
                    tr.bind(name, Undefined(f"it is set in only one of the leaf and branch parts of {fdef.name}()"))
            tr.bind(params[0], TreeNode("any", rec))
            merges = _made(tr, before)
            before = set(tr.g.nodes)
            result = _run(tr, tail, True)
        tail_nodes = _made(tr, before)
        if returns:
            merges, tail_nodes = tail_nodes, []
        if not isinstance(result, Tensor):
            raise tr.error(fdef, f"{fdef.name}() must return a tensor (the node's result that its parent reads)")
        rec.width = result.width
        tr.g.line = tr.source.line(fdef)
        before = set(tr.g.nodes)
        is_root = tr.add(fdef, O.Cond(f"{POS} == 1"), [result], name=tr.g.fresh(f"{fdef.name}_is_root"))
        collect = O.Collect(key=f"{POS} // 2", index=f"{POS} % 2", count=2, field=POS)
        children = tr.add(fdef, collect, [tr.out(is_root, "false")], name=tr.g.fresh(f"{fdef.name}_children"))
        rec.children = tr.out(children)
        tr.scope = Scope(parent=base)
        tr.bind(params[0], TreeNode("branch", rec))
        branch_result = _run(tr, branch_part, returns)
        phases += [merges, _made(tr, before), tail_nodes]
        branch_vars = dict(tr.scope.vars)
        if rec.calls[0] == 0 or rec.calls[1] == 0:
            raise tr.error(
                fdef,
                f"the branch part of {fdef.name}() must call {fdef.name}(t.left) and "
                f"{fdef.name}(t.right): their results are what a branch computes from",
            )
        tr.g.line = tr.source.line(fdef)
        for name, phi in pending.items():
            value = branch_result if returns else branch_vars.get(name, MISSING)
            _close_phi(tr, fdef, phi, name, value)
        tr.g.line = tr.source.line(node)
        root = tr.add(
            node, O.Isu({POS: None}, {POS: "1"}), [tr.out(is_root, "true")], name=tr.g.fresh(f"{fdef.name}_root")
        )
        _reorder(tr, phases)
        return tr.out(root)
    finally:
        tr.scope = saved
        tr.recursion = None
        tr.required.pop()
        tr.fields.discard(POS)


def _made(tr: Translator, before: set[str]) -> list[str]:
    return [n for n in tr.g.nodes if n not in before]


def _reorder(tr: Translator, phases: list[list[str]]) -> None:
    """Put the recursion's nodes in source order (leaf part, merges, root test and Collect, branch part, common
    part) where they were translated leaf, common, branch: node order is what placement's round robin and
    the builder's layout follow, so the graph places like the hand-built Tree-LSTM."""
    ordered = [n for phase in phases for n in phase]
    moved = set(ordered)
    names = list(tr.g.nodes)
    at = min(names.index(n) for n in ordered) if ordered else len(names)
    rest = [n for n in names if n not in moved]
    tr.g.nodes = {n: tr.g.nodes[n] for n in [*rest[:at], *ordered, *rest[at:]]}


def _parts(tr: Translator, fdef: ast.FunctionDef, param: str) -> tuple[list, list, list, bool]:
    """(leaf statements, branch statements, common statements, whether the parts return their results)."""
    body = [s for s in fdef.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    split = body[0] if body else None
    test = split.test if isinstance(split, ast.If) else None
    if not (
        isinstance(test, ast.Attribute)
        and test.attr == "is_leaf"
        and isinstance(test.value, ast.Name)
        and test.value.id == param
    ):
        raise tr.error(
            split or fdef,
            f"a recursive function over a tree opens with 'if {param}.is_leaf:', which "
            "splits it into the code for leaves and the code for branches",
        )
    assert isinstance(split, ast.If)
    ends_leaf = bool(split.body) and isinstance(split.body[-1], ast.Return)
    if not split.orelse:
        if not ends_leaf:
            raise tr.error(split, f"without an else, the 'if {param}.is_leaf:' part must end with a return")
        return split.body, body[1:], [], True
    ends_branch = isinstance(split.orelse[-1], ast.Return)
    if ends_leaf and ends_branch and len(body) == 1:
        return split.body, split.orelse, [], True
    if ends_leaf or ends_branch:
        raise tr.error(split, "return either from both the leaf and the branch part, or after the if (not from one)")
    if len(body) == 1 or not isinstance(body[-1], ast.Return):
        raise tr.error(fdef, f"{fdef.name}() must end with 'return <the node's result>'")
    return split.body, split.orelse, body[1:], False


def _run(tr: Translator, stmts: list[ast.stmt], returns: bool) -> Any:
    from amp_notebook.compiler.translate import Return

    try:
        tr.block(stmts)
    except Return as ret:
        if not returns:
            raise tr.error(ret.node, "return here would skip the code every node runs; return at the end") from None
        return ret.value
    return None


def _open_phi(tr: Translator, where: ast.AST, value: Any, name: str, pending: dict[str, Any]) -> Tensor:
    if not isinstance(value, Tensor):
        raise tr.error(where, f"the leaf part must give {name} a tensor, got {type(value).__name__}")
    phi = tr.add(where, O.Phi(2), [value, None], name=tr.g.fresh(f"{name}_nodes"))
    pending[name] = phi
    return tr.out(phi)


def _close_phi(tr: Translator, where: ast.AST, phi: Any, name: str, value: Any) -> None:
    if not isinstance(value, Tensor):
        raise tr.error(where, f"the branch part must give {name} a tensor, got {type(value).__name__}")
    want = tr.out(phi)
    if value.width is not None and want.width is not None and value.width != want.width:
        raise tr.error(
            where,
            f"{name} has width {want.width} at leaves but {value.width} at branches; a node's "
            "result must have one width",
        )
    if value.fields != want.fields:
        raise tr.error(
            where, f"{name} carries state fields {sorted(value.fields)} at branches, expected {sorted(want.fields)}"
        )
    tr.g.connect(value.ref, phi.name, "in1")


def tree_attribute(tr: Translator, node: ast.Attribute, base: TreeNode) -> Any:
    rec, part, attr = base.recursion, base.part, node.attr
    if attr == "is_leaf":
        return LeafTest(rec)
    if attr == "pos":
        return StateExpr.field(POS)
    if attr in ("left", "right"):
        if part != "branch":
            where = "a leaf has no children" if part == "leaf" else "only the branch part reads children"
            raise tr.error(node, f"t.{attr}: {where}; call node(t.left) and node(t.right) in the else part")
        return TreeChild(0 if attr == "left" else 1, rec)
    if attr == "word":
        if part != "leaf":
            raise tr.error(node, "t.word exists only at leaves; read it inside 'if t.is_leaf:'")
        if rec.words is None:
            rec.words = _rows(tr, node, rec.tree.leaves, "leaf_rows")
        return rec.words
    if attr == "label":
        if part != "any":
            raise tr.error(
                node,
                "t.label is one message per tree node: read it after the 'if t.is_leaf: ... else: "
                "...' block (before the return), where every node passes exactly once",
            )
        if rec.labels is None:
            rec.labels = _rows(tr, node, rec.tree.labels, "label_rows")
        return rec.labels
    raise tr.error(node, f"a tree node has is_leaf, word, label, pos, left and right; not {attr!r}")


def _rows(tr: Translator, where: ast.AST, table: str, stem: str) -> Tensor:
    """One message per row of an input table [pos, value], addressed by ``pos``."""
    existing = tr.g.nodes.get(table)
    if existing is not None and existing.kind == "input":
        source = tr.out(existing)
    else:
        source = tr.out(tr.add(where, O.Input(dtype="int"), [], name=table))
    return tr.out(tr.add(where, O.Flatmap(POS, keep_2d=False), [source], name=tr.g.fresh(stem)))


def child(tr: Translator, node: ast.Call, which: TreeChild) -> ChildResult:
    rec = which.recursion
    rec.calls[which.index] += 1
    if rec.calls[which.index] > 1:
        side = "left" if which.index == 0 else "right"
        raise tr.error(node, f"node(t.{side}) is called twice; call it once and use its result twice")
    return ChildResult(which.index, rec)


def children(tr: Translator, where: ast.AST, rec: Recursion) -> Tensor:
    assert rec.children is not None
    return rec.children


def child_tensor(tr: Translator, where: ast.AST, result: ChildResult) -> Tensor:
    """One child's result alone: a piece of a Split of the Collect's output."""
    rec = result.recursion
    if rec.pieces is None:
        if rec.width is None:
            raise tr.error(
                where,
                "the width of a child's result is not known; pass both children side by side "
                "(nn.concat(left, right)) or give the leaf code a known width",
            )
        assert rec.children is not None
        split = tr.add(where, O.Split([rec.width, rec.width]), [rec.children], name=tr.g.fresh("children_split"))
        rec.pieces = (tr.out(split, "out0"), tr.out(split, "out1"))
    return rec.pieces[result.index]
