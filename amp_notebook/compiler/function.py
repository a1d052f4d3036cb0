"""The model function itself: its parameters become inputs and constants, its body the graph, its return the
losses.

A parameter annotated with an ``nn`` input type becomes an Input node named after the parameter (a tree
becomes the two table inputs its recursion reads); a parameter with a default value is a compile-time
constant, which ``amp.compile(fn, name=value)`` overrides. The body is translated, and the function must
return its loss (or a tuple of losses, or nothing when it only creates them): a graph's outputs are its
losses.
"""

from __future__ import annotations

import ast
from typing import Any

from amp_notebook.compiler import nn, scan
from amp_notebook.compiler.expressions import REFUSED_EXPRESSIONS
from amp_notebook.compiler.source import Source, is_constant
from amp_notebook.compiler.translate import Return, Translator
from amp_notebook.compiler.values import Builtin, Loss, SequenceInput, StateExpr, TreeInput
from amp_notebook.ir import ops as O

_DTYPES = {"int": "int", "float": "float"}


def translate_model(source: Source, constants: dict[str, Any]) -> Translator:
    tr = Translator(source)
    tree = source.tree
    found = scan.yields(tree)
    if found is not None:
        raise tr.error(found, REFUSED_EXPRESSIONS[type(found).__name__])
    spec = tree.args
    if spec.vararg is not None or spec.kwarg is not None:
        raise tr.error(tree, "*args and **kwargs are not compiled: name each input and constant")
    params = [*spec.posonlyargs, *spec.args, *spec.kwonlyargs]
    names = [a.arg for a in params]
    unknown = [k for k in constants if k not in source.defaults]
    if unknown:
        inputs = [n for n in names if n not in source.defaults]
        what = "is an input" if unknown[0] in inputs else "is not a parameter"
        raise tr.error(
            tree,
            f"amp.compile(..., {unknown[0]}=...): {unknown[0]} {what} of {tree.name}(); only "
            f"parameters with a default can be set: {sorted(source.defaults)}",
        )
    tr.g.line = source.line(tree)
    for arg in params:  # constants first: an input's annotation may read them (x: nn.Floats(width))
        name = arg.arg
        if name in source.defaults:
            value = constants.get(name, source.defaults[name])
            if not is_constant(value):
                raise tr.error(
                    arg,
                    f"the default of {name} is a {type(value).__name__}; defaults are compile-time "
                    "constants (int, float, str, bool, None or a tuple of them)",
                )
            tr.bind(name, value)
    for arg in params:
        name = arg.arg
        if name in source.defaults:
            continue
        if arg.annotation is not None:
            tr.bind(name, _input(tr, arg, _annotation(tr, arg.annotation)))
        else:
            raise tr.error(
                arg,
                f"the parameter {name} has no type and no default: annotate an input "
                f"({name}: nn.Floats(64), nn.Ints(), nn.Sequence(int), nn.Tree(), nn.Field) or "
                f"give a constant a default ({name}=128)",
            )
    try:
        tr.block(tree.body)
    except Return as ret:
        _check_result(tr, ret.node, ret.value)
    if not tr.losses:
        raise tr.error(
            tree,
            f"{tree.name}() makes no loss, so its graph cannot train: end it with "
            "return nn.softmax_cross_entropy(logits, target) (or nn.mse)",
        )
    return tr


def _check_result(tr: Translator, node: ast.Return, value: Any) -> None:
    if value is None or isinstance(value, Loss):
        return
    if isinstance(value, tuple | list) and all(isinstance(v, Loss) for v in value):
        return
    raise tr.error(
        node,
        "a model returns its loss (return nn.softmax_cross_entropy(logits, target)), a tuple of "
        "losses, or nothing: a graph's outputs are its losses, so a tensor cannot be returned",
    )


def _annotation(tr: Translator, node: ast.expr) -> Any:
    """An ``nn`` input type from its annotation, built from constant arguments (never by running the text)."""
    call = node if isinstance(node, ast.Call) else None
    kind = tr.expr(call.func if call is not None else node)
    if not (isinstance(kind, type) and kind in nn.INPUT_TYPES):
        raise tr.error(
            node,
            f"the annotation {tr.source.snippet(node)} is not an amp.nn input type (nn.Floats(64), "
            "nn.Ints(), nn.Sequence(int), nn.Tree(), nn.Field)",
        )
    args, kwargs = [], {}
    if call is not None:
        args = [_annotation_arg(tr, a) for a in call.args]
        kwargs = {k.arg: _annotation_arg(tr, k.value) for k in call.keywords if k.arg is not None}
    try:
        return kind(*args, **kwargs)
    except TypeError as exc:
        raise tr.error(node, f"{tr.source.snippet(node)}: {exc}") from None


def _annotation_arg(tr: Translator, node: ast.expr) -> Any:
    value = tr.expr(node)
    if isinstance(value, Builtin) and value.name in _DTYPES:
        return {"int": int, "float": float}[value.name]
    if not is_constant(value):
        raise tr.error(node, "input types take constant arguments")
    return value


def _positive(tr: Translator, arg: ast.arg, what: str, value: Any, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise tr.error(arg, f"{arg.arg}: {what} must be a positive int, got {value!r}")
    return value


def _input(tr: Translator, arg: ast.arg, spec: Any) -> Any:
    name = arg.arg
    if isinstance(spec, nn.Floats):
        width = _positive(tr, arg, "the width", spec.width, optional=True)
        return tr.out(tr.add(arg, O.Input(width=width, dtype="float"), [], name=name))
    if isinstance(spec, nn.Ints):
        width = _positive(tr, arg, "the width", spec.width, optional=True)
        return tr.out(tr.add(arg, O.Input(width=width, dtype="int"), [], name=name))
    if isinstance(spec, nn.Sequence):
        if spec.dtype not in (int, float):
            raise tr.error(arg, f"{name}: nn.Sequence holds int or float steps, got {spec.dtype!r}")
        dtype = "int" if spec.dtype is int else "float"
        width = _positive(tr, arg, "the width", spec.width, optional=dtype == "int")
        if not isinstance(spec.length, str) or not spec.length.isidentifier():
            raise tr.error(arg, f"{name}: length names a state field, got {spec.length!r}")
        tr.fields.add(spec.length)
        tensor = tr.out(tr.add(arg, O.Input(width=width, dtype=dtype), [], name=name))
        return SequenceInput(tensor, spec.length, name)
    if isinstance(spec, nn.Tree):
        for table in (spec.leaves, spec.labels):
            if not isinstance(table, str) or not table:
                raise tr.error(arg, f"{name}: nn.Tree names its two input tables, got {table!r}")
        return TreeInput(name, spec.leaves, spec.labels)
    if isinstance(spec, nn.Field) or spec is nn.Field:
        tr.fields.add(name)
        return StateExpr.field(name)
    raise tr.error(arg, f"{name}: unknown input type {spec!r}")  # pragma: no cover - _annotation checks
