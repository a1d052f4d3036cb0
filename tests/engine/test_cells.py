"""The native fused cells and LayerNorm beyond the op test cases: accuracy of their tanh, widths that fill
whole SIMD vectors and leave tails, joins in every arrival order, strided and mixed-dtype inputs, and the
Python op's errors.

The kernels compute tanh themselves (src/kernels/vecmath.h); a TreeLSTMLeaf whose input gate saturates
(sigmoid(50) is 1 exactly) outputs c = tanh(u) unchanged, so its output shows the function directly.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from amp_notebook.ir.message import State
from amp_notebook.ir.ops import (
    GRUUpdate,
    LayerNorm,
    LSTMStart,
    LSTMUpdate,
    NodeContext,
    Op,
    OpError,
    Sigmoid,
    Tanh,
    TreeLSTMBranch,
    TreeLSTMLeaf,
)
from tests.engine.harness import NativeOp, as_float, native_case
from tests.engine.test_kernels import assert_same
from tests.ir import test_op_bundles as bundles
from tests.ir.test_op_gradients import Case, st

WIDTHS = (1, 7, 8, 9, 16, 17, 50, 150)  # lanes: 8 float64, 16 float32; tails of every length around them


def cell_case(kind: str, H: int, rows: int, seed: int, order: tuple[int, ...] | None = None) -> Case:
    """A random case of a fused cell with hidden width H, its inputs fed in `order` (port indices)."""
    rng = np.random.default_rng(seed)
    op: Op
    if kind == "tree_lstm_leaf":
        op, widths = TreeLSTMLeaf(H), [3 * H]
    elif kind == "lstm_start":
        op, widths = LSTMStart(H), [4 * H]
    elif kind == "tree_lstm_branch":
        op, widths = TreeLSTMBranch(H), [5 * H, H, H]
    elif kind == "gru_update":
        op, widths = GRUUpdate(H), [3 * H, 3 * H, H]
    else:
        op, widths = LSTMUpdate(H), [4 * H, 4 * H, H]
    ports = op.input_ports()
    payloads = [2.0 * rng.standard_normal((rows, w)) for w in widths]
    return Case(f"{kind}_{H}", op, [(ports[p], payloads[p], st()) for p in order or range(len(ports))])


CELLS = ("tree_lstm_leaf", "lstm_start", "tree_lstm_branch", "gru_update", "lstm_update")


def saturated_leaf(u: np.ndarray) -> tuple[np.ndarray, int]:
    """Gates whose c output is tanh(u): i = 50 (sigmoid exactly 1), o = 0; u padded to whole rows."""
    H = 1000
    u = np.concatenate([u, np.zeros(-len(u) % H, dtype=u.dtype)])
    rows = len(u) // H
    full = np.full((rows, H), 50.0, dtype=u.dtype)
    return np.concatenate([full, np.zeros_like(full), u.reshape(rows, H)], axis=1), H


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_tanh_is_within_3_ulp_of_long_double_and_keeps_special_values(dtype: type) -> None:
    u = np.concatenate(
        [np.linspace(-25.0, 25.0, 400_001), np.geomspace(1e-300, 1e-3, 20_000), -np.geomspace(1e-300, 1e-3, 20_000)]
    ).astype(dtype)
    gates, H = saturated_leaf(u)
    ctx = NodeContext("leaf")
    ctx.train = False
    ((_, y, _),) = NativeOp(TreeLSTMLeaf(H), {"key"}).forward(ctx, "gates", gates, st())
    got = y[:, H:].reshape(-1)[: len(u)]
    assert got.dtype == dtype
    exact = np.tanh(u.astype(np.longdouble))
    nonzero = exact != 0
    ulps = np.abs(got[nonzero] - exact[nonzero]) / np.spacing(np.abs(exact[nonzero]).astype(dtype))
    assert float(ulps.max()) <= 3.0
    assert np.all(got[~nonzero] == 0)

    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 30.0, -30.0, 5e-324], dtype=dtype)
    gates, H = saturated_leaf(specials)
    ((_, y, _),) = NativeOp(TreeLSTMLeaf(H), {"key"}).forward(ctx, "gates", gates, st())
    got = y[:, H:].reshape(-1)[: len(specials)]
    np.testing.assert_array_equal(got, np.tanh(specials))
    assert np.signbit(got[1]) and not np.signbit(got[0])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("op", [Tanh(), Sigmoid()], ids=["tanh", "sigmoid"])
def test_tanh_and_sigmoid_ops_use_the_lanes_tanh(op: Op, dtype: type) -> None:
    """The elementwise Tanh and Sigmoid run the cells' tanh, over every tail length around the lanes: tanh
    within 3 ulp of numpy's (each is within 2.3 of the exact value), the sigmoid within 2 machine epsilons
    (tanh(x / 2) / 2 + 1 / 2 keeps tanh's absolute error: in a far tail, where the sigmoid is tiny, the
    relative error of either is large); numpy's special values exactly (-0 keeps its sign, NaN stays NaN)."""
    rng = np.random.default_rng(3)
    ctx = NodeContext("act")
    ctx.train = False
    native = NativeOp(op, {"key"})
    for width in (*WIDTHS, 0):
        x = (6.0 * rng.standard_normal((3, width))).astype(dtype)
        ((_, y, _),) = native.forward(ctx, "in", x, st())
        want = op.f(x)
        assert y.dtype == want.dtype == dtype and y.shape == x.shape
        if isinstance(op, Tanh):
            ulps = np.abs(y - want) / np.spacing(np.maximum(np.abs(want), np.finfo(dtype).tiny).astype(dtype))
            assert width == 0 or float(ulps.max()) <= 3.0
        else:
            np.testing.assert_allclose(y, want, rtol=0, atol=2 * np.finfo(dtype).eps)
    specials = np.array([[0.0, -0.0, np.inf, -np.inf, np.nan, 30.0, -30.0, 5e-324]], dtype=dtype)
    ((_, y, _),) = native.forward(ctx, "in", specials, st())
    np.testing.assert_array_equal(y, op.f(specials))
    assert np.signbit(y[0, 1]) == np.signbit(op.f(specials)[0, 1])


@pytest.mark.parametrize("H", WIDTHS)
@pytest.mark.parametrize("kind", CELLS)
def test_cells_of_any_width_equal_the_python_op(kind: str, H: int) -> None:
    case = cell_case(kind, H, rows=3, seed=H)
    assert_same(native_case(case), case, rtol=1e-12, atol=1e-13)
    f32 = native_case(case, dtype=np.float32)
    assert_same(f32, native_case(case, dtype=np.float32, bridge=True), 2e-6, 1e-6)
    nat = native_case(case)
    for bundled in (False, True):
        out_n, grads_n, _ = bundles.run(nat, bundled)
        out_p, grads_p, _ = bundles.run(case, bundled)
        assert list(out_n) == list(out_p) and set(grads_n) == set(grads_p)
        for key, y in out_p.items():
            np.testing.assert_allclose(as_float(out_n[key]), as_float(y), rtol=1e-12, atol=1e-13)
        for key, g in grads_p.items():
            np.testing.assert_allclose(grads_n[key], g, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("kind", ["tree_lstm_branch", "gru_update", "lstm_update"])
def test_joins_give_the_same_in_every_arrival_order(kind: str) -> None:
    first = None
    for order in itertools.permutations(range(3)):
        case = cell_case(kind, 9, rows=2, seed=5, order=order)
        assert_same(native_case(case), case, rtol=1e-12, atol=1e-13)
        ctx = NodeContext("cell")
        op = native_case(case).op
        outs = [o for port, x, s in case.feeds for o in op.forward(ctx, port, x, s)]
        assert len(outs) == 1
        if first is None:
            first = outs[0][1]
        np.testing.assert_array_equal(outs[0][1], first)


def test_inputs_may_be_strided_views() -> None:
    """The children's cells as column slices of their [h; c] outputs, gates as every other row."""
    rng = np.random.default_rng(2)
    H = 11
    state_l, state_r = rng.standard_normal((3, 2 * H)), rng.standard_normal((3, 2 * H))
    gates = rng.standard_normal((6, 5 * H))[::2]
    feeds = [("gates", gates, st()), ("c_left", state_l[:, H:], st()), ("c_right", state_r[:, H:], st())]
    assert not feeds[1][1].flags.c_contiguous and not gates.flags.c_contiguous
    case = Case("branch_views", TreeLSTMBranch(H), feeds)
    assert_same(native_case(case), case, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("kind", ["tree_lstm_branch", "gru_update", "lstm_update"])
def test_mixed_dtypes_promote_as_numpy(kind: str) -> None:
    """float32 gates with a float64 cell: the output and the gradients are float64, as numpy makes them."""
    case = cell_case(kind, 9, rows=2, seed=8)
    feeds = [(p, x.astype(np.float32) if i == 0 else x, s) for i, (p, x, s) in enumerate(case.feeds)]
    mixed = Case(case.id, case.op, feeds)
    assert_same(native_case(mixed), mixed, rtol=2e-6, atol=1e-6)  # numpy rounds some steps to float32


@pytest.mark.parametrize(
    ("op", "feeds", "port"),
    [
        (TreeLSTMLeaf(2), [("gates", np.zeros((3, 5)))], "gates"),
        (LSTMStart(2), [("gates", np.zeros(8))], "gates"),
        (TreeLSTMBranch(2), [("gates", np.zeros((3, 10))), ("c_left", np.zeros((3, 3))), ("c_right", np.zeros((3, 2)))],
         "c_left"),
        (GRUUpdate(2), [("h", np.zeros((2, 2))), ("x_gates", np.zeros((3, 6))), ("h_gates", np.zeros((3, 6)))], "h"),
        (LSTMUpdate(2), [("x_gates", np.zeros((3, 8))), ("h_gates", np.zeros((3, 8))), ("c", np.zeros((4, 2)))], "c"),
        (LayerNorm(4), [("in", np.zeros((2, 3)))], "in"),
        (LayerNorm(4), [("in", np.zeros(()))], "in"),
    ],
    ids=["leaf_width", "start_rank", "branch_width", "gru_rows", "lstm_rows", "norm_width", "norm_scalar"],
)  # fmt: skip
def test_bad_shapes_raise_the_python_ops_error(op: Op, feeds: list, port: str) -> None:
    errors = []
    for candidate in (op, NativeOp(op, {"key"})):
        ctx = NodeContext("cell", {n: np.ones(shape) for n, shape in op.param_shapes().items()})
        ctx.grads = {n: np.zeros(shape) for n, shape in op.param_shapes().items()}
        with pytest.raises(OpError) as info:
            for p, x in feeds:
                candidate.forward(ctx, p, x, st())
        errors.append((str(info.value), info.value.port))
    assert errors[0] == errors[1]
    assert errors[0][1] == port


def test_a_backward_without_its_forward_is_an_op_error() -> None:
    op = NativeOp(TreeLSTMBranch(2), {"key"})
    with pytest.raises(OpError, match="nothing was cached"):
        op.backward(NodeContext("cell"), "out", np.zeros((1, 4)), st())


@pytest.mark.parametrize("W", (1, 7, 8, 37, 128, 129, 300))
@pytest.mark.parametrize("shape", [(3,), (2, 2)], ids=["rows", "3d"])
def test_layer_norm_of_any_width_equals_the_python_op(W: int, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(W)
    x = rng.standard_normal((*shape, W)) * 3.0 + 1.5
    params = {"g": rng.standard_normal(W), "b": rng.standard_normal(W)}
    case = Case(f"norm_{W}", LayerNorm(W), [("in", x, st())], params)
    assert_same(native_case(case), case, rtol=1e-12, atol=1e-13)
    f32 = native_case(case, dtype=np.float32)
    assert_same(f32, native_case(case, dtype=np.float32, bridge=True), 2e-6, 1e-6)
    nat = native_case(case)
    out_n, grads_n, ctx_n = bundles.run(nat, True)
    out_p, grads_p, ctx_p = bundles.run(case, True)
    for key, y in out_p.items():
        np.testing.assert_allclose(as_float(out_n[key]), as_float(y), rtol=1e-12, atol=1e-13)
    for key, g in grads_p.items():
        np.testing.assert_allclose(grads_n[key], g, rtol=1e-12, atol=1e-13)
    for name in ("g", "b"):
        np.testing.assert_allclose(ctx_n.grads[name], ctx_p.grads[name], rtol=1e-12, atol=1e-13)


def test_layer_norm_of_float32_rows_with_float64_parameters_is_float64() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 10)).astype(np.float32)
    params = {"g": rng.standard_normal(10), "b": rng.standard_normal(10)}
    case = Case("norm_mixed", LayerNorm(10), [("in", x, st(t=1))], params)
    assert_same(native_case(case), case, rtol=2e-6, atol=1e-6)
    ctx = NodeContext("norm", {k: v.copy() for k, v in case.params.items()})
    ((_, y, _),) = native_case(case).op.forward(ctx, "in", x, State(key=0, t=1))
    assert y.dtype == np.float64
