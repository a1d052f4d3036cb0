"""What a name holds while the compiler reads a model function: the compile-time values.

* plain Python constants (int, float, bool, str, None, tuples and lists of them): sizes, names, flags;
* :class:`Tensor`: a payload stream, i.e. an output port of a node in the graph being built, with its width,
  dtype and the state fields its messages carry beyond the key and the batch fields (loop counters, tree
  positions), which decide how joins match messages;
* :class:`StateExpr`: an integer known per message from its state (a loop counter, ``len(seq)``, a
  declared field, ``t.pos``), kept as a tree over state field names that becomes a Cond predicate or an Isu
  update in the safe expression language;
* inputs that are not payloads yet (:class:`SequenceInput`, :class:`TreeInput`), a tree node inside the
  recursion (:class:`TreeNode`) and the result of a recursive call (:class:`ChildResult`);
* :class:`Loss` (a loss node; a model returns its losses) and :class:`Undefined` (a name that went out of
  scope, with the reason, so reading it later gives a useful error).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from amp_notebook.ir.graph import Ref


@dataclass(frozen=True)
class Tensor:
    """A payload stream at compile time: the output port that carries it, its width, dtype and state fields."""

    ref: Ref
    width: int | None
    dtype: str  # "float" or "int"
    fields: frozenset[str] = frozenset()

    def describe(self) -> str:
        kind = "an integer" if self.dtype == "int" else "a float"
        width = "" if self.width is None else f" of width {self.width}"
        return f"{kind} tensor{width} (from node {self.ref.node!r})"


@dataclass(frozen=True)
class StateExpr:
    """An integer (or truth value) computed from state fields; ``node`` is an ast expression over ``Name``
    nodes (the fields) and constants."""

    node: ast.expr
    fields: frozenset[str]

    @staticmethod
    def field(name: str) -> StateExpr:
        return StateExpr(ast.Name(id=name, ctx=ast.Load()), frozenset({name}))

    @property
    def source(self) -> str:
        return ast.unparse(self.node)


@dataclass(frozen=True)
class SequenceInput:
    """A sequence input before it is iterated: the (length, batch, ...) payload and its length field."""

    tensor: Tensor
    length: str
    name: str


@dataclass
class TreeInput:
    """A tree input: its two tables' input names; their Flatmaps are made when first read."""

    name: str
    leaves: str
    labels: str


@dataclass
class TreeNode:
    """``t`` inside the recursive function: which part of the body is being compiled (``leaf``, ``branch``
    or ``any``, the part after the leaf/branch split) and the recursion it belongs to."""

    part: str
    recursion: Any


@dataclass(frozen=True)
class ChildResult:
    """``node(t.left)`` (index 0) or ``node(t.right)`` (index 1) inside the branch part of a recursion."""

    index: int
    recursion: Any


@dataclass(frozen=True)
class Loss:
    """What a loss call gave at compile time: the name of the loss node (a loss has no outputs)."""

    name: str


@dataclass(frozen=True)
class Undefined:
    """A name with no value here (assigned on one side of an ``if`` only, say); ``reason`` says why."""

    reason: str


@dataclass
class LocalFunction:
    """A ``def`` inside the model function: inlined at each call, or a recursion over a tree."""

    node: ast.FunctionDef
    scope: Any  # the Scope the def ran in: its free names are read there when it is called


@dataclass(frozen=True)
class Builtin:
    """A builtin the compiler understands (``range``, ``len``, ``min``, ...)."""

    name: str


@dataclass(frozen=True)
class Vocab:
    """An ``amp.nn`` function."""

    name: str


@dataclass(frozen=True)
class Opaque:
    """A value from outside the function that the compiler will not use (a list, an object, a foreign
    function, a module other than amp_notebook's): reading it is an error that says why."""

    name: str
    why: str


@dataclass(frozen=True)
class TreeChild:
    """``t.left`` (index 0) or ``t.right`` (index 1): only the argument of a recursive call."""

    index: int
    recursion: Any


@dataclass(frozen=True)
class LeafTest:
    """``t.is_leaf``: only the condition that splits a recursive function into its leaf and branch parts."""

    recursion: Any
