"""The vocabulary of models written as Python: what a function given to ``amp.compile`` may call.

Each function here stands for IR nodes. They are never called with arrays: the compiler reads the model's
source, recognises these functions by identity (``nn.linear``, ``amp.nn.linear`` or ``from
amp_notebook.nn import linear`` all work), binds the call's arguments to their signatures and adds the
nodes to the graph. Called outside ``amp.compile`` they raise and say so.

Inputs are the model function's parameters, typed by annotation::

    def rnn(tokens: nn.Sequence(int), target: nn.Ints(), hidden=128): ...

* ``nn.Floats(width)``: a float payload (batch, width), fed from the key's input of the parameter's name
  (``nn.Floats()`` when the width is a constant of the model: then pass ``in_features=`` to the first Linear);
* ``nn.Ints()``: integer ids, class labels or index vectors;
* ``nn.Sequence(int)`` / ``nn.Sequence(float, width=F)``: a time-major sequence (length, batch[, F]) whose
  length is the state field ``length`` (``length=`` names another); ``for x in seq`` loops over it;
* ``nn.Tree()``: one binary tree per key in heap layout (``data.trees.tree_batch``): ``leaf_table`` [pos, word]
  and ``label_table`` [pos, label]; a recursive function ``def node(t)`` walks it;
* ``nn.Field``: an integer state field of every key (``Batch.fields``), for loop bounds and conditions.

Parameters with a default value (``hidden=128``) are compile-time constants; ``amp.compile(fn, hidden=64)``
overrides them.

Parameterized functions (``linear``, ``embedding``, the cells and every op that holds parameters) take
``name=``: one call site is one node, so a call inside a loop or a recursion shares its weights across
iterations, and the same ``name`` at two call sites shares one node between them. They also take the node
attributes ``min_update_frequency=``, ``optimizer=`` and ``worker=``.

Besides the functions written below, every op that declares its amp.nn form (``Op.nn_form``: ``relu``,
``add``, ``gather``, the losses, ...) has a function derived from its declaration: its inputs, then its
configuration fields with their defaults (``dropout(x, p=0.5, seed=0)``), then ``name=`` and ``worker=``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from collections.abc import Sequence as SequenceT
from typing import Any, TypeVar

from amp_notebook.errors import AmpError
from amp_notebook.ir.ops import OPS, Op
from amp_notebook.ir.ops.facts import Field as OpField

# and the functions of the ops that declare their amp.nn form (DECLARED, at the end of this module)
__all__ = [
    "Field",
    "Floats",
    "Ints",
    "Sequence",
    "Tree",
    "concat",
    "embedding",
    "gru_cell",
    "linear",
    "lstm_cell",
    "split",
    "tree_lstm_branch",
    "tree_lstm_leaf",
    "unroll",
    "zeros",
]

F = TypeVar("F", bound=Callable[..., Any])
VOCABULARY: dict[str, Callable[..., Any]] = {}


class OutsideCompileError(AmpError, TypeError):
    """An ``amp.nn`` function was called directly instead of inside a function given to ``amp.compile``."""


def _vocabulary(fn: F) -> F:
    VOCABULARY[fn.__name__] = fn
    return fn


def _outside(name: str) -> OutsideCompileError:
    return OutsideCompileError(
        f"amp.nn.{name} stands for IR nodes inside a model function given to amp.compile; it does not compute on "
        f"arrays. Write the model as a function and call amp.compile(model) to get its graph"
    )


# ------------------------------------------------------------------------------------------- input types
class Floats:
    """A float input of shape (batch, ``width``); without a width, a Linear reading it needs ``in_features=``."""

    def __init__(self, width: int | None = None) -> None:
        self.width = width

    def __repr__(self) -> str:
        return f"nn.Floats({self.width!r})"


class Ints:
    """An integer input: ids, class labels or index vectors (``width`` when it is a table)."""

    def __init__(self, width: int | None = None) -> None:
        self.width = width

    def __repr__(self) -> str:
        return "nn.Ints()" if self.width is None else f"nn.Ints({self.width!r})"


class Sequence:
    """A time-major sequence input (length, batch) of ``int`` ids, or (length, batch, ``width``) of floats; its
    length is the state field ``length`` of every key (list reduction's buckets set it)."""

    def __init__(self, dtype: type = int, width: int | None = None, length: str = "length") -> None:
        self.dtype = dtype
        self.width = width
        self.length = length

    def __repr__(self) -> str:
        return f"nn.Sequence({self.dtype.__name__}, width={self.width!r}, length={self.length!r})"


class Tree:
    """One binary tree per key in heap layout (root ``pos`` 1, children ``2 pos`` and ``2 pos + 1``): the inputs
    ``leaves`` (n_leaves, 2) = [pos, word id] and ``labels`` (n_nodes, 2) = [pos, label], as
    :func:`amp_notebook.data.trees.tree_batch` builds them. In ``def node(t)``: ``t.is_leaf``, ``t.word``
    (leaves), ``t.label`` (every node), ``t.left``, ``t.right``, ``t.pos``."""

    def __init__(self, leaves: str = "leaf_table", labels: str = "label_table") -> None:
        self.leaves = leaves
        self.labels = labels

    def __repr__(self) -> str:
        return f"nn.Tree(leaves={self.leaves!r}, labels={self.labels!r})"


class Field:
    """An integer state field of every key (``Batch.fields``), read in loop bounds and conditions."""

    def __repr__(self) -> str:
        return "nn.Field"


def unroll(items: int | Iterable[Any]) -> Iterable[Any]:
    """``for i in nn.unroll(3):`` repeats the loop body at compile time (i = 0, 1, 2 are constants): one node per
    call site *per repetition*, so ``name=f"layer{i}"`` gives each layer its own weights. ``nn.unroll(sizes)``
    walks a tuple of constants. (A plain ``for i in range(n)`` is a loop in the graph, weights shared.)"""
    raise _outside("unroll")


# ------------------------------------------------------------------------------------------- payload ops
@_vocabulary
def linear(
    x: Any,
    out_features: int,
    *,
    name: str | None = None,
    bias: bool = True,
    in_features: int | None = None,
    min_update_frequency: int | None = None,
    optimizer: Any = None,
    worker: int | None = None,
) -> Any:
    """``x @ W + b`` (a Linear node; W of shape (in, out), in from the width of ``x``)."""
    raise _outside("linear")


@_vocabulary
def embedding(
    ids: Any,
    num_embeddings: int,
    embedding_dim: int,
    *,
    name: str | None = None,
    min_update_frequency: int | None = None,
    optimizer: Any = None,
    worker: int | None = None,
) -> Any:
    """Rows of a table ``E`` (num_embeddings, embedding_dim) looked up by integer ``ids`` (an Embedding node)."""
    raise _outside("embedding")


@_vocabulary
def concat(*xs: Any, name: str | None = None, worker: int | None = None) -> Any:
    """The payloads side by side along the last axis (a Concat node)."""
    raise _outside("concat")


@_vocabulary
def split(x: Any, sizes: SequenceT[int], *, name: str | None = None, worker: int | None = None) -> Any:
    """Pieces of the last axis of the given ``sizes``, as a tuple (a Split node): ``h, c = nn.split(hc, [H, H])``."""
    raise _outside("split")


@_vocabulary
def zeros(width: int, *, name: str | None = None) -> Any:
    """Zeros of shape (batch, ``width``) per key: an initial state (an Input the controller fills)."""
    raise _outside("zeros")


# ------------------------------------------------------------------------------------------------ cells
@_vocabulary
def lstm_cell(
    x: Any,
    h: Any,
    c: Any,
    hidden: int,
    *,
    name: str,
    min_update_frequency: int | None = None,
    optimizer: Any = None,
    worker: int | None = None,
) -> Any:
    """An LSTM step (gates i, f, g, o as torch.nn.LSTMCell, one Linear over [x; h]); returns ``(h, c)``."""
    raise _outside("lstm_cell")


@_vocabulary
def gru_cell(
    x: Any,
    h: Any,
    hidden: int,
    *,
    name: str,
    fused: bool = True,
    min_update_frequency: int | None = None,
    optimizer: Any = None,
    worker: int | None = None,
) -> Any:
    """A GRU step (gates r, z, n as torch.nn.GRUCell: Linears '{name}_x' on x and '{name}_h' on h); returns h."""
    raise _outside("gru_cell")


@_vocabulary
def tree_lstm_leaf(
    x: Any,
    hidden: int,
    *,
    name: str,
    fused: bool = True,
    min_update_frequency: int | None = None,
    optimizer: Any = None,
    worker: int | None = None,
) -> Any:
    """A Tree-LSTM leaf: input vector -> node state [h; c] (width 2 hidden)."""
    raise _outside("tree_lstm_leaf")


@_vocabulary
def tree_lstm_branch(
    left: Any,
    right: Any,
    hidden: int,
    *,
    name: str,
    fused: bool = True,
    min_update_frequency: int | None = None,
    optimizer: Any = None,
    worker: int | None = None,
) -> Any:
    """A binary Tree-LSTM branch: the children's states [h; c] -> the node's [h; c]."""
    raise _outside("tree_lstm_branch")


# ------------------------------------------------------------------------------- the ops' own functions
def argument(port: str) -> str:
    """The amp.nn argument of an op's input port: the port's name, ``x`` for ``in`` (a Python keyword)."""
    return "x" if port == "in" else port


def op_arguments(cls: type[Op]) -> list[OpField]:
    """The fields of an op that its amp.nn function takes as arguments: all but ``match_on`` (the compiler
    joins on the state fields the inputs share) and the widths of inputs (read from the input's width)."""
    return [f for f in cls.fields if f.name != "match_on" and f.from_width is None]


def _declared(cls: type[Op]) -> Callable[..., Any]:
    """The amp.nn function of an op that declares its form (``Op.nn_form``): its inputs, its fields with their
    defaults, then the node's ``name=`` and attributes. Like every amp.nn function it only stands for the op."""
    form = cls.nn_form
    assert form is not None
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter(arg, positional) for arg, _ in form.inputs]
    for f in op_arguments(cls):
        params.append(
            inspect.Parameter(f.name, positional, default=inspect.Parameter.empty if f.required else f.default)
        )
    attrs = ("name", "min_update_frequency", "optimizer", "worker") if cls.parameterized else ("name", "worker")
    params += [inspect.Parameter(a, inspect.Parameter.KEYWORD_ONLY, default=None) for a in attrs]

    def stands_for_the_op(*args: Any, **kwargs: Any) -> Any:
        raise _outside(form.name)

    stands_for_the_op.__name__ = stands_for_the_op.__qualname__ = form.name
    stands_for_the_op.__doc__ = form.doc
    stands_for_the_op.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return stands_for_the_op


DECLARED: dict[str, type[Op]] = {cls.nn_form.name: cls for cls in OPS.values() if cls.nn_form is not None}
for _name, _cls in DECLARED.items():
    globals()[_name] = _vocabulary(_declared(_cls))
__all__ += sorted(DECLARED)

INPUT_TYPES: tuple[type, ...] = (Floats, Ints, Sequence, Tree, Field)
