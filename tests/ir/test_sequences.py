"""What the tagger's sequence machinery computes: Ungroup in chunks, Partition with a size field, Collect with
rows stacked and fields dropped, the fused LSTM step ops, and ``lstm_loop`` over a whole sequence.

Gradients of every op are checked against finite differences in test_op_gradients.py; here: outputs, the
states they carry, errors that name what is wrong, and the LSTM against ``torch.nn.LSTMCell`` / ``nn.LSTM``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amp_notebook.data import Batch
from amp_notebook.ir.cells import lstm_loop
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.ir.message import State
from amp_notebook.ir.ops import Collect, LSTMStart, LSTMUpdate, OpError, Partition, Ungroup
from tests.ir.test_aggregation import Feed, forward_all, st


# ---------------------------------------------------------------------------------------- Ungroup chunks
def test_ungroup_in_chunks_keeps_the_leading_axis_and_restores_the_gradient() -> None:
    x = np.arange(12.0).reshape(6, 2)
    op = Ungroup("t", chunk="bucket")
    ctx, out = forward_all(op, [("in", x, st(bucket=2))])
    assert [s["t"] for _, _, s in out] == [0, 1, 2]
    assert [p.shape for _, p, _ in out] == [(2, 2)] * 3
    np.testing.assert_array_equal(out[1][1], x[2:4])
    back = []
    for _, p, s in reversed(out):
        back += op.backward(ctx, "out", p * 10, s)
    ((port, grad, state),) = back
    assert port == "in" and state == st(bucket=2) and not ctx.cache
    np.testing.assert_array_equal(grad, x * 10)
    _, ones = forward_all(Ungroup("c", chunk=1), [("in", x[:3], st())])
    assert [p.shape for _, p, _ in ones] == [(1, 2)] * 3


@pytest.mark.parametrize(
    ("op", "state", "match"),
    [
        (Ungroup("t", chunk=4), st(), "divides the row count"),
        (Ungroup("t", chunk="bucket"), st(bucket=0), "gave 0"),
        (Ungroup("t", chunk="bucket"), st(), "reads state field"),
    ],
)
def test_ungroup_chunk_errors_name_the_chunk_and_the_rows(op: Ungroup, state: State, match: str) -> None:
    with pytest.raises(OpError, match=match):
        forward_all(op, [("in", np.zeros((6, 2)), state)])


def test_ungroup_rejects_a_bad_chunk() -> None:
    with pytest.raises(OpError, match="chunk: expected a positive int"):
        Ungroup("t", chunk=0)
    with pytest.raises(OpError, match="chunk"):
        Ungroup("t", chunk="import os")


# ------------------------------------------------------------------------------------ Partition size_field
def test_partition_puts_each_groups_row_count_in_its_state() -> None:
    table = np.array([[3, 0], [0, 7], [3, 5], [3, 0], [1, 9]])
    op = Partition("w", keep_2d=False, size_field="ids")
    ctx, out = forward_all(op, [("in", table, st(length=3))], train=False)
    assert [(s["w"], s["ids"]) for _, _, s in out] == [(0, 1), (1, 1), (3, 3)]
    np.testing.assert_array_equal(out[2][1], [0, 5, 0])
    assert not ctx.cache
    with pytest.raises(OpError, match="already has field 'ids'"):
        forward_all(op, [("in", table, st(ids=1))])
    with pytest.raises(OpError, match="other than field"):
        Partition("w", size_field="w")


# ------------------------------------------------------------------------------ Collect rows and drop fields
def test_collect_stacks_rows_in_slot_order_and_drops_the_members_fields() -> None:
    op = Collect("0", "w", "length", None, axis=0, drop=["w", "ids"])
    rows = {w: np.full((1, 2), float(w)) for w in range(3)}
    feeds: list[Feed] = [("in", rows[w], st(length=3, w=w, ids=w + 1)) for w in (2, 0, 1)]
    ctx, out = forward_all(op, feeds)
    ((_, x, state),) = out
    assert state == st(length=3)
    np.testing.assert_array_equal(x[:, 0], [0.0, 1.0, 2.0])
    back = op.backward(ctx, "out", np.arange(6.0).reshape(3, 2), state)
    assert [(s["w"], g.tolist()) for _, g, s in back] == [(0, [[0.0, 1.0]]), (1, [[2.0, 3.0]]), (2, [[4.0, 5.0]])]
    assert not ctx.cache and not ctx.joins


def test_collect_rows_errors() -> None:
    with pytest.raises(OpError, match=r"Collect axis: expected one of 0, -1, got 1"):
        Collect("0", "w", 2, None, axis=1)
    with pytest.raises(OpError, match="drop other fields"):
        Collect("0", "w", 2, "w", drop=["w"])
    op = Collect("0", "w", 2, None, axis=0, drop=["w"])
    with pytest.raises(OpError, match="at least 2 dimensions"):
        forward_all(op, [("in", np.zeros(3), st(w=0))])
    with pytest.raises(OpError, match="trailing shape"):
        forward_all(op, [("in", np.zeros((1, 3)), st(w=0)), ("in", np.zeros((1, 2)), st(w=1))])
    assert Collect("0", "w", 4, None, axis=0).infer_widths({"in": 5}) == {"out": 5}


# ------------------------------------------------------------------------------------------- LSTM steps
def _torch_cell(W_x: np.ndarray, b: np.ndarray, W_h: np.ndarray) -> torch.nn.LSTMCell:
    H = W_h.shape[0]
    cell = torch.nn.LSTMCell(W_x.shape[0], H, dtype=torch.float64)
    with torch.no_grad():
        cell.weight_ih.copy_(torch.as_tensor(W_x.T))
        cell.bias_ih.copy_(torch.as_tensor(b))
        cell.weight_hh.copy_(torch.as_tensor(W_h.T))
        cell.bias_hh.zero_()
    return cell


def test_lstm_start_and_update_equal_torch_lstm_cell() -> None:
    rng = np.random.default_rng(3)
    D, H, n = 3, 4, 2
    W_x, b, W_h = rng.standard_normal((D, 4 * H)), rng.standard_normal(4 * H), rng.standard_normal((H, 4 * H))
    x0, x1 = rng.standard_normal((n, D)), rng.standard_normal((n, D))
    cell = _torch_cell(W_x, b, W_h)
    h0, c0 = cell(torch.as_tensor(x0))  # from the zero state
    h1, c1 = cell(torch.as_tensor(x1), (h0, c0))
    _, ((_, hc0, _),) = forward_all(LSTMStart(H), [("gates", x0 @ W_x + b, st())])
    np.testing.assert_allclose(hc0, torch.cat([h0, c0], 1).detach().numpy(), rtol=1e-12)
    feeds: list[Feed] = [("x_gates", x1 @ W_x + b, st()), ("h_gates", hc0[:, :H] @ W_h, st()), ("c", hc0[:, H:], st())]
    _, ((_, hc1, _),) = forward_all(LSTMUpdate(H), feeds)
    np.testing.assert_allclose(hc1, torch.cat([h1, c1], 1).detach().numpy(), rtol=1e-12)
    with pytest.raises(OpError, match=r"input 'gates': expected shape \(n, 16\)"):
        forward_all(LSTMStart(H), [("gates", np.zeros((2, 12)), st())])


def _bilstm_graph(D: int, H: int) -> Graph:
    """Both directions of one sequence (length, D) through lstm_loop: every step's [h; c] out, stacked."""
    g = Graph("bilstm")
    gates = g.linear(g.input("x", width=D), 8 * H, name="input")
    fwd_gates, bwd_gates = g.split(gates, [4 * H, 4 * H], name="directions")
    fwd_rows = g.ungroup(fwd_gates, "t", name="fwd_rows", chunk=1)
    bwd_rows = g.ungroup(bwd_gates, "t", name="bwd_rows", chunk=1)
    bwd_rows = g.isu(bwd_rows, {"t": "length - 1 - t"}, {"t": "length - 1 - t"}, name="reverse")
    fwd = lstm_loop(g, fwd_rows, H, "fwd", "t", "length - 1", every_step=True)
    bwd = lstm_loop(g, bwd_rows, H, "bwd", "t", "length - 1", every_step=True)
    bwd = g.isu(bwd, {"t": "length - 1 - t"}, {"t": "length - 1 - t"}, name="unreverse")
    both = g.collect(g.concat(fwd, bwd, name="both"), "0", "t", "length", None, name="steps", axis=0, drop=["t"])
    g.mse(both, g.input("target", width=4 * H), name="loss")
    return g


def _torch_direction(x: torch.Tensor, W_ih: torch.Tensor, b: torch.Tensor, W_hh: torch.Tensor, reverse: bool):
    """[h; c] of every step of one LSTM direction, written out (gates i, f, g, o), in sequence order."""
    H = W_hh.shape[1]
    h = c = torch.zeros(H, dtype=x.dtype)
    steps = {}
    for t in reversed(range(len(x))) if reverse else range(len(x)):
        i, f, u, o = (x[t] @ W_ih.T + b + h @ W_hh.T).split(H)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(u)
        h = torch.sigmoid(o) * torch.tanh(c)
        steps[t] = torch.cat([h, c])
    return torch.stack([steps[t] for t in range(len(x))])


@pytest.mark.parametrize("length", [1, 2, 5])
def test_lstm_loop_equals_torch_bidirectional_lstm(length: int) -> None:
    D, H = 3, 2
    g = _bilstm_graph(D, H)
    g.validate(require_loss=True)
    assert {g.nodes[n].meta.get("cell") for n in ("fwd_start", "fwd_h", "fwd_update", "fwd_out")} == {"fwd"}
    rng = np.random.default_rng(length)
    x, target = rng.standard_normal((length, D)), rng.standard_normal((length, 4 * H))
    interp = Interpreter(g, seed=1, dtype=np.float64)
    batch = Batch({"x": x, "target": target}, size=1, fields={"length": length})
    grads = interp.gradients(batch, key=0)  # checks one backward per forward message and empty caches
    p = {n: {k: torch.tensor(v, requires_grad=True) for k, v in group.items()} for n, group in interp.params().items()}
    xt = torch.as_tensor(x)
    W, b = p["input"]["W"], p["input"]["b"]
    fwd = _torch_direction(xt, W[:, : 4 * H].T, b[: 4 * H], p["fwd_h"]["W"].T, reverse=False)
    bwd = _torch_direction(xt, W[:, 4 * H :].T, b[4 * H :], p["bwd_h"]["W"].T, reverse=True)
    lstm = torch.nn.LSTM(D, H, bidirectional=True, dtype=torch.float64)  # the h's, once more, from torch's own LSTM
    with torch.no_grad():
        for suffix, half, rec in (("", slice(0, 4 * H), "fwd_h"), ("_reverse", slice(4 * H, 8 * H), "bwd_h")):
            getattr(lstm, f"weight_ih_l0{suffix}").copy_(W[:, half].T)
            getattr(lstm, f"bias_ih_l0{suffix}").copy_(b[half])
            getattr(lstm, f"bias_hh_l0{suffix}").zero_()
            getattr(lstm, f"weight_hh_l0{suffix}").copy_(p[rec]["W"].T)
        h_both, _ = lstm(xt)
    torch.testing.assert_close(torch.cat([fwd[:, :H], bwd[:, :H]], 1).detach(), h_both, rtol=1e-12, atol=1e-14)
    loss = torch.nn.functional.mse_loss(torch.cat([fwd, bwd], dim=1), torch.as_tensor(target))
    (report,) = interp.run_key(batch, key=1, train=False)
    assert loss.item() == pytest.approx(report["loss"], rel=1e-12)
    loss.backward()
    for node, group in grads.items():
        for name, grad in group.items():
            expected = p[node][name].grad
            assert expected is not None, f"{node}.{name}"
            np.testing.assert_allclose(grad, expected.numpy(), rtol=1e-6, atol=1e-12, err_msg=f"{node}.{name}")
