"""Sparse message passing on one graph per message: node states (N, H), edges as int index payloads.

Gather takes the rows of the edges' source nodes, ScatterSum/ScatterMean add per-edge rows into their
destination nodes, TypedEdgeSum does both for every edge type at once (each edge picks its type's block
of its source's row), SelectRows keeps a subset of rows (the edges of one type), SumRows/MeanRows read a
graph out. Index payloads are joined by state and carry no gradient.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import Any

import numpy as np
from scipy.sparse import csr_array

from amp_notebook.ir.message import State
from amp_notebook.ir.ops.base import Emitted, JoinMixin, NodeContext, Op, OpError, Width, stack, unstack
from amp_notebook.ir.ops.facts import COUNT, MATCH_ON, Field, NNForm


def _csr_kernel() -> Any:
    """scipy's kernel behind ``csr_array @ dense`` without the array's construction checks (half the time of
    a scatter on graph keys), if this scipy has it with the signature we use; else None (the public route)."""
    try:
        from scipy.sparse._sparsetools import csr_matvecs
    except ImportError:
        return None
    out = np.zeros((2, 2))
    try:  # [[1, 0, 1], [0, 1, 0]] @ [[1, 2], [3, 4], [5, 6]]
        indptr, indices = np.array([0, 2, 3], dtype=np.intp), np.array([0, 2, 1], dtype=np.intp)
        x = np.arange(1.0, 7.0)
        csr_matvecs(2, 3, 2, indptr, indices, np.ones(3), x, out.ravel())
    except Exception:
        return None
    return csr_matvecs if out.tolist() == [[6.0, 8.0], [3.0, 4.0]] else None


csr_matvecs = _csr_kernel()


def _index_vector(op: str, port: str, index: Any, size: int) -> np.ndarray:
    idx = np.asarray(index)
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise OpError(
            f"{op} input {port!r}: expected a 1-D integer index vector, got shape {idx.shape} dtype {idx.dtype}",
            port=port,
        )
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise OpError(
            f"{op} input {port!r}: indices must lie in [0, {size}) (the number of rows), found "
            f"[{idx.min()}, {idx.max()}]; fix the edge list or the node count",
            port=port,
        )
    return idx


def scatter_add_rows(idx: np.ndarray, x: np.ndarray, n: int) -> np.ndarray:
    """``out = zeros((n, ...)); out[idx[e]] += x[e]`` for every row e, repeated indices accumulating.

    For a float matrix this is a sparse (n, E) 0/1 matrix times x, built directly in CSR form (rows
    sorted by destination): several times faster than ``np.add.at`` on the row sizes of graph keys.
    """
    if x.ndim != 2 or x.dtype.kind != "f" or len(idx) == 0:
        out = np.zeros((n, *x.shape[1:]), dtype=x.dtype)
        np.add.at(out, idx, x)
        return out
    indptr = np.zeros(n + 1, dtype=np.intp)  # the dtype of argsort's result: the kernel wants them alike
    np.cumsum(np.bincount(idx, minlength=n), out=indptr[1:])
    ones = np.ones(len(idx), dtype=x.dtype)
    order = np.argsort(idx, kind="stable")
    if csr_matvecs is None or x.dtype not in (np.float32, np.float64):
        return np.asarray(csr_array((ones, order, indptr), shape=(n, len(idx))) @ x)
    # our indices are checked and in range, so the kernel may run on them directly: out = A @ x
    out = np.zeros((n, x.shape[1]), dtype=x.dtype)
    csr_matvecs(n, len(idx), x.shape[1], indptr, order, ones, np.ascontiguousarray(x).ravel(), out.ravel())
    return out


class _Sparse(JoinMixin, Op):
    """Shared shape of the index ops: a differentiable ``x`` joined by state with int index payloads.

    The output carries ``x``'s state. Index payloads are usually per key (an Input), so with the node
    states coming round a loop with a counter, join them on the key alone (``match_on=()``) and feed a
    fresh index message for every pass.
    """

    group = "aggregation"
    bundling = "per_message"  # each message holds its own graph's index payloads
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)
    fields = (MATCH_ON,)

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        return {"out": widths.get("x")}


class Gather(_Sparse):
    """``out = x[index]``: node states (N, H) and an index (E,) give one row per edge (E, H).

    With ``index = edges[:, 0]`` it reads each edge's source node. Backward adds the rows back into
    zeros of shape (N, H) (``scatter_add_rows``, so repeated indices accumulate); the index gets no gradient.
    """

    kind = "gather"
    nondiff_inputs = frozenset({"index"})
    nn_form = NNForm(
        "gather", "``x[index]``: rows of ``x`` (N, H) at an int index (E,).", (("x", None), ("index", "int"))
    )

    def input_ports(self) -> tuple[str, ...]:
        return ("x", "index")

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        got = self.join(ctx, port, x, state, ("x", "index"))
        if got is None:
            return []
        (xs, sx), (index, _) = got["x"], got["index"]
        idx = _index_vector("Gather", "index", index, len(xs))
        if ctx.train:
            ctx.cache[sx] = (idx, np.shape(xs))
        return [("out", xs[idx], sx)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return _rows_backward(ctx, g, state)


def _rows_backward(ctx: NodeContext, g: Any, state: State) -> Emitted:
    """Backward of taking rows ``x[idx]``: each row's gradient added back where it came from."""
    idx, shape = ctx.cache.pop(state)
    return [("x", scatter_add_rows(idx, np.asarray(g), shape[0]), state)]


class ScatterSum(_Sparse):
    """``out[index[e]] += x[e]``: per-edge rows (E, H) summed into their destination nodes (N, H).

    ``like`` is any payload whose first dimension is N (the node states, say, via a Bcast); it only
    gives the output's row count and gets no gradient, nor does the index. A node that no edge points
    to gets zeros. Backward gives each edge its destination's gradient, ``g[index]``.
    """

    kind = "scatter_sum"
    nondiff_inputs = frozenset({"index", "like"})
    nn_form = NNForm(
        "scatter_sum", "Rows of ``x`` (E, H) summed into ``len(like)`` rows at ``index`` (E,).",
        (("x", "float"), ("index", "int"), ("like", None)),
    )  # fmt: skip

    def input_ports(self) -> tuple[str, ...]:
        return ("x", "index", "like")

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        got = self.join(ctx, port, x, state, ("x", "index", "like"))
        if got is None:
            return []
        (xs, sx), (index, _), (like, _) = got["x"], got["index"], got["like"]
        n = len(like)
        idx = _index_vector(type(self).__name__, "index", index, n)
        if len(idx) != len(xs):
            raise OpError(
                f"{type(self).__name__} inputs 'x' and 'index': expected one index per row of 'x' ({len(xs)}), "
                f"got {len(idx)}",
                port="index",
            )
        out = scatter_add_rows(idx, xs, n)
        scale = self.row_scale(idx, n)
        if scale is not None:
            out *= scale.reshape((n,) + (1,) * (out.ndim - 1))
        if ctx.train:
            ctx.cache[sx] = (idx, scale)
        return [("out", out, sx)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        idx, scale = ctx.cache.pop(state)
        if scale is not None:
            g = g * scale.reshape((len(scale),) + (1,) * (np.ndim(g) - 1))
        return [("x", g[idx], state)]

    def row_scale(self, idx: np.ndarray, n: int) -> np.ndarray | None:
        """A factor per output row (None: plain sum)."""
        return None


class TypedEdgeSum(_Sparse):
    """Every edge type's messages summed into the destination nodes, in one node::

        out[dst[e]] += x[src[e], type[e] * H : (type[e] + 1) * H]        for every edge e

    ``x`` (N, T * H) holds each node's message under each of the T edge types side by side (one Linear
    with the edge types' weights side by side computes it for all nodes at once) and ``edges`` (2, E) the
    edges: row 0 ``src * T + type`` (the edge's block in ``x`` seen as (N * T, H)), row 1 ``dst``. This
    is a Gather per type, a ScatterSum per type and their Adds in one message. Backward adds each edge's
    destination gradient back into its source's block; the edges get no gradient.
    """

    kind = "typed_edge_sum"
    bundling = "rows"  # the joined graphs as one disjoint union
    nondiff_inputs = frozenset({"edges"})
    fields = (Field("types", COUNT, "number of edge types"), MATCH_ON)
    nn_form = NNForm(
        "typed_edge_sum", "Messages under ``types`` edge types (N, types * H) summed into the edges' destinations "
        "(``edges`` (2, E) = [src * types + type, dst]).", (("x", "float"), ("edges", "int")),
    )  # fmt: skip
    types: int

    def input_ports(self) -> tuple[str, ...]:
        return ("x", "edges")

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        width = widths.get("x")
        if width is not None and width % self.types:
            raise OpError(
                f"TypedEdgeSum input 'x': expected a width divisible by types={self.types} (one block per edge "
                f"type), got {width}",
                port="x",
            )
        return {"out": None if width is None else width // self.types}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        return self.forward_bundle(ctx, port, [x], [state])

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return self.backward_bundle(ctx, port, [g], [state])

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        """Each message joined with its edges; the complete ones as one disjoint union: node rows stacked,
        each graph's edge indices shifted past the graphs before it, one scatter, the rows cut back."""
        pairs = []
        for x, s in zip(xs, states, strict=True):
            got = self.join(ctx, port, x, s, ("x", "edges"))
            if got is not None:
                pairs.append(got)
        if not pairs:
            return []
        T = self.types
        blocks_all, dst_all, rows, offsets = [], [], [], [0]
        for got in pairs:
            (x_i, _), (edges, _) = got["x"], got["edges"]
            n, _ = np.shape(x_i)
            edges = np.asarray(edges)
            if edges.ndim != 2 or len(edges) != 2:
                raise OpError(
                    f"TypedEdgeSum input 'edges': expected (2, E) rows [src * types + type, dst], got shape "
                    f"{edges.shape}",
                    port="edges",
                )
            base = offsets[-1]
            blocks_all.append(_index_vector("TypedEdgeSum", "edges", edges[0], n * T) + base * T)
            dst_all.append(_index_vector("TypedEdgeSum", "edges", edges[1], n) + base)
            rows.append(x_i)
            offsets.append(base + n)
        x_all = stack(rows)[0]
        n_all, width = x_all.shape
        blocks = np.concatenate(blocks_all) if len(pairs) > 1 else blocks_all[0]
        dst = np.concatenate(dst_all) if len(pairs) > 1 else dst_all[0]
        out = scatter_add_rows(dst, x_all.reshape(n_all * T, width // T)[blocks], n_all)
        out_states = [got["x"][1] for got in pairs]
        if ctx.train:
            for (a, b), s, bl, d in zip(pairwise(offsets), out_states, blocks_all, dst_all, strict=True):
                ctx.cache[s] = (bl - a * T, d - a, (b - a, width))
        return [("out", o, s) for o, s in zip(unstack(out, offsets), out_states, strict=True)]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> Emitted:
        T = self.types
        entries = [ctx.cache.pop(s) for s in states]
        g_all, offsets = stack([np.asarray(g) for g in gs])
        if len(entries) == 1:
            blocks, dst, shape = entries[0]
            return [("x", scatter_add_rows(blocks, g_all[dst], shape[0] * T).reshape(shape), states[0])]
        blocks = np.concatenate([bl + a * T for (bl, _, _), a in zip(entries, offsets, strict=False)])
        dst = np.concatenate([d + a for (_, d, _), a in zip(entries, offsets, strict=False)])
        width = entries[0][2][1]
        n_all = offsets[-1]
        dx = scatter_add_rows(blocks, g_all[dst], n_all * T).reshape(n_all, width)
        return [("x", d, s) for d, s in zip(unstack(dx, offsets), states, strict=True)]


class ScatterMean(ScatterSum):
    """Like ScatterSum but each node gets the mean of its incoming rows (0 where none arrive)."""

    kind = "scatter_mean"
    nn_form = NNForm(
        "scatter_mean", "As :func:`scatter_sum`, divided by each row's number of incoming rows.",
        (("x", "float"), ("index", "int"), ("like", None)),
    )  # fmt: skip

    def row_scale(self, idx: np.ndarray, n: int) -> np.ndarray | None:
        counts = np.bincount(idx, minlength=n)
        return 1.0 / np.maximum(counts, 1)


class SumRows(Op):
    """Graph-level readout: the rows (N, ...) summed into one row (1, ...); backward broadcasts."""

    kind = "sum_rows"
    group = "aggregation"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # moves data, computes nothing (only the per-message overhead)
    nn_form = NNForm("sum_rows", "(N, ...) -> (1, ...) by summing rows.")

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        x = np.asarray(x)
        if x.ndim < 1:
            raise OpError(f"{type(self).__name__} input 'in': expected rows (N, ...), got a scalar", port="in")
        n = self.divisor(len(x))
        y = x.sum(axis=0, keepdims=True)
        if n != 1:
            y = y / n
        if ctx.train:
            ctx.cache[state] = x.shape
        return [("out", y, state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        shape = ctx.cache.pop(state)
        n = self.divisor(shape[0])
        grad = np.broadcast_to(g if n == 1 else g / n, shape).copy()
        return [("in", grad, state)]

    def divisor(self, n: int) -> int:
        """What the sum of ``n`` rows is divided by (1: a plain sum)."""
        return 1


class MeanRows(SumRows):
    """Graph-level readout: the mean of the rows (N, ...) as one row (1, ...); backward broadcasts / N."""

    kind = "mean_rows"
    nn_form = NNForm("mean_rows", "(N, ...) -> (1, ...) by averaging rows.")

    def divisor(self, n: int) -> int:
        if n == 0:
            raise OpError("MeanRows input 'in': expected at least one row, got 0 (the mean of nothing)", port="in")
        return n


class SelectRows(_Sparse):
    """``out = x[rows]``: a subset of the rows of ``x`` (E, ...), chosen by ``rows``, either a boolean
    mask of length E or an int index vector; used to split one graph's edges by type.

    Backward scatters the gradient back into zeros of x's shape (repeated indices accumulate).
    """

    kind = "select_rows"
    nondiff_inputs = frozenset({"rows"})
    nn_form = NNForm(
        "select_rows", "The rows of ``x`` picked by a boolean mask or an int index.", (("x", None), ("rows", None))
    )

    def input_ports(self) -> tuple[str, ...]:
        return ("x", "rows")

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        got = self.join(ctx, port, x, state, ("x", "rows"))
        if got is None:
            return []
        (xs, sx), (rows, _) = got["x"], got["rows"]
        rows = np.asarray(rows)
        if rows.dtype.kind == "b":
            if rows.shape != (len(xs),):
                raise OpError(
                    f"SelectRows input 'rows': a boolean mask needs shape ({len(xs)},) (one flag per row of 'x'), "
                    f"got {rows.shape}",
                    port="rows",
                )
            idx = np.flatnonzero(rows)
        else:
            idx = _index_vector("SelectRows", "rows", rows, len(xs))
        if ctx.train:
            ctx.cache[sx] = (idx, np.shape(xs))
        return [("out", xs[idx], sx)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        return _rows_backward(ctx, g, state)
