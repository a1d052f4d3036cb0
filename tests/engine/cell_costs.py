"""Per-message cost of the native fused cells and LayerNorm against their Python ops (a benchmark, not a test).

    python -m tests.engine.cell_costs [--rounds 5] [--json]

For each op, hidden width and bundle size, one round times a forward (every input port, training) and the
backward of the same messages, on the same inputs, both ways:

* Python: the op's ``forward_bundle`` / ``backward_bundle`` on a NodeContext, as the Python engine's worker
  calls them;
* native: the kernel driven by ``KernelProbe.cost``, which converts the payloads once and then calls the
  kernel in a native loop, as the native worker will (no Python boundary in the timing).

Per message = round time / bundle size. Each timing runs about ``--budget`` seconds of rounds per side;
sides are interleaved, the order flipped every round; the table gives the median of the timings (and the
fastest, the figure least disturbed by other processes; every timing in ``--json``) and the 1-minute load
average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import numpy as np

from amp_notebook.ir.message import State
from amp_notebook.ir.ops import (
    GRUUpdate,
    LayerNorm,
    LSTMStart,
    LSTMUpdate,
    NodeContext,
    TreeLSTMBranch,
    TreeLSTMLeaf,
)
from tests.engine.harness import NativeOp

OPS = {
    "tree_lstm_leaf": lambda h: (TreeLSTMLeaf(h), [3 * h]),
    "tree_lstm_branch": lambda h: (TreeLSTMBranch(h), [5 * h, h, h]),
    "gru_update": lambda h: (GRUUpdate(h), [3 * h, 3 * h, h]),
    "lstm_start": lambda h: (LSTMStart(h), [4 * h]),
    "lstm_update": lambda h: (LSTMUpdate(h), [4 * h, 4 * h, h]),
    "layer_norm": lambda h: (LayerNorm(h), [h]),
}


def setup(kind: str, hidden: int, bundle: int, dtype: Any) -> dict[str, Any]:
    op, widths = OPS[kind](hidden)
    rng = np.random.default_rng(0)
    states = [State(key=k) for k in range(bundle)]
    ports = op.input_ports()
    feeds = [[rng.standard_normal((1, w)).astype(dtype) for _ in range(bundle)] for w in widths]
    params = {n: rng.standard_normal(shape).astype(dtype) for n, shape in op.param_shapes().items()}
    out_width = hidden if kind in ("gru_update", "layer_norm") else 2 * hidden
    grads = [rng.standard_normal((1, out_width)).astype(dtype) for _ in range(bundle)]

    def context() -> NodeContext:
        ctx = NodeContext("cell", {n: p.copy() for n, p in params.items()})
        ctx.grads = {n: np.zeros_like(p) for n, p in params.items()}
        ctx.grad_inputs = frozenset(ports)
        ctx.grad_outputs = frozenset(op.output_ports())
        return ctx

    return {"op": op, "ports": ports, "feeds": feeds, "grads": grads, "states": states, "context": context}


def python_round(s: dict[str, Any], rounds: int) -> float:
    op, ctx = s["op"], s["context"]()
    start = time.perf_counter()
    for _ in range(rounds):
        for port, xs in zip(s["ports"], s["feeds"], strict=True):
            op.forward_bundle(ctx, port, xs, s["states"])
        op.backward_bundle(ctx, "out", s["grads"], s["states"])
    return (time.perf_counter() - start) / rounds


def native_round(s: dict[str, Any], rounds: int) -> float:
    native = NativeOp(s["op"], {"key"})
    probe = native.probe(s["context"]())
    forwards = [(i, xs, s["states"]) for i, xs in enumerate(s["feeds"])]
    return float(probe.cost(forwards, [(0, s["grads"], s["states"])], rounds))


def measure(rounds: int, budget: float) -> list[dict[str, Any]]:
    rows = []
    configs = [(k, h, b, np.float64) for k in OPS for h in (50, 150) for b in (1, 8)]
    configs += [(k, 150, b, np.float32) for k in OPS for b in (1, 8)]
    for kind, hidden, bundle, dtype in configs:
        s = setup(kind, hidden, bundle, dtype)
        # rounds per timing: about `budget` seconds each side, so a preemption weighs on both sides alike
        reps = {
            "python": max(10, int(budget / max(python_round(s, 10), 1e-8))),
            "native": max(10, int(budget / max(native_round(s, 100), 1e-9))),
        }
        times: dict[str, list[float]] = {"python": [], "native": []}
        for r in range(rounds):
            sides = ("python", "native") if r % 2 == 0 else ("native", "python")
            for side in sides:
                f = python_round if side == "python" else native_round
                times[side].append(f(s, reps[side]) / bundle * 1e6)
        py, nat = statistics.median(times["python"]), statistics.median(times["native"])
        rows.append({
            "op": kind, "hidden": hidden, "bundle": bundle, "dtype": np.dtype(dtype).name,
            "python_us": py, "native_us": nat, "ratio": py / nat,
            "python_min_us": min(times["python"]), "native_min_us": min(times["native"]),
            "python_rounds": [round(t, 3) for t in times["python"]],
            "native_rounds": [round(t, 3) for t in times["native"]],
        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.02, help="seconds per timing (Python side)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    rows = measure(args.rounds, args.budget)
    load_after = os.getloadavg()[0]
    print(f"per message, forward + backward, median of {args.rounds} interleaved rounds; "
          f"1-min load {load_before:.2f} before, {load_after:.2f} after")  # fmt: skip
    print(f"{'op':18} {'H':>4} {'bundle':>6} {'dtype':>8} {'python us':>10} {'native us':>10} {'x':>6}   "
          f"{'(min: python':>12} {'native)':>8}")  # fmt: skip
    for r in rows:
        print(f"{r['op']:18} {r['hidden']:4d} {r['bundle']:6d} {r['dtype']:>8} {r['python_us']:10.2f} "
              f"{r['native_us']:10.3f} {r['ratio']:6.1f}   "
              f"{r['python_min_us']:12.2f} {r['native_min_us']:8.3f}")  # fmt: skip
    if args.json:
        print(json.dumps({"load_before": load_before, "load_after": load_after, "rows": rows}))


if __name__ == "__main__":
    main()
