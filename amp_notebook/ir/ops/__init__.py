"""The closed list of op kinds, in named groups.

``OPS`` maps each kind (the name used in JSON and by the builder) to its class. The groups say what a
runtime or an analysis may rely on without isinstance checks scattered around the code.
"""

from __future__ import annotations

from amp_notebook.ir.ops.aggregate import Bcast, Concat, Group, Split, Ungroup
from amp_notebook.ir.ops.base import NodeContext, Op, OpError
from amp_notebook.ir.ops.control import Cond, Isu, Phi
from amp_notebook.ir.ops.loss import LOSS_PORT, MSE, SoftmaxCrossEntropy
from amp_notebook.ir.ops.payload import Add, Embedding, Identity, Input, Linear, Mul, ReLU, Sigmoid, Tanh

OPS: dict[str, type[Op]] = {
    cls.kind: cls
    for cls in (
        Input, Identity, Linear, Embedding, ReLU, Tanh, Sigmoid, Add, Mul,
        Cond, Phi, Isu,
        Concat, Split, Bcast, Ungroup, Group,
        SoftmaxCrossEntropy, MSE,
    )
}

PARAMETERIZED = frozenset({"linear", "embedding"})
HEAVY = frozenset(kind for kind, cls in OPS.items() if cls.heavy)
CONTROL_FLOW = frozenset({"cond", "phi", "isu"})
AGGREGATION = frozenset({"concat", "split", "bcast", "ungroup", "group"})
LOSSES = frozenset({"softmax_cross_entropy", "mse"})
INPUTS = frozenset({"input"})

__all__ = [
    "AGGREGATION", "CONTROL_FLOW", "HEAVY", "INPUTS", "LOSSES", "LOSS_PORT", "MSE", "OPS", "PARAMETERIZED",
    "Add", "Bcast", "Concat", "Cond", "Embedding", "Group", "Identity", "Input", "Isu", "Linear", "Mul",
    "NodeContext", "Op", "OpError", "Phi", "ReLU", "Sigmoid", "SoftmaxCrossEntropy", "Split", "Tanh", "Ungroup",
]  # fmt: skip
