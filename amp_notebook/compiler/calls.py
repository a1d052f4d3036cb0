"""Calls in a model function: the ``amp.nn`` vocabulary, a few builtins, and nested functions.

A nested ``def`` is inlined at each call (its body is translated with its parameters bound to the
arguments, so each call site builds its own nodes), unless it walks a tree: called on an ``nn.Tree`` input
it becomes the recursion of ``recursion.py``. Every other call is refused, naming what was called: the
compiler never runs code from the model's module, so a call it does not understand cannot be part of the
graph (and ``print``, ``list.append`` or ``open`` would be side effects, not graph nodes).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from amp_notebook.compiler import nn
from amp_notebook.compiler.source import MISSING, is_amp_module, is_constant, module_attribute
from amp_notebook.compiler.values import (
    Builtin,
    ChildResult,
    LocalFunction,
    Opaque,
    SequenceInput,
    StateExpr,
    Tensor,
    TreeChild,
    TreeInput,
    Vocab,
)

if TYPE_CHECKING:
    from amp_notebook.compiler.translate import Translator

MAX_INLINE_DEPTH = 32
_LOOP_HEADERS = ("range", "enumerate", "zip", "unroll")


def call(tr: Translator, node: ast.Call) -> Any:
    func = _callee(tr, node)
    args = tr.sequence(node.args)
    kwargs: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise tr.error(kw, "**keyword unpacking is not compiled; pass each keyword by name")
        kwargs[kw.arg] = tr.expr(kw.value)
    if isinstance(func, Vocab):
        from amp_notebook.compiler.vocabulary import call_vocabulary

        return call_vocabulary(tr, node, func.name, args, kwargs)
    if isinstance(func, Builtin):
        return _builtin(tr, node, func.name, args, kwargs)
    if isinstance(func, LocalFunction):
        return _local(tr, node, func, args, kwargs)
    if isinstance(func, type) and func in nn.INPUT_TYPES:
        raise tr.error(
            node,
            f"nn.{func.__name__} types a parameter of the model (x: nn.{func.__name__}(...)); "
            "it is not called in the body",
        )
    if isinstance(func, Opaque):
        raise tr.error(node, func.why)
    raise tr.error(node, f"{tr.source.snippet(node.func)} is a {type(func).__name__}, which cannot be called here")


def _callee(tr: Translator, node: ast.Call) -> Any:
    target = node.func
    if not isinstance(target, ast.Attribute):
        return tr.expr(target)
    base = tr.expr(target.value)
    if isinstance(base, Tensor | SequenceInput):
        raise tr.error(
            node,
            f"{tr.source.snippet(node)}: method calls on tensors are not IR ops (payloads exist only when the graph "
            "runs); use the amp.nn functions: nn.relu(h), nn.linear(h, n), nn.split(h, sizes), ...",
        )
    if is_amp_module(base):
        value = module_attribute(base, target.attr)
        if value is MISSING:
            raise tr.error(node, f"{base.__name__} has no attribute {target.attr!r}")
        return tr.classify(f"{base.__name__}.{target.attr}", value, node)
    raise tr.error(
        node,
        f"{tr.source.snippet(node)}: method calls are not compiled (they may change objects, and the compiler runs "
        "nothing from the model); only amp.nn functions, len/range/enumerate/zip/min/max/abs and nested defs are",
    )


def _builtin(tr: Translator, node: ast.Call, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    if name in _LOOP_HEADERS:
        what = "nn.unroll" if name == "unroll" else name
        raise tr.error(node, f"{what}(...) is compiled only as the header of a for loop (for i in {what}(...):)")
    if kwargs:
        raise tr.error(node, f"{name}() takes no keyword arguments here")
    if name == "len":
        (value,) = _arity(tr, node, name, args, 1)
        if isinstance(value, SequenceInput):
            return StateExpr.field(value.length)
        if isinstance(value, tuple | list | str):
            return len(value)
        raise tr.error(
            node,
            f"len() of {type(value).__name__ if not isinstance(value, Tensor) else 'a tensor'} is not known at compile "
            "time; len(seq) of an nn.Sequence input is its length field",
        )
    if name in ("min", "max", "abs"):
        if name == "abs":
            _arity(tr, node, name, args, 1)
        elif len(args) < 2:
            raise tr.error(node, f"{name}() needs at least two values here")
        if any(isinstance(a, Tensor) for a in args):
            raise tr.error(node, f"{name}() of tensors is payload-dependent; it is compiled on state values only")
        if any(isinstance(a, StateExpr) for a in args):
            parts = [tr.state_node(node, a) for a in args]
            fields = frozenset().union(*[a.fields for a in args if isinstance(a, StateExpr)])
            return StateExpr(ast.Call(ast.Name(name, ast.Load()), parts, []), fields)
        if not all(isinstance(a, int | float) for a in args):
            raise tr.error(node, f"{name}() is compiled on numbers only")
        return {"min": min, "max": max, "abs": abs}[name](*args)
    (value,) = _arity(tr, node, name, args, 1)
    if not (is_constant(value) or isinstance(value, list)):
        raise tr.error(node, f"{name}() is compiled on constants only")
    try:
        return {"int": int, "float": float, "str": str, "bool": bool, "tuple": tuple}[name](value)
    except (TypeError, ValueError) as exc:
        raise tr.error(node, f"cannot fold {name}({value!r}): {exc}") from None


def _arity(tr: Translator, node: ast.Call, name: str, args: list[Any], n: int) -> list[Any]:
    if len(args) != n:
        raise tr.error(node, f"{name}() takes {n} argument(s) here, got {len(args)}")
    return args


def _local(tr: Translator, node: ast.Call, fn: LocalFunction, args: list[Any], kwargs: dict[str, Any]) -> Any:
    from amp_notebook.compiler import recursion

    rec = tr.recursion
    if rec is not None and fn is rec.function:
        if len(args) != 1 or kwargs or not isinstance(args[0], TreeChild):
            raise tr.error(node, f"{fn.node.name}() may call itself only on t.left or t.right")
        return recursion.child(tr, node, args[0])
    if any(isinstance(a, TreeInput) for a in [*args, *kwargs.values()]):
        return recursion.translate_recursion(tr, node, fn, args, kwargs)
    if any(isinstance(a, TreeChild | ChildResult) for a in [*args, *kwargs.values()]) and rec is None:
        raise tr.error(node, "t.left and t.right are read only inside the recursion over a tree")
    return inline(tr, node, fn, args, kwargs)


def inline(tr: Translator, node: ast.Call, fn: LocalFunction, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Translate ``fn``'s body where it is called, its parameters bound to the arguments."""
    from amp_notebook.compiler.translate import Return, Scope

    if fn in tr.inlining or len(tr.inlining) >= MAX_INLINE_DEPTH:
        raise tr.error(
            node,
            f"{fn.node.name}() calls itself; recursion is compiled only over a tree input: def node(t): ... "
            "node(t.left) ... node(t.right), called as node(tree) with tree: nn.Tree()",
        )
    scope = Scope(parent=fn.scope)
    scope.vars.update(_bind_parameters(tr, node, fn, args, kwargs))
    saved = tr.scope
    tr.scope = scope
    tr.inlining.append(fn)
    try:
        tr.block(fn.node.body)
        return None
    except Return as ret:
        return ret.value
    finally:
        tr.inlining.pop()
        tr.scope = saved


def _bind_parameters(
    tr: Translator, node: ast.Call, fn: LocalFunction, args: list[Any], kwargs: dict[str, Any]
) -> dict[str, Any]:
    spec = fn.node.args
    if spec.vararg is not None or spec.kwarg is not None:
        raise tr.error(fn.node, f"{fn.node.name}(): *args and **kwargs are not compiled; name each parameter")
    positional = [a.arg for a in [*spec.posonlyargs, *spec.args]]
    names = positional + [a.arg for a in spec.kwonlyargs]
    if len(args) > len(positional):
        raise tr.error(node, f"{fn.node.name}() takes {len(positional)} positional arguments, got {len(args)}")
    bound = dict(zip(positional, args, strict=False))
    for key, value in kwargs.items():
        if key not in names or key in bound:
            raise tr.error(node, f"{fn.node.name}() got an unexpected or repeated argument {key!r}")
        bound[key] = value
    defaults = dict(zip(positional[len(positional) - len(spec.defaults) :], spec.defaults, strict=True))
    defaults.update({a.arg: d for a, d in zip(spec.kwonlyargs, spec.kw_defaults, strict=True) if d is not None})
    saved = tr.scope
    tr.scope = fn.scope
    try:
        for key in names:
            if key not in bound:
                if key not in defaults:
                    raise tr.error(node, f"{fn.node.name}() is missing the argument {key!r}")
                bound[key] = tr.expr(defaults[key])
    finally:
        tr.scope = saved
    return bound
