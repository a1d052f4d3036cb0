"""Every differentiable op's backward against central finite differences, through one harness.

For a case (an op, its parameters, and the messages fed to its input ports), the harness runs forward
with a fresh :class:`NodeContext`, projects every output payload that carries a gradient onto a fixed
random tensor (a loss contributes its value), and calls backward with those projection tensors as the
incoming gradients (a loss gets ``backward(ctx, "loss", 1.0, state)``). The gradients that come back,
per (input port, state), and the parameter gradients accumulated in ``ctx.grads`` must match central
finite differences of that scalar. Along the way it checks the caching contract: nothing is cached
when ``ctx.train`` is False, and every cache and join entry is gone once backward has run.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from amp_notebook.ir.message import State
from amp_notebook.ir.ops import (
    LOSS_PORT,
    MSE,
    OPS,
    Add,
    Bcast,
    Collect,
    Concat,
    Cond,
    Discard,
    Distribute,
    Dropout,
    Embedding,
    Flatmap,
    Gather,
    Group,
    GRUUpdate,
    Identity,
    Input,
    Isu,
    LayerNorm,
    Linear,
    LSTMStart,
    LSTMUpdate,
    MeanRows,
    Mul,
    NodeContext,
    Op,
    OpError,
    Partition,
    Phi,
    ReLU,
    ScatterMean,
    ScatterSum,
    SegmentSoftmaxCrossEntropy,
    SelectRows,
    Sigmoid,
    Sink,
    SoftmaxCrossEntropy,
    Split,
    Sub,
    SumRows,
    Tanh,
    TreeLSTMBranch,
    TreeLSTMLeaf,
    TypedEdgeSum,
    Ungroup,
)

EPS = 1e-6
RTOL = 1e-6
ATOL = 1e-8

# Op kinds that need no gradient case. Input is the only one: it has no input ports and no parameters,
# so there is nothing to differentiate; gradients stop there (its backward emits nothing, checked below).
EXEMPT = {"input": "no inputs and no parameters: the gradient stops at a graph input"}

Feed = tuple[str, np.ndarray, State]


@dataclass
class Case:
    id: str
    op: Op
    feeds: list[Feed]
    params: dict[str, np.ndarray] = field(default_factory=dict)
    grad_inputs: frozenset[str] | None = None  # default: every differentiable input port
    grad_outputs: frozenset[str] | None = None  # default: every output port

    def inputs_with_grad(self) -> frozenset[str]:
        if self.grad_inputs is not None:
            return self.grad_inputs
        return frozenset(self.op.input_ports()) - self.op.nondiff_inputs

    def outputs_with_grad(self) -> frozenset[str]:
        if self.grad_outputs is not None:
            return self.grad_outputs
        return frozenset(self.op.output_ports())


def st(**fields: Any) -> State:
    return State(key=fields.pop("key", 0), **fields)


def _cases() -> list[Case]:
    rng = np.random.default_rng(20170101)

    def randn(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape)

    def away_from_zero(*shape: int) -> np.ndarray:
        return rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.1, 2.0, size=shape)

    s = st()
    cases = [
        Case("identity", Identity(), [("in", randn(3, 4), s)]),
        Case("linear", Linear(4, 3), [("in", randn(5, 4), s)], {"W": randn(4, 3), "b": randn(3)}),
        Case("linear_no_bias", Linear(4, 3, bias=False), [("in", randn(5, 4), s)], {"W": randn(4, 3)}),
        # an input fed by data (no gradient wanted): parameters only, nothing sent back
        Case(
            "linear_params_only",
            Linear(4, 3),
            [("in", randn(5, 4), s)],
            {"W": randn(4, 3), "b": randn(3)},
            grad_inputs=frozenset(),
        ),
        # repeated ids accumulate into the same table row
        Case("embedding", Embedding(6, 3), [("in", np.array([0, 2, 2, 5, 0, 1]), s)], {"E": randn(6, 3)}),
        Case(
            "embedding_2d_ids",
            Embedding(5, 2),
            [("in", np.array([[0, 4, 4], [1, 0, 4]]), s)],
            {"E": randn(5, 2)},
        ),
        # normalized over the last axis with a learned gain and bias; rows of very different scales
        Case(
            "layer_norm",
            LayerNorm(5),
            [("in", randn(4, 5) * np.array([[0.1], [1.0], [3.0], [20.0]]) + 2.0, s)],
            {"g": randn(5), "b": randn(5)},
        ),
        Case("layer_norm_3d_eps", LayerNorm(3, eps=0.5), [("in", randn(2, 4, 3), s)], {"g": randn(3), "b": randn(3)}),
        Case(
            "layer_norm_params_only",
            LayerNorm(4),
            [("in", randn(3, 4), s)],
            {"g": randn(4), "b": randn(4)},
            grad_inputs=frozenset(),
        ),
        # the mask is a function of the message's state: two messages, two masks, each checked
        Case("dropout", Dropout(0.3, seed=5), [("in", randn(4, 6), st(t=1)), ("in", randn(4, 6), st(t=2))]),
        Case("dropout_all_kept", Dropout(0.0), [("in", randn(3, 2), s)]),
        Case("relu", ReLU(), [("in", away_from_zero(4, 5), s)]),
        Case("tanh", Tanh(), [("in", 2.0 * randn(4, 5), s)]),
        Case(
            "sigmoid",
            Sigmoid(),
            [
                (
                    "in",
                    np.concatenate([[-40.0, -12.0, -3.0, -0.5, 0.0, 0.5, 3.0, 12.0, 40.0], 3.0 * randn(9)]).reshape(
                        3, 6
                    ),
                    s,
                )
            ],
        ),
        Case("add", Add(), [("a", randn(3, 4), s), ("b", randn(3, 4), s)]),
        Case(
            "add_match_on",
            Add(match_on=("t",)),
            [("b", randn(3, 4), st(t=2, length=5)), ("a", randn(3, 4), st(t=2))],
        ),
        Case("mul", Mul(), [("a", randn(3, 4), s), ("b", randn(3, 4), s)]),
        Case("concat_2", Concat(2), [("in0", randn(3, 2), s), ("in1", randn(3, 4), s)]),
        Case(
            "concat_3_out_of_order",
            Concat(3, match_on=("t",)),
            [
                ("in2", randn(3, 1), st(t=1)),
                ("in0", randn(3, 2), st(t=1, length=4)),
                ("in1", randn(3, 3), st(t=1)),
            ],
        ),
        Case("split", Split([2, 3, 1]), [("in", randn(4, 6), s)]),
        Case(
            "split_some_outputs",
            Split([2, 3, 1]),
            [("in", randn(4, 6), s)],
            grad_outputs=frozenset({"out0", "out2"}),
        ),
        Case("split_one_output", Split([2, 3]), [("in", randn(4, 5), s)], grad_outputs=frozenset({"out1"})),
        Case("bcast", Bcast(3), [("in", randn(3, 4), s)]),
        Case("bcast_some_outputs", Bcast(3), [("in", randn(3, 4), s)], grad_outputs=frozenset({"out0", "out2"})),
        Case("ungroup", Ungroup("t"), [("in", randn(4, 3), st(length=4))]),
        Case("ungroup_3d", Ungroup("step"), [("in", randn(3, 2, 2), st(length=3))]),
        # chunks of rows keep the leading axis: a time-major (length * bucket, H) matrix -> (bucket, H) per step
        Case("ungroup_chunk", Ungroup("t", chunk=2), [("in", randn(6, 3), st(length=3))]),
        Case("ungroup_chunk_expression", Ungroup("c", chunk="bucket"), [("in", randn(4, 3), st(bucket=1))]),
        Case("group", Group("length", "t"), [("in", randn(3), st(length=4, t=i)) for i in (2, 0, 3, 1)]),
        Case(
            "cond",
            Cond("t < length"),
            [("in", randn(2, 3), st(t=1, length=3)), ("in", randn(2, 3), st(t=3, length=3))],
        ),
        Case("cond_3_way", Cond("key % 3", branches=3), [("in", randn(2, 3), st(key=k)) for k in (4, 0, 2)]),
        Case(
            "phi",
            Phi(3),
            [("in0", randn(2, 3), st(t=0)), ("in2", randn(2, 3), st(t=1)), ("in1", randn(2, 3), st(t=2))],
        ),
        Case("isu", Isu({"t": "t + 1"}, {"t": "t - 1"}), [("in", randn(2, 3), st(t=3, length=5))]),
        Case("isu_add_field", Isu({"t": "0"}, {"t": None}), [("in", randn(2, 3), st(length=5))]),
        Case(
            "isu_two_fields",
            Isu({"t": "t + 1", "u": "u * 2 + t"}, {"t": "t - 1", "u": "(u - t + 1) // 2"}),
            [("in", randn(2, 3), st(t=3, u=7))],
        ),
        Case(
            "softmax_cross_entropy",
            SoftmaxCrossEntropy(),
            [("logits", 3.0 * randn(5, 4), s), ("target", np.array([0, 3, 1, 1, 2]), s)],
        ),
        Case(
            "softmax_cross_entropy_target_first_match_on",
            SoftmaxCrossEntropy(match_on=("key",)),
            [("target", np.array([2, 0, 1]), st(length=3)), ("logits", randn(3, 3), st(length=3, t=3))],
        ),
        Case(
            "softmax_cross_entropy_large_logits",
            SoftmaxCrossEntropy(),
            [
                ("logits", np.array([[800.0, -800.0, 0.0], [-1000.0, 1000.0, 999.0]]), s),
                ("target", np.array([1, 2]), s),
            ],
        ),
        Case(
            "segment_softmax_cross_entropy",
            SegmentSoftmaxCrossEntropy(),
            [
                ("scores", 3.0 * randn(7, 1), s),
                ("segments", np.array([0, 0, 0, 1, 1, 2, 2]), s),
                ("target", np.array([1, 3, 6]), s),
            ],
        ),
        Case(
            "segment_softmax_cross_entropy_flat_target_first",
            SegmentSoftmaxCrossEntropy(match_on=()),
            [
                ("target", np.array([0, 4]), st(length=2)),
                ("segments", np.array([0, 0, 0, 1, 1]), st(length=2)),
                ("scores", randn(5), st(length=2, t=3)),
            ],
        ),
        Case("mse", MSE(), [("pred", randn(3, 2), s), ("target", randn(3, 2), s)]),
        Case("mse_flat_target", MSE(), [("target", randn(6), s), ("pred", randn(3, 2), s)]),
        Case("sub", Sub(), [("b", randn(3, 4), s), ("a", randn(3, 4), s)]),
        Case("discard", Discard(), [("in", randn(2, 3), s)]),
        # a zero gradient of the payload's shape: the objective does not depend on what ends here
        Case("sink", Sink(), [("in", randn(2, 3), st(t=4))]),
        # dynamic (dis)aggregation by state: column 0 of a float table holds the positions (gradient 0 there)
        Case("flatmap", Flatmap("pos"), [("in", np.column_stack([[5.0, 2.0, 7.0, 3.0], randn(4, 3)]), s)]),
        Case(
            "flatmap_1d_rows",
            Flatmap("node", keep_2d=False),
            [("in", np.column_stack([[0.0, 9.0, 4.0], randn(3, 2)]), st(t=1))],
        ),
        # two keys, children out of order; each parent gets [left; right]
        Case(
            "collect_tree_children",
            Collect("pos // 2", "pos % 2", 2, "pos"),
            [
                ("in", randn(1, 3), st(pos=5)),
                ("in", randn(1, 3), st(key=1, pos=3)),
                ("in", randn(1, 3), st(pos=2)),
                ("in", randn(1, 3), st(pos=4)),
                ("in", randn(1, 3), st(key=1, pos=2)),
                ("in", randn(1, 3), st(pos=3)),
            ],
        ),
        # rows stacked (axis 0) in slot order, out of arrival order, members of different row counts; the
        # members' own fields dropped from the merged state
        Case(
            "collect_rows",
            Collect("0", "w", "length", None, axis=0, drop=["w", "ids"]),
            [("in", randn(rows, 3), st(length=3, w=w, ids=rows)) for w, rows in ((2, 1), (0, 2), (1, 1))],
        ),
        # a count read from the state, members of different widths (backward splits by each member's width)
        Case(
            "collect_count_expression",
            Collect("parent", "slot", "arity", "node"),
            [("in", randn(2, i + 1), st(parent=7, slot=i, arity=3)) for i in (1, 2, 0)],
        ),
        Case(
            "distribute",
            Distribute("etype", 3),
            [("in", randn(2, 3), st(etype=e, t=i)) for i, e in enumerate((2, 0, 1, 2))],
        ),
        Case("distribute_one_branch", Distribute("0", 1), [("in", randn(2, 3), s)]),
        # sparse message passing on one graph: repeated indices accumulate in backward
        Case("gather", Gather(), [("x", randn(4, 3), s), ("index", np.array([0, 2, 2, 3, 0, 1]), s)]),
        Case(
            "gather_match_on_key",
            Gather(match_on=()),
            [("index", np.array([3, 3, 1]), st(length=5)), ("x", randn(4, 2), st(t=2))],
        ),
        Case(
            "scatter_sum",
            ScatterSum(),
            [("x", randn(6, 3), s), ("index", np.array([1, 1, 0, 3, 1, 0]), s), ("like", randn(5, 2), s)],
        ),
        Case(
            "scatter_mean",
            ScatterMean(),
            [("like", randn(5, 2), s), ("index", np.array([1, 1, 0, 3, 1, 0]), s), ("x", randn(6, 3), s)],
        ),
        # two edge types, hidden 3: x (4 nodes, 2 * 3); edges [src * 2 + type, dst], repeats accumulate
        Case(
            "typed_edge_sum",
            TypedEdgeSum(2),
            [("x", randn(4, 6), s), ("edges", np.array([[0, 1, 5, 7, 2, 0, 6], [1, 1, 0, 3, 1, 2, 3]]), s)],
        ),
        Case(
            "typed_edge_sum_no_edges_match_on_key",
            TypedEdgeSum(3, match_on=()),
            [("edges", np.zeros((2, 0), dtype=np.int64), st(length=5)), ("x", randn(2, 6), st(t=1))],
        ),
        Case("select_rows_index", SelectRows(), [("x", randn(5, 3), s), ("rows", np.array([4, 0, 4, 1]), s)]),
        Case(
            "select_rows_mask",
            SelectRows(),
            [("rows", np.array([True, False, True, True, False]), s), ("x", randn(5, 3), s)],
        ),
        Case("sum_rows", SumRows(), [("in", randn(4, 3), s)]),
        Case("sum_rows_3d", SumRows(), [("in", randn(3, 2, 2), s)]),
        Case("mean_rows", MeanRows(), [("in", randn(4, 3), s)]),
        # groups of rows by column 0, out of order; a float table gets gradients in its value columns
        Case(
            "partition",
            Partition("t"),
            [("in", np.column_stack([[2.0, 0.0, 2.0, 1.0, 0.0], randn(5, 3)]), st(levels=3))],
        ),
        Case(
            "partition_vectors",
            Partition("level", keep_2d=False),
            [("in", np.column_stack([[1.0, 1.0, 4.0], randn(3)]), s)],
        ),
        Case(
            "partition_size_field",
            Partition("w", keep_2d=False, size_field="ids"),
            [("in", np.column_stack([[3.0, 0.0, 3.0, 3.0, 1.0], randn(5)]), st(length=2))],
        ),
        # tables of ints (a tree's positions and word ids, a forest's level index): id payloads, no gradient
        Case(
            "flatmap_int_ids",
            Flatmap("pos", keep_2d=False),
            [("in", np.array([[4, 7], [2, 0], [9, 3]]), s)],
            grad_inputs=frozenset(),
        ),
        Case(
            "partition_int_index",
            Partition("level", keep_2d=False),
            [("in", np.array([[1, 5], [0, 2], [1, 3], [0, 0]]), st(t=2))],
            grad_inputs=frozenset(),
        ),
        Case("group_of_rows", Group("n", "t"), [("in", randn(1, 2), st(n=3, t=i)) for i in (1, 2, 0)]),
        Case("ungroup_chunk_3d", Ungroup("t", chunk=2), [("in", randn(4, 2, 3), s)]),
        # a bool group value: the merged state's field holds True
        Case(
            "collect_bool_value",
            Collect("t > 0", "t % 2", 2, "up"),
            [("in", randn(2, 3), st(t=1)), ("in", randn(2, 3), st(t=2))],
        ),
        Case(
            "scatter_sum_3d_index_first",
            ScatterSum(),
            [("index", np.array([2, 0, 2]), s), ("x", randn(3, 2, 2), s), ("like", randn(4, 1), s)],
        ),
        Case(
            "scatter_mean_match_on_key",
            ScatterMean(match_on=()),
            [
                ("index", np.array([0, 0, 2, 0]), st(length=3)),
                ("like", randn(3, 1), st(length=3)),
                ("x", randn(4, 2), st(t=1)),
            ],
        ),
        Case(
            "typed_edge_sum_edges_first",
            TypedEdgeSum(3),
            [("edges", np.array([[0, 5, 7, 3, 5], [1, 0, 2, 2, 0]]), s), ("x", randn(3, 6), s)],
        ),
        Case(
            "select_rows_mask_match_on_key",
            SelectRows(match_on=()),
            [("x", randn(4, 2), st(t=1)), ("rows", np.array([False, True, True, False]), st(length=4))],
        ),
        # a vector sums with numpy's pairwise summation
        Case("sum_rows_vector", SumRows(), [("in", randn(20), s)]),
        Case("mean_rows_3d", MeanRows(), [("in", randn(3, 2, 2), s)]),
        Case(
            "mse_match_on",
            MSE(match_on=("t",)),
            [("target", randn(2, 3), st(t=1)), ("pred", randn(2, 3), st(t=1, n=4))],
        ),
        # equal top scores: a graph counts as correct when its first highest score is the target
        Case(
            "segment_softmax_cross_entropy_ties",
            SegmentSoftmaxCrossEntropy(),
            [
                ("target", np.array([2, 4]), s),
                ("scores", np.array([[1.0], [3.0], [3.0], [0.0], [2.0], [2.0]]), s),
                ("segments", np.array([0, 0, 0, 1, 1, 1]), s),
            ],
        ),
        Case("dropout_everything", Dropout(1.0, seed=3), [("in", randn(2, 2, 2), st(t=4))]),
        Case("dropout_bool_state", Dropout(0.5, seed=9), [("in", randn(3, 5), st(flag=True, t=-2))]),
        # fused cells: the gradients into the gates, the children's c and h all checked
        Case("tree_lstm_leaf", TreeLSTMLeaf(2), [("gates", 2.0 * randn(3, 6), s)]),
        Case(
            "tree_lstm_branch",
            TreeLSTMBranch(2),
            [("c_right", randn(3, 2), s), ("gates", 2.0 * randn(3, 10), s), ("c_left", randn(3, 2), s)],
        ),
        Case(
            "tree_lstm_branch_match_on",
            TreeLSTMBranch(3, match_on=("pos",)),
            [
                ("gates", randn(2, 15), st(pos=4, t=1)),
                ("c_left", randn(2, 3), st(pos=4)),
                ("c_right", randn(2, 3), st(pos=4, u=2)),
            ],
        ),
        Case(
            "gru_update",
            GRUUpdate(3),
            [("h", randn(4, 3), s), ("x_gates", 2.0 * randn(4, 9), s), ("h_gates", 2.0 * randn(4, 9), s)],
        ),
        Case("lstm_start", LSTMStart(2), [("gates", 2.0 * randn(3, 8), s)]),
        Case(
            "lstm_update",
            LSTMUpdate(3),
            [("c", randn(2, 3), s), ("x_gates", 2.0 * randn(2, 12), s), ("h_gates", 2.0 * randn(2, 12), s)],
        ),
        Case(
            "lstm_update_match_on",
            LSTMUpdate(2, match_on=("t",)),
            [
                ("h_gates", randn(3, 8), st(t=2)),
                ("x_gates", randn(3, 8), st(t=2, length=4)),
                ("c", randn(3, 2), st(t=2, u=1)),
            ],
        ),
        Case(
            "gru_update_match_on",
            GRUUpdate(2, match_on=("t",)),
            [
                ("x_gates", randn(3, 6), st(t=2)),
                ("h", randn(3, 2), st(t=2, length=4)),
                ("h_gates", randn(3, 6), st(t=2)),
            ],
        ),
        # wide enough to fill a whole SIMD vector of a native kernel and leave a tail (8 float64 lanes);
        # the joined inputs in yet other orders of arrival
        Case("tree_lstm_leaf_wide", TreeLSTMLeaf(9), [("gates", 2.0 * randn(2, 27), s)]),
        Case(
            "tree_lstm_branch_wide",
            TreeLSTMBranch(9),
            [("c_left", randn(2, 9), s), ("c_right", randn(2, 9), s), ("gates", 2.0 * randn(2, 45), s)],
        ),
        Case(
            "gru_update_wide",
            GRUUpdate(9),
            [("h_gates", 2.0 * randn(2, 27), s), ("h", randn(2, 9), s), ("x_gates", 2.0 * randn(2, 27), s)],
        ),
        Case("lstm_start_wide", LSTMStart(9), [("gates", 2.0 * randn(2, 36), s)]),
        Case(
            "lstm_update_wide",
            LSTMUpdate(9),
            [("x_gates", 2.0 * randn(2, 36), s), ("c", randn(2, 9), s), ("h_gates", 2.0 * randn(2, 36), s)],
        ),
        # numpy sums rows of more than 128 items in halves (pairwise summation)
        Case(
            "layer_norm_wide",
            LayerNorm(150),
            [("in", randn(2, 150) * np.array([[0.5], [4.0]]) - 1.0, s)],
            {"g": randn(150), "b": randn(150)},
        ),
    ]
    return cases


CASES = _cases()


# ---------------------------------------------------------------------------------------------- harness
def _context(case: Case, params: dict[str, np.ndarray], train: bool) -> NodeContext:
    ctx = NodeContext("node", {k: v.copy() for k, v in params.items()})
    ctx.train = train
    ctx.grad_inputs = case.inputs_with_grad()
    ctx.grad_outputs = case.outputs_with_grad()
    return ctx


def _forward(case: Case, ctx: NodeContext, feeds: list[Feed]) -> list[tuple[str, Any, State]]:
    emitted = []
    for port, x, state in feeds:
        emitted += case.op.forward(ctx, port, x.copy(), state)
    return emitted


def _projections(case: Case, emitted: list[tuple[str, Any, State]], seed: int) -> dict[tuple[str, State], np.ndarray]:
    rng = np.random.default_rng(seed)
    proj = {}
    for port, y, state in emitted:
        if port != LOSS_PORT and port in case.outputs_with_grad():
            assert (port, state) not in proj, f"output {port!r} emitted twice with state {state}"
            proj[(port, state)] = rng.standard_normal(np.shape(y))
    return proj


def _scalar(emitted: list[tuple[str, Any, State]], proj: dict[tuple[str, State], np.ndarray]) -> float:
    total = 0.0
    for port, y, state in emitted:
        if port == LOSS_PORT:
            total += float(y)
        elif (port, state) in proj:
            total += float(np.vdot(proj[(port, state)], y))
    return total


def _objective(case: Case, proj: dict[tuple[str, State], np.ndarray]) -> Callable[[list[Feed], dict], float]:
    """The scalar as a function of the inputs and parameters: the training forward (a Dropout drops, as in the
    forward whose backward is checked), in a fresh context each time."""

    def f(feeds: list[Feed], params: dict[str, np.ndarray]) -> float:
        ctx = _context(case, params, train=True)
        return _scalar(_forward(case, ctx, feeds), proj)

    return f


def _numeric_grad(f: Callable[[], float], x: np.ndarray) -> np.ndarray:
    """Central differences of ``f`` with respect to ``x``, perturbed in place."""
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        old = x[idx]
        x[idx] = old + EPS
        up = f()
        x[idx] = old - EPS
        down = f()
        x[idx] = old
        grad[idx] = (up - down) / (2 * EPS)
    return grad


def _backward(case: Case, ctx: NodeContext, emitted: list, proj: dict) -> dict[tuple[str, State], np.ndarray]:
    """Backward for every emitted output that carries a gradient, in reverse order of emission."""
    back: dict[tuple[str, State], np.ndarray] = {}
    for port, _, state in reversed(emitted):
        if port == LOSS_PORT:
            got = case.op.backward(ctx, LOSS_PORT, 1.0, state)
        elif (port, state) in proj:
            got = case.op.backward(ctx, port, proj[(port, state)].copy(), state)
        else:
            continue
        for in_port, g, s in got:
            if in_port not in ctx.grad_inputs:
                continue  # allowed to emit: the runtime drops gradients for ports that do not want one
            assert (in_port, s) not in back, f"two gradients sent to input {in_port!r} with state {s}"
            back[(in_port, s)] = np.asarray(g)
    return back


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_backward_matches_finite_differences(case: Case) -> None:
    params = {k: np.asarray(v, dtype=np.float64) for k, v in case.params.items()}
    assert set(params) == set(case.op.param_shapes()), "case parameters must match the op's param_shapes"
    for name, shape in case.op.param_shapes().items():
        assert params[name].shape == shape

    ctx = _context(case, params, train=True)
    emitted = _forward(case, ctx, case.feeds)
    assert not ctx.joins, f"joins still waiting after every input was fed: {ctx.joins}"
    proj = _projections(case, emitted, seed=len(case.id))
    back = _backward(case, ctx, emitted, proj)

    # the caching contract: everything popped once every backward has arrived
    assert not ctx.cache, f"cache entries left after backward: {list(ctx.cache)}"
    assert not ctx.joins

    f = _objective(case, proj)
    feeds = [(port, x.copy(), state) for port, x, state in case.feeds]
    wanted = {
        (port, state): i
        for i, (port, x, state) in enumerate(feeds)
        if port in case.inputs_with_grad() and x.dtype.kind == "f"
    }
    # every differentiable input message gets exactly one gradient, with its own state, and nothing else
    assert set(back) == set(wanted), (
        f"gradients came back for {sorted(map(str, back))}, expected {sorted(map(str, wanted))}"
    )
    for (port, state), i in wanted.items():
        x = feeds[i][1]
        numeric = _numeric_grad(lambda: f(feeds, params), x)
        analytic = back[(port, state)]
        assert analytic.shape == x.shape, f"gradient for {port!r} has shape {analytic.shape}, input {x.shape}"
        np.testing.assert_allclose(analytic, numeric, rtol=RTOL, atol=ATOL, err_msg=f"input {port!r} {state}")

    for name, p in params.items():
        numeric = _numeric_grad(lambda: f(feeds, params), p)
        np.testing.assert_allclose(ctx.grads[name], numeric, rtol=RTOL, atol=ATOL, err_msg=f"parameter {name!r}")
    # the forward inputs were not modified
    for (_, x0, _), (_, x1, _) in zip(case.feeds, feeds, strict=True):
        np.testing.assert_array_equal(x0, x1)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_no_cache_when_not_training(case: Case) -> None:
    """Without ``ctx.train`` nothing is cached, and the outputs are the training forward's, except for an op
    that declares its forward depends on training (``training_dependent``: a Dropout drops only then)."""
    params = {k: np.asarray(v, dtype=np.float64) for k, v in case.params.items()}
    ctx_eval = _context(case, params, train=False)
    emitted_eval = _forward(case, ctx_eval, case.feeds)
    assert not ctx_eval.cache, f"cached {list(ctx_eval.cache)} with ctx.train False"
    assert not ctx_eval.joins

    ctx_train = _context(case, params, train=True)
    emitted_train = _forward(case, ctx_train, case.feeds)
    assert len(emitted_eval) == len(emitted_train)
    for (p0, y0, s0), (p1, y1, s1) in zip(emitted_eval, emitted_train, strict=True):
        assert (p0, s0) == (p1, s1)
        if not case.op.training_dependent:
            np.testing.assert_array_equal(y0, y1)


def test_every_op_kind_has_a_gradient_case() -> None:
    covered = {c.op.kind for c in CASES}
    missing = set(OPS) - covered - set(EXEMPT)
    assert not missing, f"op kind(s) {sorted(missing)} have no gradient case in tests/ir/test_op_gradients.py"
    assert set(EXEMPT) <= set(OPS), "an exemption names an op kind that no longer exists"


def test_input_is_exempt_because_it_has_nothing_to_differentiate() -> None:
    op = Input(width=3)
    assert op.input_ports() == ()
    assert op.param_shapes() == {}
    assert op.backward(NodeContext("x"), "out", np.ones((2, 3)), st()) == []


@pytest.mark.parametrize("op", [SoftmaxCrossEntropy(), MSE()], ids=["softmax_cross_entropy", "mse"])
def test_loss_backward_scales_by_the_incoming_gradient(op: Op) -> None:
    rng = np.random.default_rng(3)
    pred = rng.standard_normal((4, 3))
    target = np.array([0, 2, 1, 1]) if op.kind == "softmax_cross_entropy" else rng.standard_normal((4, 3))
    grads = []
    for scale in (1.0, 2.5):
        ctx = NodeContext("loss")
        pred_port = op.input_ports()[0]
        op.forward(ctx, pred_port, pred, st())
        ((port, loss, state),) = op.forward(ctx, "target", target, st())
        assert port == LOSS_PORT and np.isfinite(loss)
        ((back_port, g, _),) = op.backward(ctx, LOSS_PORT, scale, state)
        assert back_port == pred_port
        grads.append(g)
        assert not ctx.cache
    np.testing.assert_allclose(grads[1], 2.5 * grads[0], rtol=1e-12)


def test_sigmoid_is_stable_for_large_inputs() -> None:
    x = np.array([-1000.0, -745.0, -40.0, 0.0, 40.0, 745.0, 1000.0])
    ctx = NodeContext("sig")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ((_, y, s),) = Sigmoid().forward(ctx, "in", x, st())
        ((_, g, _),) = Sigmoid().backward(ctx, "out", np.ones_like(x), s)
    assert np.all(np.isfinite(y)) and np.all((y >= 0) & (y <= 1))
    assert y[0] == 0.0 and y[-1] == 1.0 and y[3] == 0.5
    assert np.all(np.isfinite(g)) and np.all(g >= 0)


def test_softmax_cross_entropy_is_stable_for_large_logits() -> None:
    ctx = NodeContext("loss")
    op = SoftmaxCrossEntropy()
    logits = np.array([[1000.0, -1000.0], [0.0, 1000.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op.forward(ctx, "logits", logits, st())
        ((_, loss, s),) = op.forward(ctx, "target", np.array([0, 0]), st())
        ((_, g, _),) = op.backward(ctx, LOSS_PORT, 1.0, s)
    assert loss == pytest.approx(500.0)
    np.testing.assert_allclose(g, [[0.0, 0.0], [-0.5, 0.5]], atol=1e-12)


def test_segment_softmax_cross_entropy_is_softmax_cross_entropy_per_graph() -> None:
    """Two graphs in one key: the mean of each graph's SoftmaxCrossEntropy on its (1, N_k) row of scores."""
    rng = np.random.default_rng(5)
    scores = rng.standard_normal((7, 1))
    seg_op, ctx = SegmentSoftmaxCrossEntropy(), NodeContext("loss")
    seg_op.forward(ctx, "scores", scores, st())
    seg_op.forward(ctx, "segments", np.array([0, 0, 0, 0, 1, 1, 1]), st())
    ((_, loss, s),) = seg_op.forward(ctx, "target", np.array([2, 4]), st())
    ((_, g, _),) = seg_op.backward(ctx, LOSS_PORT, 1.0, s)
    (report,) = ctx.reports
    assert report["n"] == 2 and report["correct"] == int(scores[:4, 0].argmax() == 2) + int(scores[4:, 0].argmax() == 0)
    per_graph = []
    for rows, target in ((slice(0, 4), 2), (slice(4, 7), 0)):
        one, octx = SoftmaxCrossEntropy(), NodeContext("loss")
        one.forward(octx, "logits", scores[rows].T, st())
        ((_, l1, s1),) = one.forward(octx, "target", np.array([target]), st())
        ((_, g1, _),) = one.backward(octx, LOSS_PORT, 1.0, s1)
        per_graph.append((l1, g1))
        np.testing.assert_allclose(g[rows, 0], g1[0] / 2, rtol=1e-12)
    assert loss == pytest.approx((per_graph[0][0] + per_graph[1][0]) / 2, rel=1e-12)


@pytest.mark.parametrize(
    ("segments", "target", "message"),
    [
        (np.array([0, 0, 2, 2]), np.array([0, 2]), "expected graph ids 0..1"),
        (np.array([1, 1, 0, 0]), np.array([2, 0]), "one run of rows in order"),
        (np.array([0, 0, 1, 1]), np.array([2, 3]), "a row of that graph's own nodes"),
        (np.array([0, 0, 1]), np.array([0, 2]), "expected 4 integer graph ids"),
    ],
)
def test_segment_softmax_cross_entropy_names_bad_segments(
    segments: np.ndarray, target: np.ndarray, message: str
) -> None:
    op, ctx = SegmentSoftmaxCrossEntropy(), NodeContext("loss")
    op.forward(ctx, "scores", np.zeros((4, 1)), st())
    op.forward(ctx, "segments", segments, st())
    with pytest.raises(OpError, match=message):
        op.forward(ctx, "target", target, st())


def test_typed_edge_sum_is_a_gather_linear_and_scatter_per_edge_type() -> None:
    rng = np.random.default_rng(9)
    h, weights = rng.standard_normal((5, 3)), rng.standard_normal((2, 3, 4))
    src, dst, types = np.array([0, 4, 4, 2, 1]), np.array([1, 1, 3, 0, 1]), np.array([1, 0, 1, 1, 0])
    every_type = np.concatenate([h @ weights[0], h @ weights[1]], axis=1)  # (5, 2 * 4)
    ctx = NodeContext("propagate")
    TypedEdgeSum(2).forward(ctx, "x", every_type, st())
    ((_, out, _),) = TypedEdgeSum(2).forward(ctx, "edges", np.stack([src * 2 + types, dst]), st())
    expected = np.zeros((5, 4))
    for e in range(2):
        np.add.at(expected, dst[types == e], h[src[types == e]] @ weights[e])
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_typed_edge_sum_names_bad_edges() -> None:
    ctx = NodeContext("propagate")
    TypedEdgeSum(2).forward(ctx, "x", np.zeros((3, 4)), st())
    with pytest.raises(OpError, match=r"indices must lie in \[0, 6\)"):
        TypedEdgeSum(2).forward(ctx, "edges", np.array([[6], [0]]), st())
    with pytest.raises(OpError, match="expected a width divisible by types=3"):
        TypedEdgeSum(3).infer_widths({"x": 4})


@pytest.mark.parametrize("kernel", [True, False], ids=["scipy_kernel", "public_csr_array"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scatter_add_rows_equals_add_at(kernel: bool, dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both routes of the scatter behind Gather, ScatterSum and TypedEdgeSum: repeated and absent rows."""
    from amp_notebook.ir.ops import sparse

    if not kernel:
        monkeypatch.setattr(sparse, "csr_matvecs", None)
    rng = np.random.default_rng(4)
    idx, x = np.array([3, 0, 3, 5, 3, 0]), rng.standard_normal((6, 4)).astype(dtype)
    expected = np.zeros((7, 4), dtype=dtype)
    np.add.at(expected, idx, x)
    out = sparse.scatter_add_rows(idx, x, 7)
    assert out.dtype == dtype and out.shape == (7, 4)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    np.testing.assert_allclose(sparse.scatter_add_rows(idx, x[:, ::2], 7), expected[:, ::2], rtol=1e-6)  # a view


FUSED = [c for c in CASES if getattr(c.op, "fused_cell", False) or c.op.kind == "layer_norm"]


@pytest.mark.parametrize("case", [c for c in FUSED if len(c.feeds) > 1], ids=lambda c: c.id)
def test_fused_joins_give_the_same_in_any_order_of_arrival(case: Case) -> None:
    """The joined inputs of a fused cell may arrive in any order: the same output, the same gradients."""
    results = []
    for order in itertools.permutations(case.feeds):
        ctx = _context(case, {}, train=True)
        ((port, y, state),) = _forward(case, ctx, list(order))
        back = case.op.backward(ctx, port, np.ones_like(y), state)
        assert not ctx.cache and not ctx.joins
        results.append((y, sorted((p, str(s), g.tolist()) for p, g, s in back)))
    for y, back in results[1:]:
        np.testing.assert_array_equal(y, results[0][0])
        assert back == results[0][1]


@pytest.mark.parametrize("case", FUSED, ids=lambda c: c.id)
def test_fused_cells_and_layer_norm_keep_float32(case: Case) -> None:
    """float32 in, float32 out and back, equal to the float64 computation to float32 precision."""
    runs = []
    for dtype in (np.float32, np.float64):
        params = {k: v.astype(dtype) for k, v in case.params.items()}
        ctx = _context(case, params, train=True)
        emitted = _forward(case, ctx, [(p, x.astype(dtype), s) for p, x, s in case.feeds])
        grads = {}
        for port, y, state in reversed(emitted):
            g = np.linspace(-1.0, 1.0, y.size).reshape(y.shape).astype(dtype)
            grads.update({(p, s): d for p, d, s in case.op.backward(ctx, port, g, state)})
        runs.append(([y for _, y, _ in emitted], grads, dict(ctx.grads)))
    (ys32, grads32, params32), (ys64, grads64, params64) = runs
    for y32, y64 in zip(ys32, ys64, strict=True):
        assert y32.dtype == np.float32
        np.testing.assert_allclose(y32, y64, rtol=1e-4, atol=1e-5)
    for key, g in grads64.items():
        assert grads32[key].dtype == np.float32, key
        np.testing.assert_allclose(grads32[key], g, rtol=1e-4, atol=1e-5, err_msg=str(key))
    for name, g in params64.items():
        assert params32[name].dtype == np.float32
        np.testing.assert_allclose(params32[name], g, rtol=1e-4, atol=1e-4, err_msg=name)
