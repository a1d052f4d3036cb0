"""Compound cells against torch: lstm_cell and gru_cell equal torch.nn.LSTMCell / GRUCell (float64, same
weights) in value and in every parameter gradient through the reference interpreter; the Tree-LSTM cells'
structure (widths, explicit fan-out, meta["cell"] tags). Their numbers inside a whole Tree-LSTM are checked
in test_aggregation.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amp_notebook.data import Batch
from amp_notebook.ir import ops
from amp_notebook.ir.cells import gru_cell, lstm_cell, tree_lstm_branch, tree_lstm_leaf
from amp_notebook.ir.graph import Graph, GraphError
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.ir.validate import ValidationError

B, IN, HIDDEN, Z = 4, 3, 5, 2


def _batch(seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    return Batch(
        {
            "x": rng.standard_normal((B, IN)),
            "hz": rng.standard_normal((B, Z)),
            "cz": rng.standard_normal((B, Z)),
            "target": rng.standard_normal((B, 2 * HIDDEN)),
        },
        size=B,
    )


def _lstm_graph() -> Graph:
    """The cell's h and c come from Linears so that the gradients into the cell's h and c inputs are checked
    too (as the gradients of those Linears); the loss reads both outputs."""
    g = Graph("lstm")
    h = g.linear(g.input("hz", width=Z), HIDDEN, name="h0")
    c = g.linear(g.input("cz", width=Z), HIDDEN, name="c0")
    h1, c1 = lstm_cell(g, g.input("x", width=IN), h, c, HIDDEN, name="lstm")
    g.mse(g.concat(h1, c1, name="out"), g.input("target", width=2 * HIDDEN), name="loss")
    return g


def _gru_graph(fused: bool = True, copies: bool = False) -> Graph:
    """With ``copies`` the caller fans h out itself and hands the cell two copies."""
    g = Graph("gru")
    h = g.linear(g.input("hz", width=Z), HIDDEN, name="h0")
    h_in = g.bcast(h, 2, name="h_copies") if copies else h
    h1 = gru_cell(g, g.input("x", width=IN), h_in, HIDDEN, name="gru", fused=fused)
    g.mse(g.concat(h1, g.linear(g.input("cz", width=Z), HIDDEN, name="c0")), g.input("target", width=2 * HIDDEN))
    return g


def _torch_params(interp: Interpreter) -> dict[str, dict[str, torch.Tensor]]:
    return {
        node: {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in group.items()}
        for node, group in interp.params().items()
    }


def _inputs(batch: Batch) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v, dtype=torch.float64) for k, v in batch.inputs.items()}


def _compare(interp: Interpreter, batch: Batch, torch_loss: torch.Tensor, torch_grads: dict[str, torch.Tensor]) -> None:
    (report,) = interp.run_key(batch, key=0, train=False)
    assert report["loss"] == pytest.approx(torch_loss.item(), rel=1e-12)
    grads = interp.gradients(batch, key=1)
    for where, expected in torch_grads.items():
        node, name = where.split(".")
        np.testing.assert_allclose(grads[node][name], expected.numpy(), rtol=1e-6, atol=1e-12, err_msg=where)


def test_lstm_cell_equals_torch_lstm_cell() -> None:
    interp = Interpreter(_lstm_graph(), seed=4, dtype=np.float64)
    batch = _batch(0)
    p = _torch_params(interp)
    x = _inputs(batch)
    cell = torch.nn.LSTMCell(IN, HIDDEN).double()
    W, b = p["lstm_gates"]["W"], p["lstm_gates"]["b"]
    split = torch.tensor(np.random.default_rng(1).standard_normal(4 * HIDDEN))  # torch's two biases sum to b
    with torch.no_grad():  # torch's gate order (i, f, g, o) is the cell's; weights are W.T split by rows
        cell.weight_ih.copy_(W[:IN].T)
        cell.weight_hh.copy_(W[IN:].T)
        cell.bias_ih.copy_(b - split)
        cell.bias_hh.copy_(split)
    h = x["hz"] @ p["h0"]["W"] + p["h0"]["b"]
    c = x["cz"] @ p["c0"]["W"] + p["c0"]["b"]
    h1, c1 = cell(x["x"], (h, c))
    loss = torch.nn.functional.mse_loss(torch.cat([h1, c1], dim=1), x["target"])
    loss.backward()
    assert cell.weight_ih.grad is not None and cell.weight_hh.grad is not None and cell.bias_ih.grad is not None
    W_grad = torch.cat([cell.weight_ih.grad.T, cell.weight_hh.grad.T])
    grads = {"lstm_gates.W": W_grad, "lstm_gates.b": cell.bias_ih.grad}
    grads |= {f"{n}.{k}": t.grad for n in ("h0", "c0") for k, t in p[n].items() if t.grad is not None}
    assert len(grads) == 6
    _compare(interp, batch, loss, grads)


@pytest.mark.parametrize("copies", [False, True], ids=["h", "h_copies"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "primitives"])
def test_gru_cell_equals_torch_gru_cell(fused: bool, copies: bool) -> None:
    interp = Interpreter(_gru_graph(fused, copies), seed=5, dtype=np.float64)
    batch = _batch(2)
    p = _torch_params(interp)
    x = _inputs(batch)
    cell = torch.nn.GRUCell(IN, HIDDEN).double()
    with torch.no_grad():  # gates (r, z, n) in torch's order; r scales (h @ W_hn + b_hn), torch's placement
        cell.weight_ih.copy_(p["gru_x"]["W"].T)
        cell.bias_ih.copy_(p["gru_x"]["b"])
        cell.weight_hh.copy_(p["gru_h"]["W"].T)
        cell.bias_hh.copy_(p["gru_h"]["b"])
    h = x["hz"] @ p["h0"]["W"] + p["h0"]["b"]
    h1 = cell(x["x"], h)
    c = x["cz"] @ p["c0"]["W"] + p["c0"]["b"]
    loss = torch.nn.functional.mse_loss(torch.cat([h1, c], dim=1), x["target"])
    loss.backward()
    grads = {
        "gru_x.W": cell.weight_ih.grad.T,  # type: ignore[union-attr]
        "gru_x.b": cell.bias_ih.grad,
        "gru_h.W": cell.weight_hh.grad.T,  # type: ignore[union-attr]
        "gru_h.b": cell.bias_hh.grad,
    }
    grads |= {f"{n}.{k}": t.grad for n in ("h0", "c0") for k, t in p[n].items() if t.grad is not None}
    assert len(grads) == 8 and all(v is not None for v in grads.values())
    _compare(interp, batch, loss, grads)  # type: ignore[arg-type]


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "primitives"])
def test_cells_tag_their_nodes_and_keep_linears_separate(fused: bool) -> None:
    g = _gru_graph(fused)
    tagged = {name for name, node in g.nodes.items() if node.meta.get("cell") == "gru"}
    assert tagged and all(name.startswith("gru_") for name in tagged)
    assert {"h0", "c0", "hz", "x", "target"}.isdisjoint(tagged)  # nodes built outside the cell stay untagged
    assert sorted(n for n in tagged if g.nodes[n].kind in ops.HEAVY) == ["gru_h", "gru_x"]
    if fused:  # h feeds its Linear and the update; everything after the Linears is one node
        assert sorted(g.nodes[n].kind for n in tagged) == ["bcast", "gru_update", "linear", "linear"]
    else:
        assert sum(g.nodes[n].kind == "bcast" for n in tagged) == 2  # h and n are each used twice
    g2 = _lstm_graph()
    lstm = [n for n, node in g2.nodes.items() if node.meta.get("cell") == "lstm"]
    assert [n for n in lstm if g2.nodes[n].kind in ops.HEAVY] == ["lstm_gates"]
    g.validate()
    g2.validate()


def test_a_gru_cell_given_two_copies_of_h_adds_no_fanout_of_its_own() -> None:
    g = _gru_graph(copies=True)
    assert "gru_h_fanout" not in g.nodes and [n for n in g.nodes if g.nodes[n].kind == "bcast"] == ["h_copies"]
    assert sorted(e.dst for e in g.edges if e.src == "h_copies") == ["gru_h", "gru_update"]
    g.validate()
    g = Graph("bad")
    h = g.input("h", width=HIDDEN)
    with pytest.raises(GraphError, match=r"gru_cell 'gru' h: expected a Ref or two Refs \(copies of h\)"):
        gru_cell(g, g.input("x", width=IN), (h, h, h), HIDDEN, name="gru")  # type: ignore[arg-type]


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "primitives"])
def test_cells_pass_match_on_to_every_join(fused: bool) -> None:
    g = Graph("g")
    x = g.input("x", width=IN)
    h = g.input("h", width=HIDDEN)
    gru_cell(g, x, h, HIDDEN, name="gru", match_on=("t",), fused=fused)
    joins = [n for n in g.nodes.values() if n.kind in {"concat", "add", "mul", "sub", "gru_update"}]
    assert joins and all(n.op.match_on == ("t",) for n in joins)  # type: ignore[attr-defined]


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "primitives"])
def test_tree_lstm_cells_have_the_documented_widths(fused: bool) -> None:
    g = Graph("tree")
    x = g.input("x", width=IN)
    leaf = tree_lstm_leaf(g, x, HIDDEN, name="leaf", fused=fused)
    assert g.width(leaf) == 2 * HIDDEN
    children = g.concat(*g.bcast(leaf, 2), name="pair")  # stands in for a Collect of two children
    node = tree_lstm_branch(g, children, HIDDEN, name="branch", fused=fused)
    assert g.width(node) == 2 * HIDDEN
    assert g.nodes["branch_gates"].op.param_shapes() == {"W": (2 * HIDDEN, 5 * HIDDEN), "b": (5 * HIDDEN,)}
    assert g.nodes["leaf_gates"].op.param_shapes() == {"W": (IN, 3 * HIDDEN), "b": (3 * HIDDEN,)}
    assert {g.nodes[n].meta.get("cell") for n in ("pair", "x")} == {None}

    bad = Graph("bad")
    wrong = bad.concat(bad.input("a", width=HIDDEN), bad.input("b", width=HIDDEN))  # 2H where 4H is expected
    tree_lstm_branch(bad, wrong, HIDDEN, name="branch", fused=fused)
    with pytest.raises(ValidationError, match=r"Split 'branch_children'.*expected width 20 \(sum of sizes\), got 10"):
        bad.validate()


def test_cell_arguments_are_checked() -> None:
    g = Graph("g")
    x = g.input("x")  # width unknown
    with pytest.raises(GraphError, match=r"the width of input x:out is not known yet; pass in_features"):
        tree_lstm_leaf(g, x, HIDDEN, name="leaf")
    with pytest.raises(GraphError, match="hidden: expected a positive int, got 0"):
        gru_cell(g, x, x, 0, name="gru", in_features=3)


def _tree_cells_graph(fused: bool) -> Graph:
    """A leaf from x, a branch over two copies of it, the loss on both h and c of the branch."""
    g = Graph("tree")
    leaf = tree_lstm_leaf(g, g.input("x", width=IN), HIDDEN, name="leaf", fused=fused)
    left, right = g.bcast(leaf, 2, name="twins")
    children = g.concat(left, g.linear(right, 2 * HIDDEN, name="mix"), name="pair")
    node = tree_lstm_branch(g, children, HIDDEN, name="branch", fused=fused)
    g.mse(node, g.input("target", width=2 * HIDDEN), name="loss")
    return g


def test_fused_tree_lstm_cells_equal_the_primitive_cells() -> None:
    batch = _batch(3)
    results = []
    for fused in (True, False):
        interp = Interpreter(_tree_cells_graph(fused), seed=7, dtype=np.float64)
        (report,) = interp.run_key(batch, key=0, train=False)
        results.append((report["loss"], interp.gradients(batch, key=1)))
    (loss_f, grads_f), (loss_p, grads_p) = results
    assert loss_f == pytest.approx(loss_p, rel=1e-12)
    assert set(grads_f) == set(grads_p) == {"leaf_gates", "mix", "branch_gates"}
    for node, group in grads_p.items():
        for name, expected in group.items():
            np.testing.assert_allclose(grads_f[node][name], expected, rtol=1e-10, atol=1e-14, err_msg=f"{node}.{name}")
