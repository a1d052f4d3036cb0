"""Metrics computed from a trace: utilization per worker, staleness summaries and histograms.

They read the trace's running totals (:mod:`amp_notebook.trace.totals`), not its rows, so they are exact
over the whole run even when the bounded buffers have dropped old rows, and cost the same however long
the run was.
"""

from __future__ import annotations

from amp_notebook.trace.trace import Trace


def utilization(trace: Trace, wall_s: float) -> list[float]:
    """Busy fraction of each worker: time spent handling messages and updates / wall time."""
    return [float(b / wall_s) if wall_s > 0 else 0.0 for b in trace.busy_s()]


def staleness_summary(trace: Trace, node: int | None = None) -> dict[str, float]:
    """Mean, 95th percentile and max staleness over all gradients (or one node's), and their count."""
    return trace.staleness_totals().summary(node)


def staleness_histogram(trace: Trace) -> dict[str, dict[int, int]]:
    """Per parameterized node (in graph order): staleness value -> number of gradients."""
    hist = trace.staleness_totals().histogram
    return {trace.node_names[node]: dict(sorted(hist[node].items())) for node in sorted(hist)}
