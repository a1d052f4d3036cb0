"""Dynamic (dis)aggregation and sparse message passing: Flatmap, Collect, Distribute, Gather, ScatterSum,
ScatterMean, SelectRows, SumRows, MeanRows (plus Sub and Discard).

Their gradients are checked against finite differences in test_op_gradients.py; here: what they compute,
the states they emit, their errors, the caching contract, the validator's loop rule for Collect, and one
end-to-end Tree-LSTM over one tree through the reference interpreter, against finite differences and a
direct PyTorch recursion with the same weights.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch

from amp_notebook.data import Batch
from amp_notebook.data.graphs import babi15_graphs
from amp_notebook.data.sentiment import synthetic_sentiment_trees
from amp_notebook.data.trees import Tree, Vocab, tree_arrays
from amp_notebook.ir import ops
from amp_notebook.ir.cells import tree_lstm_branch, tree_lstm_leaf
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.ir.message import State
from amp_notebook.ir.ops import (
    Collect,
    Discard,
    Distribute,
    Flatmap,
    Gather,
    MeanRows,
    NodeContext,
    Op,
    OpError,
    ScatterMean,
    ScatterSum,
    SelectRows,
    Sub,
    SumRows,
)
from amp_notebook.ir.validate import check

Feed = tuple[str, Any, State]


def st(**fields: Any) -> State:
    return State(key=fields.pop("key", 0), **fields)


def forward_all(op: Op, feeds: list[Feed], train: bool = True) -> tuple[NodeContext, list[tuple[str, Any, State]]]:
    ctx = NodeContext("node")
    ctx.train = train
    ctx.grad_inputs = frozenset(op.input_ports()) - op.nondiff_inputs
    ctx.grad_outputs = frozenset(op.output_ports())
    emitted = []
    for port, x, state in feeds:
        emitted += op.forward(ctx, port, x, state)
    return ctx, emitted


# ------------------------------------------------------------------------------------------------ Flatmap
def test_flatmap_turns_rows_into_messages_addressed_by_column_0() -> None:
    leaves = np.array([[2, 4], [24, 2], [25, 5], [13, 6]])  # (leaf_position, word id)
    ctx, out = forward_all(Flatmap("pos", keep_2d=False), [("in", leaves, st(n_leaves=4))], train=False)
    assert [s for _, _, s in out] == [st(n_leaves=4, pos=p) for p in (2, 24, 25, 13)]
    assert all(port == "out" for port, _, _ in out)
    for (_, y, _), word in zip(out, (4, 2, 5, 6), strict=True):
        assert y.shape == (1,) and y.dtype.kind == "i" and y[0] == word  # a batch of one id
    assert not ctx.cache

    table = np.column_stack([[7.0, 3.0], np.arange(6.0).reshape(2, 3)])
    _, rows = forward_all(Flatmap("pos"), [("in", table, st())], train=False)
    assert [s["pos"] for _, _, s in rows] == [7, 3]
    np.testing.assert_array_equal(rows[0][1], [[0.0, 1.0, 2.0]])  # kept 2-D: a batch of one row
    np.testing.assert_array_equal(rows[1][1], [[3.0, 4.0, 5.0]])


def test_flatmap_backward_assembles_one_gradient_of_the_input_shape() -> None:
    table = np.column_stack([[7.0, 3.0, 5.0], np.zeros((3, 2))])
    ctx, out = forward_all(Flatmap("pos"), [("in", table, st(t=1))])
    op = Flatmap("pos")
    grads = {7: [[1.0, 2.0]], 3: [[3.0, 4.0]], 5: [[5.0, 6.0]]}
    back = []
    for _, _, s in reversed(out):  # any order
        back += op.backward(ctx, "out", np.array(grads[s["pos"]]), s)
    ((port, g, s),) = back
    assert port == "in" and s == st(t=1)
    np.testing.assert_array_equal(g, [[0.0, 1.0, 2.0], [0.0, 3.0, 4.0], [0.0, 5.0, 6.0]])
    assert not ctx.cache


def test_flatmap_of_an_empty_table_emits_nothing_and_caches_nothing() -> None:
    ctx, out = forward_all(Flatmap("pos"), [("in", np.zeros((0, 3)), st())])
    assert out == [] and not ctx.cache


@pytest.mark.parametrize(
    ("x", "state", "match"),
    [
        (np.array([[1, 2], [3, 4]]), st(pos=1), r"state .* already has field 'pos'; choose another field"),
        (np.array([[4, 0], [5, 1], [4, 2]]), st(), r"column 0 repeats pos=4 \(rows 0 and 2\)"),
        (np.array([1, 2, 3]), st(), r"expected a matrix \(n, 1 \+ k\) with k >= 1.*got shape \(3,\)"),
        (np.array([[1], [2]]), st(), r"got shape \(2, 1\)"),
        (np.array([[1.5, 0.0]]), st(), r"must hold integers, found 1\.5 in row 0"),
        (np.array([[True, False]]), st(), "expected an int"),
    ],
)
def test_flatmap_errors(x: np.ndarray, state: State, match: str) -> None:
    with pytest.raises(OpError, match=match):
        forward_all(Flatmap("pos"), [("in", x, state)])


def test_flatmap_rejects_bad_configuration() -> None:
    with pytest.raises(OpError, match="other than 'key'"):
        Flatmap("key")
    with pytest.raises(OpError, match="keep_2d: expected True or False"):
        Flatmap("pos", keep_2d="yes")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ Collect
def test_collect_pairs_children_into_parents_in_slot_order() -> None:
    op = Collect(key="pos // 2", index="pos % 2", count=2, field="pos")
    node = {p: np.full((1, 2), float(p)) for p in (2, 3, 4, 5, 6, 7)}
    # out of order: right children before left ones; groups interleave
    arrivals = [7, 5, 2, 4, 6, 3]
    ctx, out = forward_all(op, [("in", node[p], st(pos=p, n=11)) for p in arrivals])
    assert [s["pos"] for _, _, s in out] == [2, 3, 1]  # each parent once its second child arrived
    for _, y, s in out:
        p = s["pos"]
        np.testing.assert_array_equal(y, np.concatenate([node[2 * p], node[2 * p + 1]], axis=-1))
        assert s == st(pos=p, n=11)
    assert not ctx.joins
    # backward hands each child its piece with its own state
    (_, _, s3) = out[1]
    back = op.backward(ctx, "out", np.array([[1.0, 2.0, 3.0, 4.0]]), s3)
    assert [(port, s["pos"], g.tolist()) for port, g, s in back] == [("in", 6, [[1.0, 2.0]]), ("in", 7, [[3.0, 4.0]])]
    for _, _, s in (out[0], out[2]):
        op.backward(ctx, "out", np.ones((1, 4)), s)
    assert not ctx.cache


def test_collect_keeps_keys_apart_and_reads_count_from_the_state() -> None:
    op = Collect(key="parent", index="slot", count="arity", field="node")
    feeds = [
        ("in", np.array([[0.0]]), st(key=0, parent=1, slot=0, arity=2)),
        ("in", np.array([[1.0]]), st(key=1, parent=1, slot=0, arity=3)),
        ("in", np.array([[2.0]]), st(key=1, parent=1, slot=2, arity=3)),
        ("in", np.array([[3.0]]), st(key=0, parent=1, slot=1, arity=2)),
        ("in", np.array([[4.0]]), st(key=1, parent=1, slot=1, arity=3)),
    ]
    ctx, out = forward_all(op, feeds, train=False)
    assert [(s.key, y.tolist()) for _, y, s in out] == [(0, [[0.0, 3.0]]), (1, [[1.0, 4.0, 2.0]])]
    assert out[1][2] == st(key=1, parent=1, slot=0, arity=3, node=1)  # slot 0's state plus the new field
    assert not ctx.cache and not ctx.joins


def test_collect_width_is_count_times_the_input_width() -> None:
    assert Collect("pos // 2", "pos % 2", 2, "pos").infer_widths({"in": 6}) == {"out": 12}
    assert Collect("pos // 2", "pos % 2", "n", "pos").infer_widths({"in": 6}) == {"out": None}


@pytest.mark.parametrize(
    ("op", "states", "match"),
    [
        (Collect("pos // 2", "pos % 3", 2, "pos"), [st(pos=5)], r"gave slot 2 on state .*expected an int in \[0, 2\)"),
        (
            Collect("pos // 2", "pos % 2", 2, "pos"),
            [st(pos=4, t=0), st(pos=4, t=1)],
            r"slot 0 of group pos // 2=2 \(key 0\) is filled twice",
        ),
        (Collect("p", "s", "n", "q"), [st(p=1, s=0, n=0)], r"count 'n' gave 0 .*expected a positive int"),
        (Collect("p", "s", 2, "q"), [st(p=1)], r"reads state field\(s\) \['s'\]"),
        (Collect("p", "s / 1", 2, "q"), [st(p=1, s=0)], r"gave slot 0\.0"),
    ],
)
def test_collect_errors(op: Collect, states: list[State], match: str) -> None:
    with pytest.raises(OpError, match=match):
        forward_all(op, [("in", np.zeros((1, 2)), s) for s in states])


def test_collect_rejects_members_of_different_leading_shapes() -> None:
    op = Collect("pos // 2", "pos % 2", 2, "pos")
    with pytest.raises(OpError, match=r"slot 1 .* leading shape \(3,\), expected \(1,\)"):
        forward_all(op, [("in", np.zeros((1, 2)), st(pos=2)), ("in", np.zeros((3, 2)), st(pos=3))])


def test_collect_rejects_two_groups_with_the_same_output_state() -> None:
    # one-member groups keyed by pos // 2 that keep pos and add q: every output state differs...
    _, out = forward_all(Collect("pos // 2", "0", 1, "q"), [("in", np.zeros((1, 2)), st(pos=p)) for p in (2, 4, 5)])
    assert [s for _, _, s in out] == [st(pos=2, q=1), st(pos=4, q=2), st(pos=5, q=2)]
    # ...but setting pos to a constant maps different members to one state while the first is in flight
    clash = Collect("0", "0", 1, "pos")
    with pytest.raises(OpError, match=r"two groups produced the same output state State\(key=0, pos=0\)"):
        forward_all(clash, [("in", np.zeros((1, 2)), st(pos=2)), ("in", np.zeros((1, 2)), st(pos=3))])


# --------------------------------------------------------------------------------------------- Distribute
def test_distribute_routes_by_the_state_expression() -> None:
    op = Distribute("etype", 3)
    assert op.output_ports() == ("b0", "b1", "b2")
    assert Distribute("k % 2", 2).output_ports() == ("b0", "b1")  # index outputs even for two branches
    _, out = forward_all(op, [("in", np.full((1, 1), float(e)), st(etype=e, t=i)) for i, e in enumerate([2, 0, 2, 1])])
    assert [port for port, _, _ in out] == ["b2", "b0", "b2", "b1"]
    assert [y[0, 0] for _, y, _ in out] == [2.0, 0.0, 2.0, 1.0]
    ((port, _, s),) = op.backward(NodeContext("n"), "b2", np.ones((1, 1)), st(etype=2, t=0))
    assert port == "in" and s == st(etype=2, t=0)


@pytest.mark.parametrize(("state", "found"), [(st(etype=3), "3"), (st(etype=-1), "-1"), (st(etype=True), "True")])
def test_distribute_rejects_an_index_out_of_range(state: State, found: str) -> None:
    with pytest.raises(OpError, match=rf"gave {found} on state .*expected an int branch index in \[0, 3\)"):
        forward_all(Distribute("etype", 3), [("in", np.zeros((1, 1)), state)])


# ---------------------------------------------------------------------------- sparse message passing
@pytest.fixture(scope="module")
def babi() -> Any:
    return babi15_graphs(1, seed=0, inflate_to=10)[0]


def _one(op: Op, feeds: list[Feed]) -> np.ndarray:
    _, out = forward_all(op, feeds, train=False)
    ((_, y, _),) = out
    return y


def test_gather_and_scatter_sum_equal_the_dense_adjacency_product(babi: Any) -> None:
    rng = np.random.default_rng(0)
    n = babi.num_nodes
    x = rng.standard_normal((n, 4))
    src, dst = babi.edges[:, 0], babi.edges[:, 1]
    adjacency = np.zeros((n, n))
    np.add.at(adjacency, (dst, src), 1.0)  # A[v, u] counts the edges u -> v
    s = st()
    messages = _one(Gather(), [("x", x, s), ("index", src, s)])
    np.testing.assert_array_equal(messages, x[src])
    summed = _one(ScatterSum(), [("x", messages, s), ("index", dst, s), ("like", x, s)])
    np.testing.assert_allclose(summed, adjacency @ x, rtol=1e-12)
    degree = adjacency.sum(axis=1, keepdims=True)
    mean = _one(ScatterMean(), [("x", messages, s), ("index", dst, s), ("like", x, s)])
    np.testing.assert_allclose(mean, np.where(degree > 0, adjacency @ x / np.maximum(degree, 1), 0.0), rtol=1e-12)

    # backward: the transposes of the dense maps
    g = rng.standard_normal((n, 4))
    ctx, _ = forward_all(ScatterSum(), [("x", messages, s), ("index", dst, s), ("like", x, s)])
    ((_, g_messages, _),) = ScatterSum().backward(ctx, "out", g, s)
    ctx2, _ = forward_all(Gather(), [("x", x, s), ("index", src, s)])
    ((port, g_x, _),) = Gather().backward(ctx2, "out", g_messages, s)
    assert port == "x"
    np.testing.assert_allclose(g_x, adjacency.T @ g, rtol=1e-12)
    assert not ctx.cache and not ctx2.cache


def test_select_rows_splits_edges_by_type(babi: Any) -> None:
    rng = np.random.default_rng(1)
    per_edge = rng.standard_normal((babi.num_edges, 3))
    s = st()
    parts = []
    for t in range(4):
        mask = babi.edge_types == t
        by_mask = _one(SelectRows(), [("x", per_edge, s), ("rows", mask, s)])
        by_index = _one(SelectRows(), [("rows", np.flatnonzero(mask), s), ("x", per_edge, s)])
        np.testing.assert_array_equal(by_mask, per_edge[mask])
        np.testing.assert_array_equal(by_index, by_mask)
        parts.append(by_mask)
    assert sum(len(p) for p in parts) == babi.num_edges


def test_row_readouts() -> None:
    x = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(_one(SumRows(), [("in", x, st())]), [[18.0, 22.0, 26.0]])
    np.testing.assert_array_equal(_one(MeanRows(), [("in", x, st())]), [[4.5, 5.5, 6.5]])
    np.testing.assert_array_equal(_one(SumRows(), [("in", np.zeros((0, 3)), st())]), np.zeros((1, 3)))
    ctx, _ = forward_all(MeanRows(), [("in", x, st())])
    ((_, g, _),) = MeanRows().backward(ctx, "out", np.array([[4.0, 8.0, 12.0]]), st())
    np.testing.assert_array_equal(g, np.tile([[1.0, 2.0, 3.0]], (4, 1)))
    assert not ctx.cache


def test_sub_and_discard() -> None:
    assert _one(Sub(), [("a", np.array([[5.0, 1.0]]), st()), ("b", np.array([[2.0, 3.0]]), st())]).tolist() == [
        [3.0, -2.0]
    ]
    ctx, out = forward_all(Discard(), [("in", np.ones((2, 2)), st())])
    assert out == [] and not ctx.cache and Discard().output_ports() == ()


@pytest.mark.parametrize(
    ("op", "feeds", "match"),
    [
        (Gather(), [("x", np.zeros((3, 2)), st()), ("index", np.array([0, 3]), st())], r"in \[0, 3\).*\[0, 3\]"),
        (Gather(), [("x", np.zeros((3, 2)), st()), ("index", np.array([0.0, 1.0]), st())], "1-D integer index"),
        (Gather(), [("x", np.zeros((3, 2)), st()), ("index", np.array([[0, 1]]), st())], "1-D integer index"),
        (
            ScatterSum(),
            [("x", np.zeros((3, 2)), st()), ("index", np.array([0, 1]), st()), ("like", np.zeros((4, 1)), st())],
            r"one index per row of 'x' \(3\), got 2",
        ),
        (
            ScatterSum(),
            [("x", np.zeros((2, 2)), st()), ("index", np.array([0, 4]), st()), ("like", np.zeros((4, 1)), st())],
            r"input 'index': indices must lie in \[0, 4\)",
        ),
        (
            SelectRows(),
            [("x", np.zeros((3, 2)), st()), ("rows", np.array([True, False]), st())],
            r"boolean mask needs shape \(3,\)",
        ),
        (MeanRows(), [("in", np.zeros((0, 2)), st())], "at least one row"),
    ],
)
def test_sparse_op_errors(op: Op, feeds: list[Feed], match: str) -> None:
    with pytest.raises(OpError, match=match):
        forward_all(op, feeds)


def test_index_payloads_join_on_the_key_alone_with_match_on() -> None:
    op = Gather(match_on=())
    ctx, out = forward_all(op, [("index", np.array([1, 1]), st(n=2)), ("x", np.eye(2), st(t=3))])
    ((_, y, s),) = out
    assert s == st(t=3)  # x's state
    np.testing.assert_array_equal(y, [[0.0, 1.0], [0.0, 1.0]])
    op.backward(ctx, "out", np.ones((2, 2)), s)
    assert not ctx.cache and not ctx.joins


# ------------------------------------------------------------------------------------- configuration
NEW_OPS = [
    Flatmap("node", keep_2d=False),
    Collect("pos // 2", "pos % 2", 2, "pos"),
    Collect("parent", "slot", "arity", "node"),
    Distribute("etype", 4),
    Gather(match_on=("t",)),
    ScatterSum(),
    ScatterMean(match_on=()),
    SelectRows(),
    SumRows(),
    MeanRows(),
    Sub(match_on=["t"]),
    Discard(),
]


@pytest.mark.parametrize("op", NEW_OPS, ids=[f"{op.kind}{i}" for i, op in enumerate(NEW_OPS)])
def test_new_op_configs_round_trip_through_json(op: Op) -> None:
    config = json.loads(json.dumps(op.config()))
    rebuilt = ops.OPS[op.kind](**config)
    assert rebuilt == op and rebuilt.config() == op.config()
    assert rebuilt.input_ports() == op.input_ports() and rebuilt.output_ports() == op.output_ports()


def test_groups_name_the_new_kinds() -> None:
    assert {"isu", "collect"} == ops.STATE_UPDATING
    assert {"flatmap", "collect", "gather", "scatter_sum", "scatter_mean", "select_rows"} <= ops.AGGREGATION
    assert {"sum_rows", "mean_rows"} <= ops.AGGREGATION and "distribute" in ops.CONTROL_FLOW
    assert set(ops.OPS) >= ops.STATE_UPDATING


# ------------------------------------------------------------------------ validator: the loop rule
def _upward_loop(with_collect: bool) -> Graph:
    """Leaves -> Phi -> Cond (root?) -> Collect children into parents -> back to the Phi."""
    g = Graph("up")
    leaves = g.flatmap(g.input("leaves", dtype="float"), name="leaves_rows")
    merged = g.phi(leaves, None, name="nodes")
    root, inner = g.cond(merged, "pos == 1", name="is_root")
    up = g.collect(inner, "pos // 2", "pos % 2", 2, "pos", name="pair") if with_collect else g.identity(inner)
    g.connect(g.linear(up, 2, in_features=4 if with_collect else 2, name="merge"), "nodes", "in1")
    g.mse(root, g.input("target", width=2), name="loss", match_on=("key",))
    return g


def test_a_collect_closes_a_loop_in_place_of_an_isu() -> None:
    assert check(_upward_loop(with_collect=True)) == []
    problems = [p for p in check(_upward_loop(with_collect=False)) if "has no Isu" in p.message]
    assert len(problems) == 1
    assert "collect" in problems[0].message and "'nodes'" in problems[0].message


def test_the_collect_loop_runs_a_tree_upwards() -> None:
    # leaves 2 and 3 (children of the root) with two features each: merge = Linear on [x_2; x_3]
    g = _upward_loop(with_collect=True)
    interp = Interpreter(g, seed=0)
    leaves = np.array([[3.0, 1.0, 2.0], [2.0, -1.0, 0.5]])
    batch = Batch({"leaves": leaves, "target": np.zeros((1, 2))}, size=1)
    (report,) = interp.run_key(batch, key=0)
    W, b = interp.params()["merge"]["W"], interp.params()["merge"]["b"]
    root = np.array([-1.0, 0.5, 1.0, 2.0]) @ W + b  # slot order: left child (pos 2) first
    assert report["loss"] == pytest.approx(float(np.mean(root**2)), rel=1e-12)
    for ctx in interp.contexts:
        assert not ctx.cache and not ctx.joins


# ------------------------------------------------------------------- end to end: a Tree-LSTM on one tree
HIDDEN, EMBED, CLASSES = 3, 3, 5


def _tree_lstm_graph(vocab_size: int) -> Graph:
    """One tree per key: leaves enter through a Flatmap, nodes climb through Collect to their parents, every
    node's h feeds a classifier whose loss is summed over nodes (the Tree-LSTM of Tai et al., as in AMPNet)."""
    g = Graph("tree_lstm_test")
    words = g.flatmap(g.input("leaves", dtype="int"), "pos", keep_2d=False, name="leaf_rows")
    leaf = tree_lstm_leaf(g, g.embedding(words, vocab_size, EMBED, name="embed"), HIDDEN, name="leaf")
    nodes = g.phi(leaf, None, name="nodes")
    root, inner = g.cond(nodes, "pos == 1", name="is_root")
    up, to_head = g.bcast(inner, 2, name="fanout")
    children = g.collect(up, key="pos // 2", index="pos % 2", count=2, field="pos", name="children")
    g.connect(tree_lstm_branch(g, children, HIDDEN, name="branch"), "nodes", "in1")
    h, c = g.split(g.phi(root, to_head, name="heads"), [HIDDEN, HIDDEN], name="h_c")
    g.discard(c, name="drop_c")
    logits = g.linear(h, CLASSES, name="classify")
    targets = g.flatmap(g.input("labels", dtype="int"), "pos", keep_2d=False, name="label_rows")
    g.softmax_cross_entropy(logits, targets, name="loss")
    return g


def _torch_tree_loss(tree: Tree, vocab: Vocab, params: dict[str, dict[str, torch.Tensor]]) -> torch.Tensor:
    E = params["embed"]["E"]
    Wl, bl = params["leaf_gates"]["W"], params["leaf_gates"]["b"]
    Wb, bb = params["branch_gates"]["W"], params["branch_gates"]["b"]
    Wc, bc = params["classify"]["W"], params["classify"]["b"]
    H = HIDDEN
    losses: list[torch.Tensor] = []

    def visit(node: Tree) -> tuple[torch.Tensor, torch.Tensor]:
        if node.is_leaf:
            a = E[vocab.lookup(node.word or "")] @ Wl + bl
            i, o, u = a[:H], a[H : 2 * H], a[2 * H :]
            c = torch.sigmoid(i) * torch.tanh(u)
        else:
            assert node.left is not None and node.right is not None
            h_l, c_l = visit(node.left)
            h_r, c_r = visit(node.right)
            a = torch.cat([h_l, h_r]) @ Wb + bb
            i, f_l, f_r, o, u = (a[k * H : (k + 1) * H] for k in range(5))
            c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(f_l) * c_l + torch.sigmoid(f_r) * c_r
        h = torch.sigmoid(o) * torch.tanh(c)
        logits = h @ Wc + bc
        losses.append(torch.nn.functional.cross_entropy(logits[None], torch.tensor([node.label])))
        return h, c

    visit(tree)
    return torch.stack(losses).sum()


def test_tree_lstm_on_one_tree_matches_finite_differences_and_torch() -> None:
    tree = synthetic_sentiment_trees(1, seed=0, min_leaves=5, max_leaves=6)[0]
    vocab = Vocab.from_trees([tree])
    arrays = tree_arrays(tree, vocab)
    assert arrays["positions"].size >= 9 and len(set(arrays["labels"].tolist())) > 1
    batch = Batch(
        {
            "leaves": np.column_stack([arrays["leaf_positions"], arrays["leaf_words"]]),
            "labels": np.column_stack([arrays["positions"], arrays["labels"]]),
        },
        size=1,
    )
    graph = _tree_lstm_graph(len(vocab))
    assert {graph.nodes[n].meta.get("cell") for n in ("leaf_gates", "branch_gates", "branch_cell")} == {
        "leaf",
        "branch",
    }
    interp = Interpreter(graph, seed=3, dtype=np.float64)

    # (a) it runs, one loss report per tree node, with every invariant check of the interpreter passing
    grads = interp.gradients(batch, key=0)
    assert len(interp.reports) == arrays["positions"].size
    for ctx in interp.contexts:
        assert not ctx.cache and not ctx.joins
    by_name = {c.name: c for c in interp.contexts}
    n_leaves, n_branches = arrays["leaf_positions"].size, arrays["positions"].size - arrays["leaf_positions"].size
    assert by_name["leaf_gates"].n_grads == n_leaves and by_name["branch_gates"].n_grads == n_branches
    assert by_name["classify"].n_grads == arrays["positions"].size

    # (b) parameter gradients equal central finite differences of the summed loss
    def loss() -> float:
        return float(sum(r["loss"] for r in interp.run_key(batch, key=1, train=False)))

    eps = 1e-5  # the loss sums a dozen nodes: a larger step keeps rounding noise (~1e-16 * loss / eps) small
    for node, group in grads.items():
        for name, grad in group.items():
            p = by_name[node].params[name]
            numeric = np.zeros_like(p)
            for idx in np.ndindex(p.shape):
                old = p[idx]
                p[idx] = old + eps
                up = loss()
                p[idx] = old - eps
                down = loss()
                p[idx] = old
                numeric[idx] = (up - down) / (2 * eps)
            np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-9, err_msg=f"{node}.{name}")

    # (c) and the gradients of a direct PyTorch recursion with the same weights
    params = {
        node: {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in group.items()}
        for node, group in interp.params().items()
    }
    total = _torch_tree_loss(tree, vocab, params)
    assert total.item() == pytest.approx(loss(), rel=1e-12)
    total.backward()
    for node, group in grads.items():
        for name, grad in group.items():
            expected = params[node][name].grad
            assert expected is not None
            np.testing.assert_allclose(grad, expected.numpy(), rtol=1e-6, atol=1e-12, err_msg=f"{node}.{name}")


# ----------------------------------------------------------- end to end: one step of graph message passing
def test_one_message_passing_step_through_the_interpreter(babi: Any) -> None:
    """h = Linear(x); m_e = Linear(h[src_e]); a_v = sum of m_e into dst_e; readout mean(h + a) -> MSE.
    The node states fan out to Gather, to ScatterSum's ``like`` (no gradient) and to the residual Add."""
    g = Graph("mp")
    h = g.linear(g.input("x", width=babi.feature_width), 4, name="embed")
    to_gather, to_like, to_add = g.bcast(h, 3, name="h_fanout")
    src, dst = g.input("src", dtype="int"), g.input("dst", dtype="int")
    messages = g.linear(g.gather(to_gather, src, name="read"), 4, name="message")
    summed = g.scatter_sum(messages, dst, to_like, name="write")
    readout = g.mean_rows(g.add(to_add, summed, name="residual"), name="readout")
    g.mse(g.linear(readout, 2, name="out"), g.input("y", width=2), name="loss")
    interp = Interpreter(g, seed=1)
    batch = Batch(
        {"x": babi.node_features, "src": babi.edges[:, 0], "dst": babi.edges[:, 1], "y": np.ones((1, 2))}, size=1
    )
    grads = interp.gradients(batch)
    for ctx in interp.contexts:
        assert not ctx.cache and not ctx.joins

    p = interp.params()
    n = babi.num_nodes
    adjacency = np.zeros((n, n))
    np.add.at(adjacency, (babi.edges[:, 1], babi.edges[:, 0]), 1.0)
    hx = babi.node_features @ p["embed"]["W"] + p["embed"]["b"]
    dense = (hx + adjacency @ (hx @ p["message"]["W"]) + adjacency.sum(1, keepdims=True) * p["message"]["b"]).mean(0)
    pred = dense @ p["out"]["W"] + p["out"]["b"]
    (report,) = interp.run_key(batch, key=1, train=False)
    assert report["loss"] == pytest.approx(float(np.mean((pred - 1.0) ** 2)), rel=1e-10)

    # gradients through Gather and ScatterSum (message) and through all three uses of h (embed)
    for node in ("message", "embed"):
        np.testing.assert_allclose(grads[node]["W"], _fd(interp, batch, node, "W"), rtol=1e-6, atol=1e-9)


def _fd(interp: Interpreter, batch: Batch, node: str, name: str) -> np.ndarray:
    p = interp.context(node).params[name]
    numeric = np.zeros_like(p)
    for idx in np.ndindex(p.shape):
        old = p[idx]
        p[idx] = old + 1e-6
        up = interp.run_key(batch, key=2, train=False)[0]["loss"]
        p[idx] = old - 1e-6
        down = interp.run_key(batch, key=2, train=False)[0]["loss"]
        p[idx] = old
        numeric[idx] = (up - down) / 2e-6
    return numeric
