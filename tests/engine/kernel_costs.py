"""Per-message cost of native kernels against their Python ops (a measurement, not a test).

For each op kind given (default: the graph kernels: dynamic, sparse, the graph losses, Dropout), the first op
case of that kind in ``tests/ir/test_op_gradients.py`` is replayed for B keys (B = 1 and 8, float payloads
varied per key): every port's B messages form one bundle; one round trip is the forward of every bundle as a
training key, then the backward of every output that carries a gradient (its own payload as the gradient,
1.0 for a loss), bundled by port. The native side is timed inside the engine (``KernelProbe.cost``: no
conversion and no binding call inside the clock, one warm-up round); the Python side runs ``forward_bundle``
and ``backward_bundle`` on a NodeContext. Rounds interleave the two sides, the order flipped each round; the
figures are medians of the rounds, in nanoseconds per forward message (its backward included), with every
round and the 1-minute load.

    .venv/bin/python -m tests.engine.kernel_costs [kind ...] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np

from amp_notebook.ir.ops import LOSS_PORT
from tests.engine.harness import NativeOp
from tests.ir.test_op_bundles import by_port
from tests.ir.test_op_gradients import CASES, Case, _context

KINDS = (
    "ungroup", "group", "flatmap", "partition", "collect", "gather", "select_rows", "scatter_sum", "scatter_mean",
    "typed_edge_sum", "sum_rows", "mean_rows", "mse", "segment_softmax_cross_entropy", "dropout",
)  # fmt: skip


def bundles(case: Case, keys: int) -> list[tuple[str, list[Any], list[Any]]]:
    """Per feed of the case, one bundle of its message for each of ``keys`` keys."""
    out = []
    addresses = case.op.kind in ("flatmap", "partition")  # column 0 holds row addresses: keep it
    for port, x, state in case.feeds:
        xs, states = [], []
        for k in range(keys):
            y = x.copy()
            if x.dtype.kind == "f":
                scaled = y[:, 1:] if addresses else y
                scaled *= 1.0 + 0.25 * k
            xs.append(y)
            states.append(state.replace(key=state["key"] + 10 * k))
        out.append((port, xs, states))
    return out


def python_round_trips(case: Case, feed: list, repeats: int) -> float:
    ctx = _context(case, {k: np.asarray(v, dtype=np.float64) for k, v in case.params.items()}, train=True)
    op, wanted = case.op, case.outputs_with_grad()
    messages = sum(len(xs) for _, xs, _ in feed)
    t0 = time.perf_counter()
    for _ in range(repeats):
        emitted = []
        for port, xs, states in feed:
            emitted += op.forward_bundle(ctx, port, xs, states)
        for group in by_port(emitted):
            port = group[0][0]
            if port == LOSS_PORT or port in wanted:
                gs = [1.0 if port == LOSS_PORT else y for _, y, _ in group]
                op.backward_bundle(ctx, port, gs, [s for _, _, s in group])
        ctx.reports.clear()
    return (time.perf_counter() - t0) / (repeats * messages) * 1e9


def native_calls(case: Case, feed: list) -> tuple[Any, list, list]:
    """The node's probe and its forward and backward calls by port index; the backward calls are those of
    ``python_round_trips`` (the outputs of a forward, each its own gradient), so each finds its forward's cache."""
    fields = {f for _, _, states in feed for s in states for f in s}
    nat = NativeOp(case.op, fields)
    ctx = _context(case, {k: np.asarray(v, dtype=np.float64) for k, v in case.params.items()}, train=True)
    ins, outs, wanted = list(case.op.input_ports()), list(case.op.output_ports()), case.outputs_with_grad()
    emitted = []
    python_ctx = _context(case, {k: np.asarray(v, dtype=np.float64) for k, v in case.params.items()}, train=True)
    for port, xs, states in feed:
        emitted += case.op.forward_bundle(python_ctx, port, xs, states)
    backwards = []
    for group in by_port(emitted):
        port = group[0][0]
        if port == LOSS_PORT or port in wanted:
            gs = [1.0 if port == LOSS_PORT else y for _, y, _ in group]
            backwards.append((-1 if port == LOSS_PORT else outs.index(port), gs, [s for _, _, s in group]))
    forwards = [(ins.index(port), xs, states) for port, xs, states in feed]
    return nat.probe(ctx), forwards, backwards


def measure(kind: str, keys: int, rounds: int) -> dict[str, Any]:
    case = next(c for c in CASES if c.op.kind == kind)
    feed = bundles(case, keys)
    probe, forwards, backwards = native_calls(case, feed)
    messages = sum(len(xs) for _, xs, _ in feed)
    python_round_trips(case, feed, 5)
    native, python = [], []
    for r in range(rounds):
        sides = [
            ("native", lambda: probe.cost(forwards, backwards, 2000) / messages * 1e9),
            ("python", lambda: python_round_trips(case, feed, 200)),
        ]
        for name, run in sides if r % 2 == 0 else sides[::-1]:
            (native if name == "native" else python).append(run())
    return {
        "kind": kind, "case": case.id, "bundle": keys, "native_ns": statistics.median(native),
        "python_ns": statistics.median(python), "native_rounds": native, "python_rounds": python,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kinds", nargs="*", default=list(KINDS))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print(f"{'kind (case)':48} {'B':>2} {'native ns':>10} {'python ns':>10} {'ratio':>7}  rounds native / python")
    for kind in args.kinds:
        for keys in (1, 8):
            m = measure(kind, keys, args.rounds)
            rounds = " ".join(f"{v:.0f}" for v in m["native_rounds"]) + " / "
            rounds += " ".join(f"{v:.0f}" for v in m["python_rounds"])
            label = f"{kind} ({m['case']})"
            ratio = m["python_ns"] / m["native_ns"]
            print(f"{label:48} {keys:>2} {m['native_ns']:>10.0f} {m['python_ns']:>10.0f} {ratio:>6.1f}x  {rounds}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
