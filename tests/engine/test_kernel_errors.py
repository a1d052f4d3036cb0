"""A native kernel fails where its Python op fails, with the Python op's exception: the replayed ones (an
expression's failure, a value the op cannot use) word for word, the native ones naming the same culprit.
Through the bridge a Python op's exception passes unchanged."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from amp_notebook.ir.message import State
from amp_notebook.ir.ops import (
    Bcast,
    Collect,
    Concat,
    Cond,
    Distribute,
    Isu,
    NodeContext,
    Op,
    OpError,
    Phi,
    SoftmaxCrossEntropy,
    Split,
)
from tests.engine.harness import NativeOp

X = np.ones((2, 3))


def python_error(op: Op, feeds: list[tuple[str, Any, State]], train: bool = True) -> BaseException:
    ctx = NodeContext("n")
    ctx.train = train
    with pytest.raises(Exception) as caught:
        for port, x, s in feeds:
            op.forward(ctx, port, x, s)
    return caught.value


def native_error(op: Op, feeds: list[tuple[str, Any, State]], bridge: bool = False) -> BaseException:
    fields = {f for _, _, s in feeds for f in s}
    native, ctx = NativeOp(op, fields, bridge), NodeContext("n")
    with pytest.raises(Exception) as caught:
        for port, x, s in feeds:
            native.forward(ctx, port, x, s)
    return caught.value


REPLAYED = [
    ("cond_index_out_of_range", Cond("t", branches=3), [("in", X, State(key=0, t=5))]),
    ("cond_bool_index", Cond("t < 2", branches=3), [("in", X, State(key=0, t=1))]),
    ("distribute_negative", Distribute("t - 3", 2), [("in", X, State(key=0, t=1))]),
    ("cond_missing_field", Cond("t < length"), [("in", X, State(key=0, t=1))]),
    ("isu_division_by_zero", Isu({"t": "t // u"}, {"t": "t * u"}), [("in", X, State(key=0, t=1, u=0))]),
    ("isu_min_of_one", Isu({"t": "min(t)"}, {"t": "t"}), [("in", X, State(key=0, t=1))]),
]


@pytest.mark.parametrize("op, feeds", [r[1:] for r in REPLAYED], ids=[r[0] for r in REPLAYED])
def test_replayed_errors_are_the_python_ops_own(op: Op, feeds: list) -> None:
    expected, got = python_error(op, feeds), native_error(op, feeds)
    assert type(got) is type(expected) and str(got) == str(expected)


NATIVE = [
    ("isu_changes_key", Isu({"key": "key + 1"}, {"key": "key - 1"}), [("in", X, State(key=0))], "may not change"),
    ("phi_twice", Phi(2), [("in0", X, State(key=0)), ("in1", X, State(key=0))], "reached the Phi twice"),
    (
        "softmax_target_out_of_range",
        SoftmaxCrossEntropy(),
        [("logits", X, State(key=0)), ("target", np.array([0, 3]), State(key=0))],
        "class ids must lie in [0, 3)",
    ),
    (  # the Python op's text quotes its index expression; natively the same states
        "collect_slot_filled_twice",
        Collect("0", "t % 2", 2, None),
        [("in", X, State(key=0, t=1)), ("in", X, State(key=0, t=3))],
        "is filled twice, by state State(key=0, t=1) and by State(key=0, t=3)",
    ),
    (
        "softmax_second_message_at_a_join",
        SoftmaxCrossEntropy(),
        [("logits", X, State(key=0)), ("logits", X, State(key=0))],
        "received a second message",
    ),
]


@pytest.mark.parametrize("op, feeds, phrase", [r[1:] for r in NATIVE], ids=[r[0] for r in NATIVE])
def test_native_errors_are_op_errors_naming_the_culprit(op: Op, feeds: list, phrase: str) -> None:
    expected, got = python_error(op, feeds), native_error(op, feeds)
    assert isinstance(expected, OpError) and isinstance(got, OpError)
    assert phrase in str(expected) and phrase in str(got)
    assert got.port == expected.port or expected.port is None


def backward_error(op: Op, native: bool, x: Any, grads: list[tuple[str, Any]]) -> BaseException:
    """The error of ``op`` (or its native kernel) when its outputs' gradients ``grads`` come back, in order,
    after one forward of ``x``; every output carries a gradient."""
    s = State(key=0, t=1)
    run: Op = NativeOp(op, {"key", "t"}) if native else op
    ctx = NodeContext("n")
    ctx.train = True
    ctx.grad_outputs = frozenset(op.output_ports())
    run.forward(ctx, "in", x, s)
    with pytest.raises(Exception) as caught:
        for port, g in grads:
            run.backward(ctx, port, g, s)
    return caught.value


FAN_OUT_ERRORS = [
    (
        "split_second_gradient",
        Split([2, 1]),
        [("out0", np.ones((2, 2))), ("out0", np.ones((2, 2)))],
        "output 'out0' sent a second gradient for state State(key=0, t=1)",
    ),
    (
        "split_gradient_of_another_shape",
        Split([2, 1]),
        [("out1", np.ones((3, 1)))],
        "Split output 'out1': expected a gradient of shape (2, 1), got (3, 1)",
    ),
    (
        "bcast_second_gradient",
        Bcast(3),
        [("out2", np.ones((2, 3))), ("out2", np.ones((2, 3)))],
        "output 'out2' sent a second gradient for state State(key=0, t=1)",
    ),
    (  # numpy's += would broadcast the row into the total without a word
        "bcast_gradients_of_different_shapes",
        Bcast(2),
        [("out0", np.ones((2, 3))), ("out1", np.ones((1, 3)))],
        "Bcast output 'out1': expected a gradient of shape (2, 3) like the other outputs', got (1, 3)",
    ),
]


@pytest.mark.parametrize("op, grads, text", [r[1:] for r in FAN_OUT_ERRORS], ids=[r[0] for r in FAN_OUT_ERRORS])
def test_fan_out_gradients_that_do_not_fit_are_op_errors_on_both_engines(op: Op, grads: list, text: str) -> None:
    expected = backward_error(op, False, np.ones((2, 3)), grads)
    got = backward_error(op, True, np.ones((2, 3)), grads)
    assert isinstance(expected, OpError) and isinstance(got, OpError)
    assert str(got) == str(expected) and text in str(got)


def test_a_python_ops_exception_passes_the_bridge_unchanged() -> None:
    feeds = [("in0", np.ones((2, 3)), State(key=0)), ("in1", np.ones((3, 3)), State(key=0))]
    expected, got = python_error(Concat(2), feeds), native_error(Concat(2), feeds, bridge=True)
    assert type(got) is type(expected) and str(got) == str(expected)


class AddsAField(Op):
    """A user's op whose states gain a field the compile step cannot know of."""

    kind = "adds_a_field"
    bundling = "per_message"

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> list:
        return [("out", x, state.replace(secret=1))]


def test_a_bridged_op_that_adds_an_unknown_field_is_refused_naming_the_field() -> None:
    got = native_error(AddsAField(), [("in", X, State(key=0))], bridge=True)
    assert isinstance(got, ValueError) and "'secret'" in str(got) and "layout" in str(got)


BAD_PAYLOADS = [
    ("linear_wrong_width", "linear", [np.ones((2, 5))]),
    ("linear_vector", "linear", [np.ones(4)]),
    ("relu_scalar", "relu", [0.5, 0.25]),
    ("relu_bundle_of_different_widths", "relu", [np.ones((2, 3)), np.ones((2, 4))]),
]


@pytest.mark.parametrize("kind, xs", [b[1:] for b in BAD_PAYLOADS], ids=[b[0] for b in BAD_PAYLOADS])
def test_payloads_a_kernel_cannot_take_are_op_errors_not_crashes(kind: str, xs: list) -> None:
    from amp_notebook.ir.ops import Linear, ReLU

    op = Linear(4, 3) if kind == "linear" else ReLU()
    native, ctx = NativeOp(op, {"key"}), NodeContext("n", {k: np.ones(s) for k, s in op.param_shapes().items()})
    with pytest.raises(OpError):
        native.forward_bundle(ctx, "in", xs, [State(key=k) for k in range(len(xs))])


def test_parameters_that_do_not_fit_the_op_are_refused_at_the_boundary() -> None:
    from amp_notebook.ir.ops import Linear

    native = NativeOp(Linear(4, 3), {"key"})
    with pytest.raises(ValueError, match="param_shapes"):
        native.forward(NodeContext("n", {"W": np.ones((3, 3)), "b": np.ones(3)}), "in", np.ones((2, 4)), State(key=0))
    with pytest.raises(ValueError, match="2 parameters"):
        w = np.ones((4, 3))
        native.native.KernelProbe(native.codec, native.spec, [w], [np.zeros_like(w)], 1, 1, None)


def test_a_spec_that_does_not_fit_its_kernel_is_refused_at_the_boundary() -> None:
    native = NativeOp(Isu({"t": "t + 1"}, {"t": "t - 1"}), {"key", "t"})
    module, codec = native.native, native.codec
    bad_slot = {**native.spec, "ints": [1, 99, 0, 1, 2, 1, 0, 0]}
    no_predicate = {**NativeOp(Cond("t < 2"), {"t"}).spec, "programs": []}
    deep = {**native.spec, "programs": [np.array([[1, 99, 0]], dtype=np.int64)]}
    for spec in (bad_slot, no_predicate, deep):
        with pytest.raises(ValueError):
            module.KernelProbe(codec, spec, [], [], 1, 1, None)
