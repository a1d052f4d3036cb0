"""Layer normalization over the last axis, with a learned gain and bias (as ``torch.nn.LayerNorm``).

For each row ``x`` of width H (every leading index of the payload)::

    mean = sum(x) / H;   var = sum((x - mean)**2) / H;   inv = 1 / sqrt(var + eps)
    xhat = (x - mean) * inv;   y = xhat * g + b

and backward, with ``d = dy * g``::

    dx = inv * (d - mean(d) - xhat * mean(d * xhat));   dg = sum over rows of dy * xhat;   db = sum of dy

The variance is the biased one (divided by H), as torch computes it, so imported torch weights give the
same outputs. Each row is normalized on its own, so a bundle of messages is one stacked call whose rows are
exactly the messages' rows; only the parameter gradients, sums over rows, round differently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from amp_notebook.ir.message import State
from amp_notebook.ir.ops.base import Emitted, NodeContext, Op, OpError, Width, check_width, stack, unstack
from amp_notebook.ir.ops.facts import SIZE, Field, NNForm, Number, TorchForm


class LayerNorm(Op):
    """Normalizes the last axis to mean 0 and variance 1, then scales by ``g`` and shifts by ``b`` (learned)."""

    kind = "layer_norm"
    group = "payload"
    bundling = "rows"
    parameterized = True
    element_flops = (8.0, 12.0)  # a mean, a variance, a scale and a shift per element; backward two more means
    fields = (
        Field("width", SIZE, "width of the last axis, the one normalized", example=64, from_width="in"),
        Field("eps", Number(0.0, open_low=True), "added to the variance before its square root", default=1e-5),
    )
    nn_form = NNForm(
        "layer_norm", "``x`` normalized over its last axis to mean 0 and variance 1, times a learned gain plus a "
        "learned bias (a LayerNorm node; its width is the width of ``x``).",
    )  # fmt: skip
    torch_form = TorchForm("LayerNorm", fields={"eps": "eps"}, params={"g": "weight", "b": "bias"})
    width: int
    eps: float

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"g": (self.width,), "b": (self.width,)}

    def init_params(self, rng: np.random.Generator, dtype: np.dtype) -> dict[str, np.ndarray]:
        return {"g": np.ones(self.width, dtype=dtype), "b": np.zeros(self.width, dtype=dtype)}  # as torch

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        check_width("LayerNorm", "in", self.width, widths.get("in"))
        return {"out": self.width}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        y, xhat, inv = self._normalize(ctx, x)
        if ctx.train:
            ctx.cache[state] = (xhat, inv)
        return [("out", y, state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        xhat, inv = ctx.cache.pop(state)
        dx = self._grad(ctx, g, xhat, inv)
        return [] if dx is None else [("in", dx, state)]

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        x, offsets = stack(xs)
        y, xhat, inv = self._normalize(ctx, x)
        if ctx.train:
            for s, xh, iv in zip(states, unstack(xhat, offsets), unstack(inv, offsets), strict=True):
                ctx.cache[s] = (xh, iv)
        return [("out", yi, s) for yi, s in zip(unstack(y, offsets), states, strict=True)]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        cached = [ctx.cache.pop(s) for s in states]
        xhat, _ = stack([c[0] for c in cached])
        inv, _ = stack([c[1] for c in cached])
        g, offsets = stack(gs)
        dx = self._grad(ctx, g, xhat, inv)
        return [] if dx is None else [("in", d, s) for d, s in zip(unstack(dx, offsets), states, strict=True)]

    def _normalize(self, ctx: NodeContext, x: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = np.asarray(x)
        if x.ndim < 1 or x.shape[-1] != self.width:
            raise OpError(
                f"LayerNorm input 'in': expected a last axis of width {self.width}, got shape {x.shape}", port="in"
            )
        centered = x - x.mean(axis=-1, keepdims=True)
        inv = 1.0 / np.sqrt(np.mean(centered * centered, axis=-1, keepdims=True) + self.eps)
        xhat = centered * inv
        return xhat * ctx.params["g"] + ctx.params["b"], xhat, inv

    def _grad(self, ctx: NodeContext, g: np.ndarray, xhat: np.ndarray, inv: np.ndarray) -> np.ndarray | None:
        rows = (-1, self.width)
        ctx.accumulate("g", np.sum((g * xhat).reshape(rows), axis=0))
        ctx.accumulate("b", np.sum(g.reshape(rows), axis=0))
        if "in" not in ctx.grad_inputs:
            return None
        d = g * ctx.params["g"]
        return inv * (d - d.mean(axis=-1, keepdims=True) - xhat * np.mean(d * xhat, axis=-1, keepdims=True))
