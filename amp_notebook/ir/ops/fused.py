"""Fused cell ops: the light elementwise part of one recurrent cell as a single node.

A Tree-LSTM, GRU or LSTM cell built from primitives (``ir.cells`` with ``fused=False``) spends some twenty
messages on gate nonlinearities and the c/h update, each a few microseconds of Python glue around a
microsecond of numpy. These ops do that part in one message; the heavy Linears that compute the gate
pre-activations stay separate nodes, so placement still sees and spreads them. The math, the gate order
and therefore the weights are exactly those of the primitive cells (``ir.cells`` docstrings), and every
backward here is checked against finite differences (``tests/ir/test_op_gradients.py``) and, inside whole
models, against torch autograd.

An LSTM step is two ops: ``LSTMStart`` for step 0 (from the zero state, so no zeros have to be made per
sequence) and ``LSTMUpdate`` after it; ``ir.cells.lstm_loop`` wires them into a loop.

Sigmoids are the primitive Sigmoid's ``0.5 * tanh(x / 2) + 0.5`` (no overflow, and several times faster on
these small matrices than ``exp`` with a sign split or ``scipy.special.expit``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from amp_notebook.ir.message import State
from amp_notebook.ir.ops.base import (
    Emitted,
    JoinMixin,
    NodeContext,
    Op,
    OpError,
    Width,
    check_width,
    stack,
    unstack,
)
from amp_notebook.ir.ops.facts import HIDDEN, MATCH_ON
from amp_notebook.ir.ops.payload import Sigmoid

expit = Sigmoid().f  # the logistic sigmoid into a fresh array, as the primitive Sigmoid computes it


def _check_rows(op: str, pieces: Mapping[str, np.ndarray], widths: Mapping[str, int]) -> None:
    rows = None
    for port, x in pieces.items():
        shape = np.shape(x)
        if len(shape) != 2 or shape[1] != widths[port]:
            raise OpError(f"{op} input {port!r}: expected shape (n, {widths[port]}), got {shape}", port=port)
        if rows is not None and shape[0] != rows:
            raise OpError(f"{op} input {port!r}: expected {rows} rows (as the other inputs), got {shape[0]}", port=port)
        rows = shape[0]


class TreeLSTMLeaf(Op):
    """Gate pre-activations [i, o, u] (n, 3 hidden) -> the leaf state [h; c] (n, 2 hidden)::

    c = sigmoid(i) * tanh(u);   h = sigmoid(o) * tanh(c)
    """

    kind = "tree_lstm_leaf"
    group = "payload"
    fused_cell = True
    bundling = "rows"
    element_flops = (4.0, 8.0)  # a sigmoid or tanh and a few products per gate element

    fields = (HIDDEN,)
    hidden: int

    def input_ports(self) -> tuple[str, ...]:
        return ("gates",)

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        check_width("TreeLSTMLeaf", "gates", 3 * self.hidden, widths.get("gates"))
        return {"out": 2 * self.hidden}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        _check_rows("TreeLSTMLeaf", {"gates": x}, {"gates": 3 * self.hidden})
        out, saved = self._cell(x)
        if ctx.train:
            ctx.cache[state] = saved
        return [("out", out, state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return [("gates", self._grad(g, *ctx.cache.pop(state)), state)]

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        x, offsets = stack(xs)
        _check_rows("TreeLSTMLeaf", {"gates": x}, {"gates": 3 * self.hidden})
        out, saved = self._cell(x)
        if ctx.train:
            _cache_rows(ctx, saved, offsets, states)
        return [("out", o, s) for o, s in zip(unstack(out, offsets), states, strict=True)]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        saved = _cached_rows(ctx, states)
        g, offsets = stack(gs)
        return [("gates", d, s) for d, s in zip(unstack(self._grad(g, *saved), offsets), states, strict=True)]

    def _cell(self, x: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        H = self.hidden
        s = expit(x[:, : 2 * H])  # sigmoid(i), sigmoid(o)
        tu = np.tanh(x[:, 2 * H :])
        out = np.empty((len(x), 2 * H), dtype=np.result_type(x, np.float32))
        c = np.multiply(s[:, :H], tu, out=out[:, H:])
        tc = np.tanh(c)
        np.multiply(s[:, H:], tc, out=out[:, :H])
        return out, (s, tu, tc)

    def _grad(self, g: np.ndarray, s: np.ndarray, tu: np.ndarray, tc: np.ndarray) -> np.ndarray:
        H = self.hidden
        s_o = s[:, H:]
        gh = g[:, :H]
        dc = g[:, H:] + gh * s_o * (1.0 - tc * tc)
        dz = np.empty((len(g), 3 * H), dtype=np.result_type(g, s))
        dz[:, :H] = dc * tu
        dz[:, H : 2 * H] = gh * tc
        dz[:, : 2 * H] *= s * (1.0 - s)
        dz[:, 2 * H :] = dc * s[:, :H] * (1.0 - tu * tu)
        return dz


class TreeLSTMBranch(JoinMixin, Op):
    """Gate pre-activations [i, f_l, f_r, o, u] (n, 5 hidden) and the children's memory cells c_left,
    c_right (n, hidden each), joined by state -> the node state [h; c] (n, 2 hidden)::

    c = sigmoid(i) * tanh(u) + sigmoid(f_l) * c_left + sigmoid(f_r) * c_right;   h = sigmoid(o) * tanh(c)
    """

    kind = "tree_lstm_branch"
    group = "payload"
    fused_cell = True
    bundling = "rows"
    element_flops = (4.0, 10.0)  # a sigmoid or tanh and a few products per gate element
    ports = ("gates", "c_left", "c_right")

    fields = (HIDDEN, MATCH_ON)
    hidden: int

    def input_ports(self) -> tuple[str, ...]:
        return self.ports

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        check_width("TreeLSTMBranch", "gates", 5 * self.hidden, widths.get("gates"))
        check_width("TreeLSTMBranch", "c_left", self.hidden, widths.get("c_left"))
        check_width("TreeLSTMBranch", "c_right", self.hidden, widths.get("c_right"))
        return {"out": 2 * self.hidden}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        return self.forward_bundle(ctx, port, [x], [state])

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return self.backward_bundle(ctx, port, [g], [state])

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        joined = _join_all(self, ctx, port, xs, states)
        if not joined:
            return []
        H = self.hidden
        z, offsets = stack([got["gates"][0] for got in joined])
        c_l, _ = stack([got["c_left"][0] for got in joined])
        c_r, _ = stack([got["c_right"][0] for got in joined])
        _check_rows("TreeLSTMBranch", {"gates": z, "c_left": c_l, "c_right": c_r}, {"gates": 5 * H, "c_left": H,
                                                                                   "c_right": H})  # fmt: skip
        s = expit(z[:, : 4 * H])  # sigmoid(i), sigmoid(f_l), sigmoid(f_r), sigmoid(o)
        tu = np.tanh(z[:, 4 * H :])
        out = np.empty((len(z), 2 * H), dtype=np.result_type(z, c_l, c_r, np.float32))
        c = np.multiply(s[:, :H], tu, out=out[:, H:])
        c += s[:, H : 2 * H] * c_l
        c += s[:, 2 * H : 3 * H] * c_r
        tc = np.tanh(c)
        np.multiply(s[:, 3 * H :], tc, out=out[:, :H])
        out_states = [got["gates"][1] for got in joined]
        if ctx.train:
            _cache_rows(ctx, (s, tu, tc, c_l, c_r), offsets, out_states,
                        [(got["c_left"][1], got["c_right"][1]) for got in joined])  # fmt: skip
        return [("out", o, sz) for o, sz in zip(unstack(out, offsets), out_states, strict=True)]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        H = self.hidden
        (s, tu, tc, c_l, c_r), extra = _cached_rows(ctx, states, with_extra=True)
        g, offsets = stack(gs)
        gh = g[:, :H]
        dc = g[:, H:] + gh * s[:, 3 * H :] * (1.0 - tc * tc)
        dz = np.empty((len(g), 5 * H), dtype=np.result_type(g, s))
        dz[:, :H] = dc * tu
        dz[:, H : 2 * H] = dc * c_l
        dz[:, 2 * H : 3 * H] = dc * c_r
        dz[:, 3 * H : 4 * H] = gh * tc
        dz[:, : 4 * H] *= s * (1.0 - s)
        dz[:, 4 * H :] = dc * s[:, :H] * (1.0 - tu * tu)
        dl, dr = dc * s[:, H : 2 * H], dc * s[:, 2 * H : 3 * H]
        out: Emitted = []
        for dzi, dli, dri, sz, (sl, sr) in zip(unstack(dz, offsets), unstack(dl, offsets), unstack(dr, offsets),
                                               states, extra, strict=True):  # fmt: skip
            out += [("gates", dzi, sz), ("c_left", dli, sl), ("c_right", dri, sr)]
        return out


class GRUUpdate(JoinMixin, Op):
    """The GRU's gates and update from the two Linears' outputs, as torch.nn.GRUCell (gates r, z, n)::

        [xr, xz, xn] = x_gates;   [hr, hz, hn] = h_gates          (n, 3 hidden) each
        r = sigmoid(xr + hr);   z = sigmoid(xz + hz);   n = tanh(xn + r * hn)
        h' = (1 - z) * n + z * h

    with ``h`` (n, hidden) the previous state; the three inputs are joined by state (or ``match_on``) and
    the output carries ``x_gates``' state.
    """

    kind = "gru_update"
    group = "payload"
    fused_cell = True
    bundling = "rows"
    element_flops = (4.0, 12.0)  # a sigmoid or tanh and a few products per gate element
    ports = ("x_gates", "h_gates", "h")

    fields = (HIDDEN, MATCH_ON)
    hidden: int

    def input_ports(self) -> tuple[str, ...]:
        return self.ports

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        check_width("GRUUpdate", "x_gates", 3 * self.hidden, widths.get("x_gates"))
        check_width("GRUUpdate", "h_gates", 3 * self.hidden, widths.get("h_gates"))
        check_width("GRUUpdate", "h", self.hidden, widths.get("h"))
        return {"out": self.hidden}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        return self.forward_bundle(ctx, port, [x], [state])

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return self.backward_bundle(ctx, port, [g], [state])

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        joined = _join_all(self, ctx, port, xs, states)
        if not joined:
            return []
        H = self.hidden
        xg, offsets = stack([got["x_gates"][0] for got in joined])
        hg, _ = stack([got["h_gates"][0] for got in joined])
        h, _ = stack([got["h"][0] for got in joined])
        _check_rows("GRUUpdate", {"x_gates": xg, "h_gates": hg, "h": h}, {"x_gates": 3 * H, "h_gates": 3 * H, "h": H})
        rz = expit(xg[:, : 2 * H] + hg[:, : 2 * H])
        r, z = rz[:, :H], rz[:, H:]
        hn = hg[:, 2 * H :]
        n = np.tanh(xg[:, 2 * H :] + r * hn)
        diff = h - n
        out = n + z * diff
        out_states = [got["x_gates"][1] for got in joined]
        if ctx.train:
            _cache_rows(ctx, (rz, n, hn, diff), offsets, out_states,
                        [(got["h_gates"][1], got["h"][1]) for got in joined])  # fmt: skip
        return [("out", o, sx) for o, sx in zip(unstack(out, offsets), out_states, strict=True)]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        H = self.hidden
        (rz, n, hn, diff), extra = _cached_rows(ctx, states, with_extra=True)
        g, offsets = stack(gs)
        r, z = rz[:, :H], rz[:, H:]
        dx = np.empty((len(g), 3 * H), dtype=np.result_type(g, rz))
        # written into place, few temporaries: this runs once per node update of every graph step
        g_z = g * z  # the gradient of h (through z * h), and g - g_z = g * (1 - z)
        dn = np.multiply(n, n, out=dx[:, 2 * H :])
        np.subtract(1.0, dn, out=dn)
        dn *= g - g_z  # dn = g * (1 - z) * (1 - n^2)
        np.multiply(dn, hn, out=dx[:, :H])
        np.multiply(g, diff, out=dx[:, H : 2 * H])
        slope = 1.0 - rz
        slope *= rz
        dx[:, : 2 * H] *= slope
        dh = np.empty_like(dx)
        dh[:, : 2 * H] = dx[:, : 2 * H]
        np.multiply(dn, r, out=dh[:, 2 * H :])
        out: Emitted = []
        for dxi, dhi, gzi, sx, (sh, s_h) in zip(unstack(dx, offsets), unstack(dh, offsets), unstack(g_z, offsets),
                                                states, extra, strict=True):  # fmt: skip
            out += [("x_gates", dxi, sx), ("h_gates", dhi, sh), ("h", gzi, s_h)]
        return out


class LSTMStart(Op):
    """The first step of an LSTM from the zero state: gate pre-activations [i, f, g, o] (n, 4 hidden),
    torch.nn.LSTMCell's order, -> the state [h; c] (n, 2 hidden)::

        c = sigmoid(i) * tanh(g);   h = sigmoid(o) * tanh(c)

    (With h = c = 0 the recurrent term adds nothing and the forget gate multiplies zero, so the gate
    pre-activations are the input's alone and f gets a zero gradient.) A loop starts with this op on step
    0 and continues with :class:`LSTMUpdate`, so no zero state has to be made per sequence.
    """

    kind = "lstm_start"
    group = "payload"
    fused_cell = True
    bundling = "rows"
    element_flops = (3.0, 6.0)  # a sigmoid or tanh and a few products per gate element (f is skipped)

    fields = (HIDDEN,)
    hidden: int

    def input_ports(self) -> tuple[str, ...]:
        return ("gates",)

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        check_width("LSTMStart", "gates", 4 * self.hidden, widths.get("gates"))
        return {"out": 2 * self.hidden}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        return self.forward_bundle(ctx, port, [x], [state])

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return self.backward_bundle(ctx, port, [g], [state])

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        H = self.hidden
        x, offsets = stack(xs)
        _check_rows("LSTMStart", {"gates": x}, {"gates": 4 * H})
        s_i, s_o = expit(x[:, :H]), expit(x[:, 3 * H :])
        tg = np.tanh(x[:, 2 * H : 3 * H])
        out = np.empty((len(x), 2 * H), dtype=np.result_type(x, np.float32))
        c = np.multiply(s_i, tg, out=out[:, H:])
        tc = np.tanh(c)
        np.multiply(s_o, tc, out=out[:, :H])
        if ctx.train:
            _cache_rows(ctx, (s_i, s_o, tg, tc), offsets, states)
        return [("out", o, s) for o, s in zip(unstack(out, offsets), states, strict=True)]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        H = self.hidden
        s_i, s_o, tg, tc = _cached_rows(ctx, states)
        g, offsets = stack(gs)
        gh = g[:, :H]
        dc = g[:, H:] + gh * s_o * (1.0 - tc * tc)
        dz = np.zeros((len(g), 4 * H), dtype=np.result_type(g, s_i))
        dz[:, :H] = dc * tg * s_i * (1.0 - s_i)
        dz[:, 2 * H : 3 * H] = dc * s_i * (1.0 - tg * tg)
        dz[:, 3 * H :] = gh * tc * s_o * (1.0 - s_o)
        return [("gates", d, s) for d, s in zip(unstack(dz, offsets), states, strict=True)]


class LSTMUpdate(JoinMixin, Op):
    """An LSTM step after the first, as torch.nn.LSTMCell (gates i, f, g, o), from the two Linears' outputs::

        [i, f, g, o] = x_gates + h_gates                 (n, 4 hidden) each: x @ W_x + b and h @ W_h
        c' = sigmoid(f) * c + sigmoid(i) * tanh(g);   h' = sigmoid(o) * tanh(c')      -> [h'; c'] (n, 2 hidden)

    with ``c`` (n, hidden) the previous memory cell; the three inputs are joined by state (or ``match_on``)
    and the output carries ``x_gates``' state. torch's ``weight_ih`` / ``weight_hh`` are ``W_x.T`` /
    ``W_h.T``; its two biases sum to the one bias of the x Linear (the h Linear has none).
    """

    kind = "lstm_update"
    group = "payload"
    fused_cell = True
    bundling = "rows"
    element_flops = (4.0, 10.0)  # a sigmoid or tanh and a few products per gate element
    ports = ("x_gates", "h_gates", "c")

    fields = (HIDDEN, MATCH_ON)
    hidden: int

    def input_ports(self) -> tuple[str, ...]:
        return self.ports

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        check_width("LSTMUpdate", "x_gates", 4 * self.hidden, widths.get("x_gates"))
        check_width("LSTMUpdate", "h_gates", 4 * self.hidden, widths.get("h_gates"))
        check_width("LSTMUpdate", "c", self.hidden, widths.get("c"))
        return {"out": 2 * self.hidden}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        return self.forward_bundle(ctx, port, [x], [state])

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return self.backward_bundle(ctx, port, [g], [state])

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        joined = _join_all(self, ctx, port, xs, states)
        if not joined:
            return []
        H = self.hidden
        xg, offsets = stack([got["x_gates"][0] for got in joined])
        hg, _ = stack([got["h_gates"][0] for got in joined])
        c, _ = stack([got["c"][0] for got in joined])
        _check_rows("LSTMUpdate", {"x_gates": xg, "h_gates": hg, "c": c}, {"x_gates": 4 * H, "h_gates": 4 * H, "c": H})
        z = xg + hg
        s = expit(z)  # the sigmoid of every gate block; g's block goes through tanh instead, below
        tg = np.tanh(z[:, 2 * H : 3 * H])
        out = np.empty((len(z), 2 * H), dtype=np.result_type(z, c, np.float32))
        c_new = np.multiply(s[:, H : 2 * H], c, out=out[:, H:])
        c_new += s[:, :H] * tg
        tc = np.tanh(c_new)
        np.multiply(s[:, 3 * H :], tc, out=out[:, :H])
        out_states = [got["x_gates"][1] for got in joined]
        if ctx.train:
            _cache_rows(ctx, (s, tg, tc, c), offsets, out_states,
                        [(got["h_gates"][1], got["c"][1]) for got in joined])  # fmt: skip
        return [("out", o, sx) for o, sx in zip(unstack(out, offsets), out_states, strict=True)]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        H = self.hidden
        (s, tg, tc, c), extra = _cached_rows(ctx, states, with_extra=True)
        g, offsets = stack(gs)
        gh = g[:, :H]
        dc = g[:, H:] + gh * s[:, 3 * H :] * (1.0 - tc * tc)
        dz = np.empty((len(g), 4 * H), dtype=np.result_type(g, s))
        dz[:, :H] = dc * tg
        dz[:, H : 2 * H] = dc * c
        dz[:, 3 * H :] = gh * tc
        slope = 1.0 - s
        slope *= s
        dz[:, : 2 * H] *= slope[:, : 2 * H]
        dz[:, 3 * H :] *= slope[:, 3 * H :]
        dz[:, 2 * H : 3 * H] = dc * s[:, :H] * (1.0 - tg * tg)
        dc_prev = dc * s[:, H : 2 * H]
        out: Emitted = []
        # x_gates and h_gates get the same gradient: one array, read (never written) by both Linears
        for dzi, dci, sx, (sh, sc) in zip(unstack(dz, offsets), unstack(dc_prev, offsets), states, extra,
                                          strict=True):  # fmt: skip
            out += [("x_gates", dzi, sx), ("h_gates", dzi, sh), ("c", dci, sc)]
        return out


def _join_all(op: Any, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> list[dict[str, Any]]:
    """Join each message with what waits for it; the complete groups (port -> (payload, state)), in order."""
    joined = []
    for x, s in zip(xs, states, strict=True):
        got = op.join(ctx, port, x, s, op.ports)
        if got is not None:
            joined.append(got)
    return joined


def _cache_rows(
    ctx: NodeContext, arrays: tuple[np.ndarray, ...], offsets: list[int], states: list[State], extra: list | None = None
) -> None:
    """Cache each message's rows of ``arrays`` (views) under its state, with its ``extra`` (other states)."""
    cache = ctx.cache
    pieces = [unstack(a, offsets) for a in arrays]
    for i, s in enumerate(states):
        rows = tuple(p[i] for p in pieces)
        cache[s] = rows if extra is None else (rows, extra[i])


def _cached_rows(ctx: NodeContext, states: list[State], with_extra: bool = False) -> Any:
    """Pop the cached rows of ``states`` and stack them back (and the extras, when cached with them)."""
    cache = ctx.cache
    entries = [cache.pop(s) for s in states]
    if with_extra:
        rows, extra = [e[0] for e in entries], [e[1] for e in entries]
    else:
        rows, extra = entries, None
    arrays = tuple(np.concatenate([r[j] for r in rows]) if len(rows) > 1 else rows[0][j] for j in range(len(rows[0])))
    return (arrays, extra) if with_extra else arrays


__all__ = ["GRUUpdate", "LSTMStart", "LSTMUpdate", "TreeLSTMBranch", "TreeLSTMLeaf"]
