"""Metrics computed from a trace: utilization per worker, staleness summaries, throughput."""

from __future__ import annotations

import numpy as np

from amp_notebook.trace.trace import Trace


def utilization(trace: Trace, wall_s: float) -> list[float]:
    """Busy fraction of each worker: time spent handling messages and updates / wall time."""
    ev = trace.events()
    busy = np.zeros(trace.workers)
    np.add.at(busy, ev["worker"].astype(np.int64), ev["end"] - ev["start"])
    return [float(b / wall_s) if wall_s > 0 else 0.0 for b in busy]


def staleness_summary(trace: Trace, node: int | None = None) -> dict[str, float]:
    """Mean, 95th percentile and max staleness over all gradients (or one node's)."""
    st = trace.staleness()
    values = st["value"] if node is None else st["value"][st["node"] == node]
    if len(values) == 0:
        return {"mean": 0.0, "p95": 0.0, "max": 0.0, "count": 0}
    return {
        "mean": float(np.mean(values)),
        "p95": float(np.percentile(values, 95)),
        "max": float(np.max(values)),
        "count": len(values),
    }


def staleness_histogram(trace: Trace) -> dict[str, dict[int, int]]:
    """Per parameterized node: staleness value -> number of gradients."""
    st = trace.staleness()
    out: dict[str, dict[int, int]] = {}
    for node in np.unique(st["node"]):
        values, counts = np.unique(st["value"][st["node"] == node], return_counts=True)
        out[trace.node_names[int(node)]] = {int(v): int(c) for v, c in zip(values, counts, strict=True)}
    return out
