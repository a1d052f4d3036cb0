"""Losses: where a training key turns around.

A loss joins its prediction with the key's target, reports the loss (and accuracy) to the controller,
and, for training keys, starts the backward pass: the runtime calls ``backward(ctx, "loss", 1.0, state)``
right after a forward that emitted on the pseudo-output ``loss``. Losses are means over the instances of
the key, so a key's gradient is the gradient of its mean loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import Any

import numpy as np

from amp_notebook.ir.message import State
from amp_notebook.ir.ops.base import Emitted, JoinMixin, NodeContext, Op, OpError, Width, stack
from amp_notebook.ir.ops.facts import MATCH_ON, NNForm

LOSS_PORT = "loss"


class _Loss(JoinMixin, Op):
    group = "loss"
    bundling = "rows"
    pred_port = "pred"
    nondiff_inputs = frozenset({"target"})
    objective = True
    fields = (MATCH_ON,)

    def input_ports(self) -> tuple[str, ...]:
        return (self.pred_port, "target")

    def output_ports(self) -> tuple[str, ...]:
        return ()

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        return {}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        return self.forward_bundle(ctx, port, [x], [state])

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        """Join each message with its partner; the complete pairs are evaluated in one call, each key
        reporting its own loss and caching its own gradient."""
        ports = self.input_ports()
        pairs = []
        for x, s in zip(xs, states, strict=True):
            got = self.join(ctx, port, x, s, ports)
            if got is not None:
                pairs.append(got)
        if not pairs:
            return []
        preds = [np.asarray(got[self.pred_port][0]) for got in pairs]
        results = self.evaluate_all(preds, [np.asarray(got["target"][0]) for got in pairs])
        out: Emitted = []
        for got, pred, (loss, grad, extra) in zip(pairs, preds, results, strict=True):
            pred_state = got[self.pred_port][1]
            ctx.report(key=pred_state["key"], loss=loss, n=len(pred), **extra)
            if ctx.train:
                ctx.cache[pred_state] = grad
            out.append((LOSS_PORT, loss, pred_state))
        return out

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        grad = ctx.cache.pop(state)
        return [(self.pred_port, grad if g == 1.0 else grad * g, state)]

    def evaluate(self, pred: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray, dict[str, Any]]:
        raise NotImplementedError

    def evaluate_all(
        self, preds: list[np.ndarray], targets: list[np.ndarray]
    ) -> list[tuple[float, np.ndarray, dict[str, Any]]]:
        """``evaluate`` of several (prediction, target) pairs; losses that stack rows override it."""
        return [self.evaluate(p, t) for p, t in zip(preds, targets, strict=True)]


class SoftmaxCrossEntropy(_Loss):
    """Mean cross-entropy of softmax(logits) against integer class targets; reports accuracy too."""

    kind = "softmax_cross_entropy"
    element_flops = (5.0, 1.0)
    pred_port = "logits"
    nn_form = NNForm(
        "softmax_cross_entropy", "Mean cross-entropy of softmax(logits) against integer class ids; reports accuracy "
        "too.", (("logits", "float"), ("target", "int")),
    )  # fmt: skip

    def evaluate(self, pred: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray, dict[str, Any]]:
        return self.evaluate_all([pred], [target])[0]

    def evaluate_all(
        self, preds: list[np.ndarray], targets: list[np.ndarray]
    ) -> list[tuple[float, np.ndarray, dict[str, Any]]]:
        """One softmax over the stacked rows of every pair; each pair's loss, gradient and accuracy are its
        own rows' (the row math is the same as for one pair, so are the results)."""
        for pred in preds:
            if pred.ndim != 2:
                raise OpError(f"SoftmaxCrossEntropy input 'logits': expected shape (batch, classes), got {pred.shape}")
        for pred, target in zip(preds, targets, strict=True):
            if target.shape != (len(pred),) or target.dtype.kind not in "iu":
                raise OpError(
                    f"SoftmaxCrossEntropy input 'target': expected {len(pred)} integer class ids, got shape "
                    f"{target.shape} dtype {target.dtype}"
                )
        pred, offsets = stack(preds)
        target, _ = stack(targets)
        n, classes = pred.shape
        if n and (target.min() < 0 or target.max() >= classes):
            raise OpError(
                f"SoftmaxCrossEntropy input 'target': class ids must lie in [0, {classes}), "
                f"found [{target.min()}, {target.max()}]"
            )
        shifted = pred - pred.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        total = exp.sum(axis=1, keepdims=True)
        rows = np.arange(n)
        row_loss = np.log(total[:, 0]) - shifted[rows, target]
        grad = exp / total
        grad[rows, target] -= 1.0
        hits = pred.argmax(axis=1) == target
        counts = np.diff(offsets)
        if len(preds) == 1 or not counts.all():  # one pair, or a pair without rows (reduceat needs rows)
            out = []
            for a, b in pairwise(offsets):
                g = grad[a:b]
                g /= b - a
                out.append((float(np.mean(row_loss[a:b])), g, {"correct": int(np.sum(hits[a:b]))}))
            return out
        # per pair, in one call each: the rows' mean loss, their hits, their gradient over their row count
        starts = np.asarray(offsets[:-1])
        losses = (np.add.reduceat(row_loss, starts) / counts).tolist()
        correct = np.add.reduceat(hits, starts).tolist()
        grad /= np.repeat(counts, counts)[:, None]
        return [
            (loss, grad[a:b], {"correct": int(c)})
            for loss, c, (a, b) in zip(losses, correct, pairwise(offsets), strict=True)
        ]


class MSE(_Loss):
    """Mean squared error over all elements (as torch.nn.MSELoss)."""

    kind = "mse"
    element_flops = (3.0, 1.0)
    nn_form = NNForm("mse", "Mean squared error over all elements.", (("pred", "float"), ("target", "float")))

    def evaluate(self, pred: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray, dict[str, Any]]:
        target = target.reshape(pred.shape) if target.size == pred.size else target
        if target.shape != pred.shape:
            raise OpError(f"MSE input 'target': expected shape {pred.shape} (as 'pred'), got {target.shape}")
        diff = pred - target
        return float(np.mean(diff * diff)), (2.0 / diff.size) * diff, {}


class SegmentSoftmaxCrossEntropy(_Loss):
    """Node selection over the graphs of a key: a softmax over each graph's own nodes.

    ``scores`` (N, 1) or (N,) holds one score per node of the key's disjoint union, ``segments`` (N,) the
    graph (0..K-1) of each node, non-decreasing (each graph's nodes are one run of rows), and ``target``
    (K,) the row of each graph's answer node, counted in the union (graph k's local answer plus the
    number of nodes before graph k). The loss is the mean over graphs of
    ``logsumexp(scores of graph k) - scores[target k]``: for one graph, exactly SoftmaxCrossEntropy on
    the (1, N) row of its scores. Accuracy counts the graphs whose highest score (the first, on ties) is
    the target. Graphs may differ in size; the segments and targets get no gradient.
    """

    kind = "segment_softmax_cross_entropy"
    element_flops = (5.0, 1.0)
    bundling = "per_message"  # each key's graphs are their own segments
    pred_port = "scores"
    nondiff_inputs = frozenset({"segments", "target"})
    nn_form = NNForm(
        "segment_softmax_cross_entropy", "Node selection: a softmax over each graph's rows of ``scores`` against each "
        "graph's answer row.", (("scores", "float"), ("segments", "int"), ("target", "int")),
    )  # fmt: skip

    def input_ports(self) -> tuple[str, ...]:
        return ("scores", "segments", "target")

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> Emitted:
        out: Emitted = []
        for x, state in zip(xs, states, strict=True):
            got = self.join(ctx, port, x, state, ("scores", "segments", "target"))
            if got is None:
                continue
            (scores, pred_state), (segments, _), (target, _) = got["scores"], got["segments"], got["target"]
            loss, grad, extra = self.evaluate_segments(np.asarray(scores), np.asarray(segments), np.asarray(target))
            ctx.report(key=pred_state["key"], loss=loss, n=len(target), **extra)
            if ctx.train:
                ctx.cache[pred_state] = grad
            out.append((LOSS_PORT, loss, pred_state))
        return out

    def evaluate_segments(
        self, scores: np.ndarray, segments: np.ndarray, target: np.ndarray
    ) -> tuple[float, np.ndarray, dict[str, Any]]:
        name = "SegmentSoftmaxCrossEntropy"
        if scores.ndim not in (1, 2) or (scores.ndim == 2 and scores.shape[1] != 1):
            raise OpError(f"{name} input 'scores': expected shape (N, 1) or (N,), got {scores.shape}", port="scores")
        s = scores.reshape(-1)
        n, k = len(s), len(target)
        if segments.shape != (n,) or segments.dtype.kind not in "iu":
            raise OpError(
                f"{name} input 'segments': expected {n} integer graph ids (one per score), got shape "
                f"{segments.shape} dtype {segments.dtype}",
                port="segments",
            )
        if target.shape != (k,) or target.dtype.kind not in "iu" or k == 0:
            raise OpError(
                f"{name} input 'target': expected one integer row index per graph, got shape {target.shape} "
                f"dtype {target.dtype}",
                port="target",
            )
        counts = np.bincount(segments, minlength=k) if n and segments.min() >= 0 else None
        if counts is None or len(counts) != k or not counts.all() or np.any(segments[1:] < segments[:-1]):
            raise OpError(
                f"{name} input 'segments': expected graph ids 0..{k - 1} (one graph per target), each graph's "
                "nodes one run of rows in order; build the key with data.graphs.ggsnn_bucket",
                port="segments",
            )
        if target.min() < 0 or target.max() >= n or np.any(segments[target] != np.arange(k)):
            raise OpError(
                f"{name} input 'target': each graph's target must be a row of that graph's own nodes, found "
                f"{target.tolist()} for graphs of {counts.tolist()} nodes",
                port="target",
            )
        starts = np.zeros(k, dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        top = np.maximum.reduceat(s, starts)
        exp = np.exp(s - top[segments])
        total = np.add.reduceat(exp, starts)
        loss = float(np.mean(np.log(total) + top - s[target]))
        grad = exp / total[segments]
        grad[target] -= 1.0
        grad /= k
        first_top = np.minimum.reduceat(np.where(s == top[segments], np.arange(n), n), starts)
        return loss, grad.reshape(scores.shape), {"correct": int(np.sum(first_top == target))}


class Sink(Op):
    """Where a value that nobody reads ends, for a value that went through control flow: a training key
    turns around here with a zero gradient.

    :class:`~amp_notebook.ir.ops.payload.Discard` ends a value without any backward, which is right when
    its producer (a Split, a Bcast) counts the gradients it waits for per output port. A message that took
    one branch of a Cond, left a loop, or passed an elementwise op made a promise: its producer waits for
    exactly one backward message with its state (ARCHITECTURE.md, invariant 3). A Sink keeps that promise:
    like a loss it starts the backward pass from its forward, sending a zero gradient of the payload's
    shape, and it reports nothing (it contributes 0 to the objective). The compiler (``amp.compile``) ends
    the unused exits of loops and branches here; ``LOSSES`` lists it because the runtime treats it as a place
    where backward starts, but it does not count as the loss a graph needs to train.
    """

    kind = "sink"
    group = "loss"
    bundling = "per_message"
    element_flops = (0.0, 0.0)  # a zero gradient of the payload's shape: no arithmetic

    def output_ports(self) -> tuple[str, ...]:
        return ()

    def infer_widths(self, widths: Mapping[str, Width]) -> dict[str, Width]:
        return {}

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Emitted:
        if ctx.train:
            if state in ctx.cache:
                raise OpError(f"state {state} reached the Sink twice while the first is still in flight")
            ctx.cache[state] = (np.shape(x), np.asarray(x).dtype)
        return [(LOSS_PORT, 0.0, state)]

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Emitted:
        shape, dtype = ctx.cache.pop(state)
        return [("in", np.zeros(shape, dtype=dtype if dtype.kind == "f" else np.float64), state)]
