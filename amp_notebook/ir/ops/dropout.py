"""Dropout whose mask is a function of the message, so every executor draws the same one.

For a training key each element of the payload is kept with probability ``1 - p`` and scaled by
``1 / (1 - p)``, or zeroed (as ``torch.nn.Dropout`` in training mode); a validation key passes through
unchanged. The mask is not drawn from a random generator's running state, which would depend on the order
messages happen to arrive in, but computed from what identifies the message:

1. ``base``: the first 8 bytes (little-endian) of the BLAKE2b digest of the UTF-8 text
   ``repr((seed, node name, sorted(state.items())))``: the op's ``seed``, the node's name and every state
   field (the key id, loop counters, tree positions);
2. element ``i`` of the payload in C order gets ``u_i = splitmix64(base + (i + 1) * 0x9E3779B97F4A7C15) / 2**64``
   (a counter-based hash, 53 bits of it as the fraction) and is kept when ``u_i >= p``.

The same message therefore gets the same mask in the reference interpreter, on any backend, alone or in a
bundle, in any run; a new key id (every key of every epoch has its own) or loop step gets a new one. Backward
recomputes the mask from the gradient's state, so nothing is cached. Whether the key trains is ``ctx.train``,
which a runtime sets only where a backward comes back: the op declares ``training_dependent``, and the gradient
analysis sends one back to it (``ir/analysis.py``) even when nothing before it learns (dropout on inputs).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np

from amp_notebook.ir.message import State
from amp_notebook.ir.ops.base import Emitted, NodeContext, Op
from amp_notebook.ir.ops.facts import Field, Int, NNForm, Number, TorchForm

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def uniforms(base: int, n: int) -> np.ndarray:
    """``n`` numbers in [0, 1): splitmix64 of the counters ``base + (i + 1) * golden`` (i = 0 .. n-1), top 53 bits."""
    z = np.arange(1, n + 1, dtype=np.uint64)
    z *= _GOLDEN  # uint64 arithmetic wraps modulo 2**64, as the hash intends
    z += np.uint64(base)
    shifted = np.empty_like(z)
    for shift, factor in ((30, _MIX1), (27, _MIX2)):
        np.right_shift(z, np.uint64(shift), out=shifted)
        z ^= shifted
        z *= factor
    np.right_shift(z, np.uint64(31), out=shifted)
    z ^= shifted
    z >>= np.uint64(11)
    out = z.astype(np.float64)
    out *= 2.0**-53
    return out


def message_base(seed: int, node: str, state: State) -> int:
    """The 64-bit start of a message's counters: a hash of the seed, the node's name and the whole state."""
    text = repr((seed, node, sorted(state.items())))
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


class Dropout(Op):
    """Zeroes each element with probability ``p`` and scales the rest by ``1 / (1 - p)`` for training keys;
    validation keys pass through. The mask is a function of ``seed``, the node and the message's state."""

    kind = "dropout"
    group = "payload"
    bundling = "per_message"  # each message's mask is its own: a stacked call would save nothing
    element_flops = (12.0, 12.0)  # the mask's hash (a few multiplies and shifts), a compare and a product
    training_dependent = True
    fields = (
        Field("p", Number(0.0, 1.0), "the probability of zeroing an element (training keys only)", default=0.5),
        Field("seed", Int(0, 2**32 - 1), "chooses the masks: each (seed, node, message state) has its own", default=0),
    )  # fmt: skip
    nn_form = NNForm(
        "dropout", "Each element of ``x`` zeroed with probability ``p`` and the rest scaled by 1 / (1 - p), for "
        "training keys; validation keys pass through. The mask is a function of ``seed``, the node and the message's "
        "state, so every executor draws the same one.",
    )  # fmt: skip
    torch_form = TorchForm("Dropout", fields={"p": "p"})
    p: float
    seed: int

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        if not ctx.train or self.p == 0.0:
            return [("out", x, state)]
        return [("out", self._drop(ctx, np.asarray(x), state), state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        if "in" not in ctx.grad_inputs:
            return []
        if self.p == 0.0:
            return [("in", g, state)]
        return [("in", self._drop(ctx, np.asarray(g), state), state)]

    def keep(self, node: str, state: State, shape: tuple[int, ...]) -> np.ndarray:
        """The message's mask: True where an element is kept."""
        return (uniforms(message_base(self.seed, node, state), math.prod(shape)) >= self.p).reshape(shape)

    def _drop(self, ctx: NodeContext, x: np.ndarray, state: State) -> np.ndarray:
        scale = 0.0 if self.p >= 1.0 else 1.0 / (1.0 - self.p)
        return np.where(self.keep(ctx.name, state, x.shape), x * scale, 0.0).astype(x.dtype, copy=False)
