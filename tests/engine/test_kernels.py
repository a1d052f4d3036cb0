"""Every native kernel against its Python op, on the op test cases (tests/ir/test_op_gradients.py CASES).

For each case whose op kind has a native kernel (and, through the bridge, for cases of kinds that have
none), the native run must give:

* forward: the same outputs on the same ports with the same states, values equal to 1e-12 (float64);
* backward: the same gradients for every input message and the same parameter gradients (1e-12);
* reports: the same losses and counts;
* bundles: the messages of each port in one call give what they give one by one (test_op_bundles.run);
* finite differences: the Python gradient test, run on the native op;
* float32: equal to the Python op in float32 to float32 rounding;
* nothing left cached once every backward came back, and nothing cached by a forward that does not train.
"""

from __future__ import annotations

import numpy as np
import pytest

from amp_notebook import engine
from amp_notebook.engine.specs import ENCODERS
from amp_notebook.ir.ops import LOSS_PORT
from tests.engine.harness import NativeOp, as_float, native_case
from tests.ir import test_op_bundles as bundles
from tests.ir import test_op_gradients as grads
from tests.ir.test_op_gradients import CASES, Case

NATIVE = [c for c in CASES if c.op.kind in ENCODERS]
# cases run through the native bridge (the path of every op without a kernel: a user's own op), of kinds that
# join, collect by state, change states, fan out or report losses
BRIDGED = [c for c in CASES if c.op.kind in ("mse", "collect", "group", "flatmap", "ungroup", "gather", "lstm_update")]


def run_pair(case: Case, seed: int = 11):
    """Forward then backward of every feed, message by message; outputs, input gradients, ctx."""
    params = {k: np.asarray(v).copy() for k, v in case.params.items()}
    ctx = grads._context(case, params, train=True)
    emitted = grads._forward(case, ctx, case.feeds)
    proj = grads._projections(case, emitted, seed)
    back = grads._backward(case, ctx, emitted, proj)
    return emitted, back, ctx


def assert_same(native_case_: Case, python_case: Case, rtol: float, atol: float) -> None:
    out_n, back_n, ctx_n = run_pair(native_case_)
    out_p, back_p, ctx_p = run_pair(python_case)
    assert [(p, s) for p, _, s in out_n] == [(p, s) for p, _, s in out_p]
    for (port, y_n, s), (_, y_p, _) in zip(out_n, out_p, strict=True):
        assert np.shape(y_n) == np.shape(y_p), (port, s)
        assert np.asarray(y_n).dtype == np.asarray(y_p).dtype or port == LOSS_PORT, (port, s)
        np.testing.assert_allclose(as_float(y_n), as_float(y_p), rtol=rtol, atol=atol, err_msg=f"{port} {s}")
    assert set(back_n) == set(back_p)
    for key, g in back_p.items():
        assert back_n[key].dtype == g.dtype, key
        np.testing.assert_allclose(as_float(back_n[key]), as_float(g), rtol=rtol, atol=atol, err_msg=str(key))
    for name in python_case.params:
        np.testing.assert_allclose(ctx_n.grads[name], ctx_p.grads[name], rtol=rtol, atol=atol, err_msg=name)
    assert [sorted(r) for r in ctx_n.reports] == [sorted(r) for r in ctx_p.reports]
    for r_n, r_p in zip(ctx_n.reports, ctx_p.reports, strict=True):
        assert {k: v for k, v in r_n.items() if k != "loss"} == {k: v for k, v in r_p.items() if k != "loss"}
        assert r_n["loss"] == pytest.approx(r_p["loss"], rel=max(rtol, 1e-15), abs=atol)
    op = native_case_.op
    assert isinstance(op, NativeOp)
    assert op.held(ctx_n) == 0, "entries left cached after every backward came back"


@pytest.mark.parametrize("case", NATIVE, ids=[c.id for c in NATIVE])
def test_native_kernel_equals_the_python_op_float64(case: Case) -> None:
    assert_same(native_case(case), case, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("case", NATIVE, ids=[c.id for c in NATIVE])
def test_native_kernel_equals_the_python_op_float32(case: Case) -> None:
    assert_same(native_case(case, dtype=np.float32), native_case(case, dtype=np.float32, bridge=True), 2e-6, 1e-6)


@pytest.mark.parametrize("case", NATIVE, ids=[c.id for c in NATIVE])
def test_native_bundles_equal_the_python_bundles(case: Case) -> None:
    nat = native_case(case)
    for bundled in (False, True):
        out_n, grads_n, ctx_n = bundles.run(nat, bundled)
        out_p, grads_p, ctx_p = bundles.run(case, bundled)
        assert list(out_n) == list(out_p)
        for key, y in out_p.items():
            np.testing.assert_allclose(as_float(out_n[key]), as_float(y), rtol=1e-12, atol=1e-13, err_msg=str(key))
        assert set(grads_n) == set(grads_p)
        for key, g in grads_p.items():
            np.testing.assert_allclose(grads_n[key], g, rtol=1e-12, atol=1e-13, err_msg=str(key))
        for name in case.params:
            np.testing.assert_allclose(ctx_n.grads[name], ctx_p.grads[name], rtol=1e-12, atol=1e-13)
        assert nat.op.held(ctx_n) == 0


@pytest.mark.parametrize("case", NATIVE, ids=[c.id for c in NATIVE])
def test_native_kernel_matches_finite_differences(case: Case) -> None:
    grads.test_backward_matches_finite_differences(native_case(case))


@pytest.mark.parametrize("case", NATIVE, ids=[c.id for c in NATIVE])
def test_native_kernel_caches_nothing_when_not_training(case: Case) -> None:
    nat = native_case(case)
    params = {k: np.asarray(v, dtype=np.float64) for k, v in case.params.items()}
    ctx = grads._context(nat, params, train=False)
    grads._forward(nat, ctx, nat.feeds)
    assert nat.op.held(ctx) == 0


@pytest.mark.parametrize("case", BRIDGED, ids=[c.id for c in BRIDGED])
def test_an_op_without_a_native_kernel_runs_through_the_bridge(case: Case) -> None:
    """The bridge converts payloads and states both ways and calls the Python op: the same results."""
    assert_same(native_case(case, bridge=True), case, rtol=0.0, atol=0.0)
    grads.test_backward_matches_finite_differences(native_case(case, bridge=True))


def test_every_registered_kernel_has_an_encoder_and_a_case() -> None:
    kinds = set(engine.native().status()["kernels"])
    assert kinds == set(ENCODERS), "src/kernels registers kinds that engine/specs.py does not encode, or vice versa"
    assert kinds <= {c.op.kind for c in CASES} | {"input"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_backward_gives_numpys_bits_for_every_sign_and_special_value(dtype) -> None:
    """``g * (x > 0)`` bit for bit, also where it is -0 (a negative gradient where x <= 0) or NaN (an
    infinite gradient there), in a run long enough for the vectorized loop and its remainder."""
    from amp_notebook.ir.message import State
    from amp_notebook.ir.ops import NodeContext, ReLU

    specials = [0.0, -0.0, 1.5, -1.5, np.inf, -np.inf, np.nan, 1e-45, -1e-45]
    x = np.array([a for a in specials for _ in specials] * 3 + [2.0, -2.0, 0.0], dtype=dtype).reshape(-1, 1)
    g = np.array([b for _ in specials for b in specials] * 3 + [-3.0, -3.0, np.inf], dtype=dtype).reshape(-1, 1)
    native, ctx = NativeOp(ReLU(), {"key"}), NodeContext("n")
    ctx.train, ctx.grad_inputs, ctx.grad_outputs = True, {"in"}, {"out"}
    native.forward(ctx, "in", x, State(key=0))
    [(_, got, _)] = native.backward(ctx, "out", g, State(key=0))
    with np.errstate(invalid="ignore"):
        expected = g * (x > 0)
    assert np.asarray(got).dtype == expected.dtype
    assert np.asarray(got).tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_linear_adds_one_row_gradients_as_numpy_does_bit_for_bit(dtype) -> None:
    """One message at a time after the first (the per-tree layout): the native kernel adds x.T @ g into the
    accumulator in one pass; the bits equal numpy's product-then-``+=``, signed zeros included."""
    from amp_notebook.ir.message import State
    from amp_notebook.ir.ops import Linear, NodeContext

    rng = np.random.default_rng(5)
    rows = [rng.standard_normal((1, 6)).astype(dtype) for _ in range(4)]
    rows[1][0, :2] = [-0.0, 0.0]
    grads_out = [rng.standard_normal((1, 5)).astype(dtype) for _ in range(4)]
    grads_out[2][0, 1:3] = [0.0, -0.0]
    strided = np.asfortranarray(rng.standard_normal((5, 1)).astype(dtype)).T  # a row read with a stride
    grads_out[3] = strided
    params = {"W": rng.standard_normal((6, 5)).astype(dtype), "b": rng.standard_normal(5).astype(dtype)}
    results = {}
    for side in ("python", "native"):
        op = Linear(6, 5) if side == "python" else NativeOp(Linear(6, 5), set())
        ctx = NodeContext("node", {k: v.copy() for k, v in params.items()})
        ctx.grads = {k: np.zeros_like(v) for k, v in params.items()}
        ctx.train = True
        for i, (x, g) in enumerate(zip(rows, grads_out, strict=True)):
            state = State(key=i)
            op.forward(ctx, "in", x, state)
            op.backward(ctx, "out", g, state)
            ctx.n_grads += 1
        results[side] = ctx.grads["W"]
    np.testing.assert_array_equal(results["native"], results["python"])
    np.testing.assert_array_equal(np.signbit(results["native"]), np.signbit(results["python"]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_linear_holds_back_weight_gradients_and_settles_them_bit_for_bit(dtype) -> None:
    """A Linear queues the rows of small bundles and adds them into grads["W"] when settled (before an update
    or a read; here at the end and wherever the queue fills). The bits equal adding each row's product,
    ``0 + x[i] * g[j]``, one row at a time, signed zeros included: in the vector strips and the columns
    after them (70 columns), across the queue's limit of 64 rows, for bundles of several messages and of
    several rows, after a restart (the first gradient after an update) and around a bundle too large to
    wait (BLAS's x.T @ g, as numpy adds it), and onto an accumulator that holds -0."""
    from amp_notebook.ir.message import State
    from amp_notebook.ir.ops import Linear, NodeContext

    n, p = 9, 70
    rng = np.random.default_rng(8)
    params = {"W": rng.standard_normal((n, p)).astype(dtype), "b": rng.standard_normal(p).astype(dtype)}
    native = NativeOp(Linear(n, p), set())
    native.hold = True
    ctx = NodeContext("node", {k: v.copy() for k, v in params.items()})
    ctx.grads = {k: np.zeros_like(v) for k, v in params.items()}
    ctx.train, ctx.grad_inputs, ctx.grad_outputs = True, {"in"}, {"out"}
    W = np.zeros((n, p), dtype)  # what adding one row at a time gives
    b = np.zeros(p, dtype)
    key = 0
    shapes = [[1], [1, 1], [3], [2, 1, 1], [1] * 4, [6], [2, 2]] * 8  # rows per message, per bundle
    for i, bundle in enumerate(shapes):
        restart = i in (0, 30)  # the first gradient after an update: the accumulator starts over
        ctx.n_grads = 0 if restart else max(ctx.n_grads, 1)
        xs = [rng.standard_normal((r, n)).astype(dtype) for r in bundle]
        gs = [rng.standard_normal((r, p)).astype(dtype) for r in bundle]
        xs[0][0, :3] = [-0.0, 0.0, -0.0]
        gs[-1][-1, :4] = [0.0, -0.0, -0.0, 0.0]
        if i == 7:  # one row after a settle onto -0 (a sum BLAS could leave): -0 + (0 + -0) is +0
            native.settle(ctx)
            np.testing.assert_array_equal(ctx.grads["W"], W)
            ctx.grads["W"][0, [0, -1]] = W[0, [0, -1]] = -0.0
            gs[0][0, -1] = 0.0
        states = [State(key=key + j) for j in range(len(bundle))]
        key += len(bundle)
        native.forward_bundle(ctx, "in", xs, states)
        native.backward_bundle(ctx, "out", gs, states)
        x, g = np.concatenate(xs), np.concatenate(gs)
        if restart:
            W[...] = 0
            b[...] = 0
        if len(x) > 4:  # too large to wait: numpy's product, added after the queued rows
            W += x.T @ g
        else:
            for r in range(len(x)):
                W += 0 + x[r][:, None] * g[r][None, :]
        b += g.sum(axis=0)
        ctx.n_grads += len(bundle)
        if i in (7, len(shapes) - 1):
            native.settle(ctx)
            np.testing.assert_array_equal(ctx.grads["W"], W)
            np.testing.assert_array_equal(np.signbit(ctx.grads["W"]), np.signbit(W))
    np.testing.assert_allclose(ctx.grads["b"], b, rtol=1e-12 if dtype == np.float64 else 1e-5)


@pytest.mark.parametrize("kind", ["split", "bcast"])
@pytest.mark.parametrize("first", [np.float32, np.float64])
def test_fan_out_gradients_of_two_dtypes_add_and_join_as_numpy_does(kind: str, first: type) -> None:
    """Split's gradient is np.concatenate's (the wider dtype, values exact); Bcast's sum is numpy's += into a
    copy of the first gradient to arrive (its dtype, each sum computed in the wider one): bit for bit."""
    from amp_notebook.ir.message import State
    from amp_notebook.ir.ops import Bcast, NodeContext, Split

    rng = np.random.default_rng(3)
    second = np.float64 if first is np.float32 else np.float32
    op = Split([2, 3]) if kind == "split" else Bcast(2)
    widths = (2, 3) if kind == "split" else (5, 5)
    grads = [("out1", rng.standard_normal((4, widths[1])).astype(first)),
             ("out0", rng.standard_normal((4, widths[0])).astype(second))]  # fmt: skip
    got = {}
    for name, run in (("python", op), ("native", NativeOp(op, {"key"}))):
        ctx = NodeContext("n")
        ctx.train = True
        ctx.grad_outputs = frozenset(op.output_ports())
        run.forward(ctx, "in", rng.standard_normal((4, 5)), State(key=0))
        out = [run.backward(ctx, port, g, State(key=0)) for port, g in grads]
        assert out[0] == [] and len(out[1]) == 1
        got[name] = out[1][0][1]
    assert got["native"].dtype == got["python"].dtype
    np.testing.assert_array_equal(got["native"], got["python"])
