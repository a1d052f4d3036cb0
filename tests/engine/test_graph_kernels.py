"""The kernels of the dynamic and sparse ops, the graph losses and Dropout, beyond the shared op cases
(test_kernels.py runs those): validation keys, Dropout's masks bit for bit, bad input as the Python op's
errors (never a memory error), bundles that mix dtypes, and what still runs through the bridge in the zoo."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.engine.plan import check
from amp_notebook.ir.message import State
from amp_notebook.ir.ops import (
    MSE,
    Collect,
    Dropout,
    Flatmap,
    Gather,
    Group,
    MeanRows,
    NodeContext,
    Op,
    OpError,
    Partition,
    ScatterMean,
    ScatterSum,
    SegmentSoftmaxCrossEntropy,
    SelectRows,
    SumRows,
    TypedEdgeSum,
    Ungroup,
)
from amp_notebook.ir.ops.dropout import message_base
from tests.engine.harness import NativeOp, as_float, native_case
from tests.engine.test_kernel_errors import native_error, python_error
from tests.engine.test_kernels import NATIVE
from tests.engine.test_plan import ZOO as PLAN_ZOO
from tests.ir import test_op_gradients as grads
from tests.ir.test_op_gradients import Case


@pytest.mark.parametrize("case", NATIVE, ids=[c.id for c in NATIVE])
def test_a_validation_key_gets_what_the_python_op_gives(case: Case) -> None:
    """ctx.train False: the same outputs (Dropout passes its input), nothing cached natively."""
    nat = native_case(case)
    params = {k: np.asarray(v, dtype=np.float64) for k, v in case.params.items()}
    ctx_n, ctx_p = grads._context(nat, params, train=False), grads._context(case, params, train=False)
    out_n, out_p = grads._forward(nat, ctx_n, nat.feeds), grads._forward(case, ctx_p, case.feeds)
    assert [(p, s) for p, _, s in out_n] == [(p, s) for p, _, s in out_p]
    for (_, y_n, _), (_, y_p, _) in zip(out_n, out_p, strict=True):
        np.testing.assert_allclose(as_float(y_n), as_float(y_p), rtol=1e-12, atol=1e-13)
    assert nat.op.held(ctx_n) == 0
    assert [r.get("n") for r in ctx_n.reports] == [r.get("n") for r in ctx_p.reports]


# ---------------------------------------------------------------------------------------------- Dropout
def _names_for_block_edges() -> list[str]:
    """Node names whose hash text for State(key=3, t=1) and seed 7 is exactly 128 and 256 bytes long (one and two
    full BLAKE2b blocks)."""
    base = len(repr((7, "", sorted(State(key=3, t=1).items()))).encode())
    return ["n" * (length - base) for length in (128, 256)]


NODE_NAMES = [
    "node",
    "drop'out",
    "say \"hi\" 'now'",
    "ünïcödé ✓",
    "tab\tand\\slash",
    "x" * 300,
    *_names_for_block_edges(),
]
STATES = [
    State(key=0),
    State(key=3, t=1),
    State(key=-5, t=True, u=False),
    State(key=2**62, B=-(2**63), _z=7, a=1, é=0),
]


@pytest.mark.parametrize("node", NODE_NAMES, ids=range(len(NODE_NAMES)))
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_dropout_draws_the_python_ops_mask_bit_for_bit(node: str, dtype: Any) -> None:
    rng = np.random.default_rng(1)
    for p in (0.3, 0.999, 1e-9):
        op = Dropout(p, seed=7)
        fields = {f for s in STATES for f in s}
        nat = NativeOp(op, fields)
        for state in STATES:
            x = (rng.standard_normal((3, 7)) * 100).astype(dtype)
            ctx_n, ctx_p = NodeContext(node), NodeContext(node)
            ctx_n.grad_inputs = ctx_p.grad_inputs = frozenset({"in"})
            ((_, y_n, _),) = nat.forward(ctx_n, "in", x, state)
            ((_, y_p, _),) = op.forward(ctx_p, "in", x, state)
            assert y_n.dtype == y_p.dtype and np.array_equal(y_n, y_p), (p, state)
            assert np.array_equal(y_p != 0, op.keep(node, state, x.shape) & (x != 0))
            ((_, g_n, _),) = nat.backward(ctx_n, "out", x, state)
            ((_, g_p, _),) = op.backward(ctx_p, "out", x, state)
            assert g_n.dtype == g_p.dtype and np.array_equal(g_n, g_p)


def test_dropout_hashes_the_text_the_python_op_hashes() -> None:
    """message_base is what the kernel reproduces: a different node, seed or field gives another mask."""
    state = State(key=1, t=2)
    bases = {message_base(0, "a", state), message_base(1, "a", state), message_base(0, "b", state)}
    bases.add(message_base(0, "a", state.replace(t=3)))
    assert len(bases) == 4
    x = np.ones((4, 16))
    masks = set()
    for seed, node in ((0, "a"), (1, "a"), (0, "b")):
        ((_, y, _),) = NativeOp(Dropout(0.5, seed=seed), {"key", "t"}).forward(NodeContext(node), "in", x, state)
        masks.add(tuple(y.ravel() != 0))
    assert len(masks) == 3


def test_a_dropout_spec_needs_its_node() -> None:
    from amp_notebook.engine.specs import kernel_spec

    with pytest.raises(ValueError, match="node"):
        kernel_spec(Dropout(0.5), {"key": 0})


# ---------------------------------------------------------------------------------------------- errors
X = np.ones((2, 3))
S = State(key=0)
TABLE = np.column_stack([[0.0, 1.0, 2.0], np.ones((3, 2))])

# the Python op's own exception, word for word (replayed through the Python op, or written natively in its words)
EXACT: list[tuple[str, Op, list[tuple[str, Any, State]]]] = [
    ("ungroup_counter_taken", Ungroup("t"), [("in", X, State(key=0, t=1))]),
    ("ungroup_chunk_does_not_divide", Ungroup("t", chunk=2), [("in", np.ones((3, 2)), S)]),
    ("ungroup_chunk_expression_missing", Ungroup("t", chunk="bucket"), [("in", X, S)]),
    ("ungroup_chunk_expression_bool", Ungroup("t", chunk="key == 0"), [("in", X, S)]),
    ("group_no_counter", Group("n", "t"), [("in", X, State(key=0, n=2))]),
    ("group_count_zero", Group("n", "t"), [("in", X, State(key=0, n=0, t=0))]),
    ("group_count_missing", Group("n", "t"), [("in", X, State(key=0, t=0))]),
    ("group_counter_out_of_range", Group("n", "t"), [("in", X, State(key=0, n=2, t=2))]),
    ("group_counter_repeated", Group("n", "t"), [("in", X, State(key=0, n=2, t=1)), ("in", X, State(key=0, n=2, t=1))]),
    ("flatmap_field_taken", Flatmap("pos"), [("in", TABLE, State(key=0, pos=1))]),
    ("flatmap_not_a_table", Flatmap("pos"), [("in", np.ones(3), S)]),
    ("flatmap_fraction", Flatmap("pos"), [("in", np.column_stack([[0.0, 1.5], [1.0, 2.0]]), S)]),
    ("flatmap_repeated", Flatmap("pos"), [("in", np.column_stack([[4.0, 1.0, 4.0], [1.0, 2.0, 3.0]]), S)]),
    ("flatmap_bool_table", Flatmap("pos"), [("in", np.ones((2, 2), dtype=bool), S)]),
    ("partition_size_field_taken", Partition("t", size_field="n"), [("in", TABLE, State(key=0, n=1))]),
    ("partition_vectors_need_width_2", Partition("t", keep_2d=False), [("in", TABLE, S)]),
    ("collect_key_missing", Collect("pos // 2", "pos % 2", 2, "pos"), [("in", X, S)]),
    ("collect_slot_out_of_range", Collect("0", "t", 2, None), [("in", X, State(key=0, t=2))]),
    ("collect_count_not_positive", Collect("0", "t", "n", None), [("in", X, State(key=0, t=0, n=0))]),
    ("collect_axis_0_vector", Collect("0", "t", 2, None, axis=0), [("in", np.ones(3), State(key=0, t=0))]),
    (
        "collect_members_differ",
        Collect("0", "t", 2, "g"),
        [("in", np.ones((2, 3)), State(key=0, t=0)), ("in", np.ones((3, 3)), State(key=0, t=1))],
    ),
    (
        "collect_same_output_twice",
        Collect("t // 2", "t % 2", 2, None, drop=["t"]),
        [("in", X, State(key=0, t=t)) for t in (0, 1, 2, 3)],
    ),
    ("gather_index_out_of_range", Gather(), [("x", X, S), ("index", np.array([0, 2]), S)]),
    ("gather_float_index", Gather(), [("index", np.array([0.0, 1.0]), S), ("x", X, S)]),
    ("gather_negative_index", Gather(), [("x", X, S), ("index", np.array([[0, -1]]), S)]),
    ("select_rows_mask_shape", SelectRows(), [("x", X, S), ("rows", np.array([True, False, True]), S)]),
    ("select_rows_index", SelectRows(), [("rows", np.array([5]), S), ("x", X, S)]),
    ("scatter_sum_index_count", ScatterSum(), [("x", X, S), ("index", np.array([0]), S), ("like", X, S)]),
    ("scatter_mean_out_of_range", ScatterMean(), [("x", X, S), ("like", X, S), ("index", np.array([0, 2]), S)]),
    ("typed_edge_sum_edges_shape", TypedEdgeSum(2), [("x", np.ones((2, 4)), S), ("edges", np.array([0, 1]), S)]),
    ("typed_edge_sum_block", TypedEdgeSum(2), [("x", np.ones((2, 4)), S), ("edges", np.array([[4], [0]]), S)]),
    ("typed_edge_sum_destination", TypedEdgeSum(2), [("edges", np.array([[3], [2]]), S), ("x", np.ones((2, 4)), S)]),
    ("mean_rows_of_nothing", MeanRows(), [("in", np.ones((0, 3)), S)]),
    ("sum_rows_scalar", SumRows(), [("in", np.float64(2.0), S)]),
    ("mse_shapes", MSE(), [("pred", X, S), ("target", np.ones((3, 3)), S)]),
    (
        "segment_scores_shape",
        SegmentSoftmaxCrossEntropy(),
        [("scores", X, S), ("segments", np.array([0, 0]), S), ("target", np.array([0]), S)],
    ),
    *[
        (
            f"segment_{i}",
            SegmentSoftmaxCrossEntropy(),
            [("scores", np.zeros((4, 1)), S), ("segments", seg, S), ("target", target, S)],
        )
        for i, (seg, target) in enumerate(
            [
                (np.array([0, 0, 2, 2]), np.array([0, 2])),
                (np.array([1, 1, 0, 0]), np.array([2, 0])),
                (np.array([0, 0, 1, 1]), np.array([2, 3])),
                (np.array([0, 0, 1]), np.array([0, 2])),
                (np.array([0, 0, 1, 1]), np.array([0.0, 2.0])),
                (np.array([0, 0, 1, 1]), np.array([-1, 2])),
            ]
        )
    ],
]


@pytest.mark.parametrize("op, feeds", [e[1:] for e in EXACT], ids=[e[0] for e in EXACT])
def test_bad_input_gets_the_python_ops_own_error(op: Op, feeds: list) -> None:
    expected, got = python_error(op, feeds), native_error(op, feeds)
    assert type(got) is type(expected) and str(got) == str(expected)
    if isinstance(expected, OpError):
        assert got.port == expected.port  # type: ignore[attr-defined]


def _backward_error(op: Op, feeds: list, port: str, g: Any, state: State) -> BaseException:
    native, ctx = NativeOp(op, {f for _, _, s in feeds for f in s} | set(state)), NodeContext("n")
    for p, x, s in feeds:
        native.forward(ctx, p, x, s)
    with pytest.raises(OpError) as caught:
        native.backward(ctx, port, g, state)
    return caught.value


@pytest.mark.parametrize(
    "op, feeds, g, state",
    [
        (Gather(), [("x", X, S), ("index", np.array([0, 1, 1]), S)], np.ones((2, 3)), S),
        (ScatterSum(), [("x", X, S), ("index", np.array([0, 1]), S), ("like", np.ones((4, 1)), S)], X, S),
        (Collect("0", "t", 2, None), [("in", X, State(key=0, t=t)) for t in (0, 1)], np.ones((2, 5)), S),
        (Ungroup("t"), [("in", X, S)], np.ones(7), State(key=0, t=1)),
        (Ungroup("t"), [("in", X, S)], np.ones(3), State(key=0, t=9)),
        (Flatmap("pos"), [("in", TABLE, S)], np.ones((1, 5)), State(key=0, pos=1)),
        (Flatmap("pos"), [("in", TABLE, S)], np.ones((1, 2)), State(key=0, pos=8)),
        (TypedEdgeSum(2), [("x", np.ones((2, 4)), S), ("edges", np.array([[3], [1]]), S)], np.ones((3, 2)), S),
        (SumRows(), [("in", X, S)], np.ones((1, 4)), S),
    ],
    ids=["gather", "scatter", "collect", "ungroup_shape", "ungroup_piece", "flatmap_shape", "flatmap_address",
         "typed_edge_sum", "sum_rows"],
)  # fmt: skip
def test_a_gradient_that_does_not_fit_is_an_op_error_not_a_memory_error(
    op: Op, feeds: list, g: Any, state: State
) -> None:
    error = str(_backward_error(op, feeds, "out", g, state))
    assert "gradient" in error or "nothing was cached" in error


# ---------------------------------------------------------------------------------------------- bundles, zoo
def test_a_bundle_of_mixed_dtypes_promotes_as_the_python_op_stacks() -> None:
    """TypedEdgeSum bundles by rows: a float32 graph bundled with a float64 one gets float64, as np.concatenate."""
    op = TypedEdgeSum(2)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((2, 4))]
    edges = [np.array([[0, 5], [1, 2]]), np.array([[3], [0]])]
    states = [State(key=0), State(key=1)]
    results = []
    for o in (op, NativeOp(op, {"key"})):
        ctx = NodeContext("n")
        o.forward_bundle(ctx, "edges", edges, states)
        results.append(o.forward_bundle(ctx, "x", xs, states))
    for (_, y_p, s_p), (_, y_n, s_n) in zip(*results, strict=True):
        assert s_p == s_n and y_p.dtype == y_n.dtype == np.float64
        np.testing.assert_array_equal(y_n, y_p)


FUSED_CELLS = {"tree_lstm_leaf", "tree_lstm_branch", "gru_update", "lstm_start", "lstm_update", "layer_norm"}
ZOO = {
    **PLAN_ZOO,
    "rnn_replicas": lambda: models.rnn(replicas=2),
    "ggsnn_regression": lambda: models.ggsnn(n_edge_types=3, feature_width=4, task="regression"),
}


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_graphs_run_every_node_natively_but_the_fused_cells(name: str) -> None:
    """Every op the zoo uses has a kernel, except the fused recurrent cells (their kernels: fused.cc)."""
    graph = ZOO[name]()
    names = list(graph.nodes)
    support = check(names, [graph.nodes[n].op for n in names])
    assert {graph.nodes[n].op.kind for n in support.bridged} <= FUSED_CELLS, support.bridged
