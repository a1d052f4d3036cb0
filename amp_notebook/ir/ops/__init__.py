"""The closed list of op kinds, in named groups.

An op registers itself by being defined (``Op.__init_subclass__`` puts every class with a ``kind`` into
``base.REGISTRY``); importing the op modules below defines them all, and ``OPS`` is that registry: each kind
(the name used in JSON and by the builder) mapped to its class, in order of definition (the order the
palette lists them in). The groups say what a runtime or an analysis may rely on without isinstance checks
scattered around the code; each is derived from what the op classes declare (``group`` and the flags of
``base.Op``), so a new op joins them by declaring, never by being listed here.
"""

from __future__ import annotations

from collections.abc import Callable

# the op modules, in the palette's order: importing one defines, so registers, its ops
# isort: off
from amp_notebook.ir.ops import payload, norm, dropout, control, aggregate, dynamic, sparse, loss, fused  # noqa: F401

# isort: on
from amp_notebook.ir.ops.aggregate import Bcast, Concat, Group, Split, Ungroup
from amp_notebook.ir.ops.base import REGISTRY, NodeContext, Op, OpError
from amp_notebook.ir.ops.control import Cond, Isu, Phi
from amp_notebook.ir.ops.dropout import Dropout
from amp_notebook.ir.ops.dynamic import Collect, Distribute, Flatmap, Partition
from amp_notebook.ir.ops.facts import Field, describe_op
from amp_notebook.ir.ops.fused import GRUUpdate, LSTMStart, LSTMUpdate, TreeLSTMBranch, TreeLSTMLeaf
from amp_notebook.ir.ops.loss import LOSS_PORT, MSE, SegmentSoftmaxCrossEntropy, Sink, SoftmaxCrossEntropy
from amp_notebook.ir.ops.norm import LayerNorm
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

OPS: dict[str, type[Op]] = dict(REGISTRY)


def _kinds(declares: Callable[[type[Op]], bool]) -> frozenset[str]:
    return frozenset(kind for kind, cls in OPS.items() if declares(cls))


PARAMETERIZED = _kinds(lambda cls: cls.parameterized)
HEAVY = _kinds(lambda cls: cls.heavy)
CONTROL_FLOW = _kinds(lambda cls: cls.group == "control")
AGGREGATION = _kinds(lambda cls: cls.group == "aggregation")
# Ops that change the state of every message they pass, so a loop through one never sees the same state
# twice: the validator accepts any of them in place of an Isu on a cycle (a Collect maps pos -> pos // 2).
STATE_UPDATING = _kinds(lambda cls: cls.updates_state)
# Ops that start the backward pass from their own forward (they emit on LOSS_PORT). A Sink is one (a zero
# gradient for a value nobody reads) but is no objective: TRAINING_LOSSES are the ones a graph needs to train.
LOSSES = _kinds(lambda cls: cls.group == "loss")
TRAINING_LOSSES = _kinds(lambda cls: cls.objective)
# The light elementwise part of one recurrent cell in one node (``ir.cells`` with ``fused=True``).
FUSED_CELLS = _kinds(lambda cls: cls.fused_cell)
INPUTS = frozenset({Input.kind})

__all__ = [
    "AGGREGATION", "CONTROL_FLOW", "FUSED_CELLS", "HEAVY", "INPUTS", "LOSSES", "LOSS_PORT", "MSE", "OPS",
    "PARAMETERIZED", "STATE_UPDATING", "TRAINING_LOSSES", "Add", "Bcast", "Collect", "Concat", "Cond", "Discard",
    "Distribute", "Dropout",
    "Embedding", "Field", "Flatmap", "GRUUpdate", "Gather", "Group", "Identity", "Input", "Isu", "LSTMStart",
    "LSTMUpdate", "LayerNorm", "Linear", "MeanRows", "Mul",
    "NodeContext", "Op", "OpError", "Partition", "Phi", "ReLU", "ScatterMean", "ScatterSum",
    "SegmentSoftmaxCrossEntropy", "SelectRows", "Sigmoid", "Sink", "SoftmaxCrossEntropy", "Split", "Sub", "SumRows",
    "Tanh",
    "TreeLSTMBranch", "TreeLSTMLeaf", "TypedEdgeSum", "Ungroup", "describe_op",
]  # fmt: skip
