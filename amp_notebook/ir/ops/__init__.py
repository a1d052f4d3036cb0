"""The closed list of op kinds, in named groups.

``OPS`` maps each kind (the name used in JSON and by the builder) to its class. The groups say what a
runtime or an analysis may rely on without isinstance checks scattered around the code.
"""

from __future__ import annotations

from amp_notebook.ir.ops.aggregate import Bcast, Concat, Group, Split, Ungroup
from amp_notebook.ir.ops.base import NodeContext, Op, OpError
from amp_notebook.ir.ops.control import Cond, Isu, Phi
from amp_notebook.ir.ops.dynamic import Collect, Distribute, Flatmap, Partition
from amp_notebook.ir.ops.fused import GRUUpdate, TreeLSTMBranch, TreeLSTMLeaf
from amp_notebook.ir.ops.loss import LOSS_PORT, MSE, SegmentSoftmaxCrossEntropy, Sink, SoftmaxCrossEntropy
from amp_notebook.ir.ops.payload import (
    Add,
    Discard,
    Embedding,
    Identity,
    Input,
    Linear,
    Mul,
    ReLU,
    Sigmoid,
    Sub,
    Tanh,
)  # fmt: skip
from amp_notebook.ir.ops.sparse import (
    Gather,
    MeanRows,
    ScatterMean,
    ScatterSum,
    SelectRows,
    SumRows,
    TypedEdgeSum,
)

OPS: dict[str, type[Op]] = {
    cls.kind: cls
    for cls in (
        Input, Identity, Linear, Embedding, ReLU, Tanh, Sigmoid, Add, Sub, Mul,
        Cond, Phi, Isu, Distribute,
        Concat, Split, Bcast, Ungroup, Group, Flatmap, Partition, Collect,
        Gather, ScatterSum, ScatterMean, TypedEdgeSum, SelectRows, SumRows, MeanRows,
        SoftmaxCrossEntropy, SegmentSoftmaxCrossEntropy, MSE, Sink, Discard,
        TreeLSTMLeaf, TreeLSTMBranch, GRUUpdate,
    )
}  # fmt: skip

PARAMETERIZED = frozenset({"linear", "embedding"})
HEAVY = frozenset(kind for kind, cls in OPS.items() if cls.heavy)
CONTROL_FLOW = frozenset({"cond", "phi", "isu", "distribute"})
AGGREGATION = frozenset({
    "concat", "split", "bcast", "ungroup", "group", "flatmap", "partition", "collect",
    "gather", "scatter_sum", "scatter_mean", "typed_edge_sum", "select_rows", "sum_rows", "mean_rows",
})  # fmt: skip
# Ops that change the state of every message they pass, so a loop through one never sees the same state
# twice: the validator accepts any of them in place of an Isu on a cycle (a Collect maps pos -> pos // 2).
STATE_UPDATING = frozenset({"isu", "collect"})
# Ops that start the backward pass from their own forward (they emit on LOSS_PORT). A Sink is one (a zero
# gradient for a value nobody reads) but is no objective: TRAINING_LOSSES are the ones a graph needs to train.
TRAINING_LOSSES = frozenset({"softmax_cross_entropy", "segment_softmax_cross_entropy", "mse"})
LOSSES = TRAINING_LOSSES | {"sink"}
# The light elementwise part of one recurrent cell in one node (``ir.cells`` with ``fused=True``).
FUSED_CELLS = frozenset({"tree_lstm_leaf", "tree_lstm_branch", "gru_update"})
INPUTS = frozenset({"input"})

__all__ = [
    "AGGREGATION", "CONTROL_FLOW", "FUSED_CELLS", "HEAVY", "INPUTS", "LOSSES", "LOSS_PORT", "MSE", "OPS",
    "PARAMETERIZED", "STATE_UPDATING", "TRAINING_LOSSES", "Add", "Bcast", "Collect", "Concat", "Cond", "Discard",
    "Distribute",
    "Embedding", "Flatmap", "GRUUpdate", "Gather", "Group", "Identity", "Input", "Isu", "Linear", "MeanRows", "Mul",
    "NodeContext", "Op", "OpError", "Partition", "Phi", "ReLU", "ScatterMean", "ScatterSum",
    "SegmentSoftmaxCrossEntropy", "SelectRows", "Sigmoid", "Sink", "SoftmaxCrossEntropy", "Split", "Sub", "SumRows",
    "Tanh",
    "TreeLSTMBranch", "TreeLSTMLeaf", "TypedEdgeSum", "Ungroup",
]  # fmt: skip
