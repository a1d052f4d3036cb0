"""The native optimizers equal optim.py bit for bit: SGD, momentum and Adam, with and without clip_norm, in
float32 and float64, over several steps (Adam's step count, momentum's velocity), on the memory a run hands
them (``assemble.optimizer_spec``: the same arrays Python's optimizer would create in ``opt_state``)."""

from __future__ import annotations

import numpy as np
import pytest

from amp_notebook.engine import native
from amp_notebook.engine.assemble import optimizer_spec
from amp_notebook.ir.ops import NodeContext
from amp_notebook.optim import make_optimizer

SPECS = [
    {"name": "sgd", "lr": 0.1},
    {"name": "sgd", "lr": 0.3, "clip_norm": 0.05},
    {"name": "momentum", "lr": 0.01, "momentum": 0.9},
    {"name": "momentum", "lr": 0.02, "momentum": 0.5, "clip_norm": 1e-3},
    {"name": "adam", "lr": 3e-3},
    {"name": "adam", "lr": 1e-2, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "clip_norm": 0.1},
]


# (7, 5) fits inside one vector of the widest build; (33, 97) runs each build's vector loop many times and
# ends in a tail (the loops are compiled once per instruction set: optim.cc)
SHAPES = [(7, 5), (33, 97)]


def context(dtype: str, seed: int, shape: tuple[int, int] = SHAPES[0]) -> NodeContext:
    rng = np.random.default_rng(seed)
    params = {"W": rng.standard_normal(shape).astype(dtype), "b": rng.standard_normal(shape[1]).astype(dtype)}
    return NodeContext("node", params)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_native_steps_equal_python_steps(spec: dict, dtype: str, shape: tuple[int, int]) -> None:
    python_ctx, native_ctx = context(dtype, 1, shape), context(dtype, 1, shape)
    python_opt, native_opt = make_optimizer(dict(spec)), make_optimizer(dict(spec))
    names = ["W", "b"]
    rng = np.random.default_rng(2)
    for step in range(4):
        grads = {
            k: (rng.standard_normal(v.shape) * 10.0 ** (step - 2)).astype(dtype) for k, v in python_ctx.params.items()
        }
        scale = 1.0 / (step + 1)
        python_opt.step(python_ctx.params, {k: g.copy() for k, g in grads.items()}, python_ctx.opt_state, scale)
        native_ctx.grads = {k: g.copy() for k, g in grads.items()}
        spec_now = optimizer_spec(native_opt, native_ctx, names)
        t = native().optimizer_step(spec_now, [native_ctx.params[k] for k in names],
                                    [native_ctx.grads[k] for k in names], scale)  # fmt: skip
        if t:
            native_ctx.opt_state["t"] = t
        for k in names:
            np.testing.assert_array_equal(native_ctx.params[k], python_ctx.params[k], err_msg=f"step {step} {k}")
        for k, v in python_ctx.opt_state.items():
            if isinstance(v, np.ndarray) and not k.endswith(".scratch"):  # scratch is scratch
                np.testing.assert_array_equal(native_ctx.opt_state[k], v, err_msg=f"step {step} state {k}")
            elif not isinstance(v, np.ndarray):
                assert native_ctx.opt_state[k] == v
    moved = np.max(np.abs(native_ctx.params["W"] - context(dtype, 1, shape).params["W"]))
    assert moved > 0  # the steps did something


def test_the_clip_norm_scales_when_it_bites_and_not_otherwise() -> None:
    ctx = context("float64", 3)
    start = {k: v.copy() for k, v in ctx.params.items()}
    ctx.grads = {k: np.full_like(v, 10.0) for k, v in ctx.params.items()}
    opt = make_optimizer({"name": "sgd", "lr": 1.0, "clip_norm": 1.0})
    native().optimizer_step(optimizer_spec(opt, ctx, ["W", "b"]), [ctx.params["W"], ctx.params["b"]],
                            [ctx.grads["W"], ctx.grads["b"]], 1.0)  # fmt: skip
    step = np.concatenate([(start[k] - ctx.params[k]).ravel() for k in ("W", "b")])
    assert np.linalg.norm(step) == pytest.approx(1.0, rel=1e-12)


def test_optimizer_memory_that_does_not_fit_is_refused() -> None:
    ctx = context("float64", 4)
    opt = make_optimizer({"name": "momentum", "lr": 0.1})
    spec = optimizer_spec(opt, ctx, ["W", "b"])
    spec["velocity"] = [np.zeros((2, 2)), spec["velocity"][1]]
    with pytest.raises(ValueError, match="differs from its parameter"):
        native().optimizer_step(spec, [ctx.params["W"], ctx.params["b"]], [ctx.grads["W"], ctx.grads["b"]], 1.0)
    with pytest.raises(TypeError):  # a read-only or non-contiguous array is never copied behind our back
        native().optimizer_step(optimizer_spec(opt, ctx, ["W", "b"]), [ctx.params["W"].T, ctx.params["b"]],
                                [ctx.grads["W"], ctx.grads["b"]], 1.0)  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_check_before_an_update_finds_any_nan_or_infinity(dtype: str) -> None:
    """The check runs in blocks without a branch per element: a bad value anywhere, in any block, is found;
    the largest and smallest finite values are not bad."""
    info = np.finfo(dtype)
    clean = [np.full(3000, info.max, dtype), np.array([-info.max, info.tiny, -0.0, 0.0], dtype), np.zeros(0, dtype)]
    assert native().arrays_finite(clean)
    for bad in (np.nan, np.inf, -np.inf):
        for where in (0, 1023, 1024, 2999):
            arrays = [a.copy() for a in clean]
            arrays[0][where] = bad
            assert not native().arrays_finite(arrays), (bad, where)
        assert not native().arrays_finite([clean[0], np.array([1.0, bad], dtype)])
