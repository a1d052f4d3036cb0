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

Parameterized functions (``linear``, ``embedding`` and the cells) take ``name=``: one call site is one node,
so a call inside a loop or a recursion shares its weights across iterations, and the same ``name`` at two
call sites shares one node between them. They also take the node attributes ``min_update_frequency=``,
``optimizer=`` and ``worker=``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from collections.abc import Sequence as SequenceT
from typing import Any, TypeVar

from amp_notebook.errors import AmpError

__all__ = [
    "Field",
    "Floats",
    "Ints",
    "Sequence",
    "Tree",
    "add",
    "concat",
    "embedding",
    "gather",
    "gru_cell",
    "linear",
    "lstm_cell",
    "mean_rows",
    "mse",
    "mul",
    "relu",
    "scatter_mean",
    "scatter_sum",
    "segment_softmax_cross_entropy",
    "select_rows",
    "sigmoid",
    "softmax_cross_entropy",
    "split",
    "sub",
    "sum_rows",
    "tanh",
    "tree_lstm_branch",
    "tree_lstm_leaf",
    "typed_edge_sum",
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
def relu(x: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """``max(x, 0)`` elementwise."""
    raise _outside("relu")


@_vocabulary
def tanh(x: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """``tanh(x)`` elementwise."""
    raise _outside("tanh")


@_vocabulary
def sigmoid(x: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """``1 / (1 + exp(-x))`` elementwise."""
    raise _outside("sigmoid")


@_vocabulary
def add(a: Any, b: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """``a + b`` elementwise (also written ``a + b``)."""
    raise _outside("add")


@_vocabulary
def sub(a: Any, b: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """``a - b`` elementwise (also written ``a - b``)."""
    raise _outside("sub")


@_vocabulary
def mul(a: Any, b: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """``a * b`` elementwise (also written ``a * b``)."""
    raise _outside("mul")


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


# ------------------------------------------------------------------------------- structures in the data
@_vocabulary
def gather(x: Any, index: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """``x[index]``: rows of ``x`` (N, H) at an int index (E,)."""
    raise _outside("gather")


@_vocabulary
def scatter_sum(x: Any, index: Any, like: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """Rows of ``x`` (E, H) summed into ``len(like)`` rows at ``index`` (E,)."""
    raise _outside("scatter_sum")


@_vocabulary
def scatter_mean(x: Any, index: Any, like: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """As :func:`scatter_sum`, divided by each row's number of incoming rows."""
    raise _outside("scatter_mean")


@_vocabulary
def typed_edge_sum(x: Any, edges: Any, types: int, *, name: str | None = None, worker: int | None = None) -> Any:
    """Messages under ``types`` edge types (N, types * H) summed into the edges' destinations
    (``edges`` (2, E) = [src * types + type, dst])."""
    raise _outside("typed_edge_sum")


@_vocabulary
def select_rows(x: Any, rows: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """The rows of ``x`` picked by a boolean mask or an int index."""
    raise _outside("select_rows")


@_vocabulary
def sum_rows(x: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """(N, ...) -> (1, ...) by summing rows."""
    raise _outside("sum_rows")


@_vocabulary
def mean_rows(x: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """(N, ...) -> (1, ...) by averaging rows."""
    raise _outside("mean_rows")


# ----------------------------------------------------------------------------------------------- losses
@_vocabulary
def softmax_cross_entropy(logits: Any, target: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """Mean cross-entropy of softmax(logits) against integer class ids; reports accuracy too."""
    raise _outside("softmax_cross_entropy")


@_vocabulary
def mse(pred: Any, target: Any, *, name: str | None = None, worker: int | None = None) -> Any:
    """Mean squared error over all elements."""
    raise _outside("mse")


@_vocabulary
def segment_softmax_cross_entropy(
    scores: Any, segments: Any, target: Any, *, name: str | None = None, worker: int | None = None
) -> Any:
    """Node selection: a softmax over each graph's rows of ``scores`` against each graph's answer row."""
    raise _outside("segment_softmax_cross_entropy")


INPUT_TYPES: tuple[type, ...] = (Floats, Ints, Sequence, Tree, Field)
