"""Running totals of a trace that never drop rows: exact whole-run metrics from a bounded buffer.

A :class:`~amp_notebook.trace.buffers.WorkerBuffer` keeps only its most recent rows, so metrics over the
whole run cannot be computed from the rows it still holds. Instead every chunk of rows is summarized
once, when it is sealed, and the summaries of dropped chunks are added up:

* :class:`EventTotals`: rows, messages (a bundle's row counts each of its messages), busy seconds (sum of
  ``end - start``) and rows per phase;
* :class:`StalenessTotals`: per parameterized node, a histogram ``staleness -> number of gradients``,
  from which count, sum, mean, max and any percentile follow exactly (staleness is a small integer, so
  the histogram is small however long the run).

Both are immutable values that add with ``+``: a buffer's totals are the dropped chunks' totals plus the
sealed chunks' plus the current chunk's (summed when read), and a trace's are its workers' summed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from amp_notebook.ir.message import Phase

N_PHASES = len(Phase)


@dataclass(frozen=True)
class EventTotals:
    """Counts over event rows: rows, busy seconds, rows per phase, messages (one worker's whole run in
    ``Trace.event_totals``, exact however few rows its buffer keeps)."""

    rows: int = 0
    busy_s: float = 0.0
    phase_rows: tuple[int, ...] = (0,) * N_PHASES
    messages: int = 0

    @classmethod
    def of(cls, columns: dict[str, np.ndarray]) -> EventTotals:
        """The totals of a block of event rows (columns ``phase``, ``start``, ``end``, ``messages``)."""
        phase = columns["phase"]
        counts = np.bincount(phase.astype(np.int64), minlength=N_PHASES) if len(phase) else np.zeros(N_PHASES)
        return cls(
            rows=len(phase),
            busy_s=float(np.sum(columns["end"] - columns["start"])),
            phase_rows=tuple(int(c) for c in counts),
            messages=int(np.sum(columns["messages"], dtype=np.int64)) if "messages" in columns else len(phase),
        )

    def __add__(self, other: EventTotals) -> EventTotals:
        width = max(len(self.phase_rows), len(other.phase_rows))
        a = self.phase_rows + (0,) * (width - len(self.phase_rows))
        b = other.phase_rows + (0,) * (width - len(other.phase_rows))
        return EventTotals(
            self.rows + other.rows, self.busy_s + other.busy_s, tuple(x + y for x, y in zip(a, b, strict=True)),
            self.messages + other.messages,
        )  # fmt: skip


@dataclass(frozen=True)
class RowCount:
    """The totals of a table that needs no more than its row count (a bundle's member keys)."""

    rows: int = 0

    @classmethod
    def of(cls, columns: dict[str, np.ndarray]) -> RowCount:
        return cls(len(next(iter(columns.values()))))

    def __add__(self, other: RowCount) -> RowCount:
        return RowCount(self.rows + other.rows)


@dataclass(frozen=True)
class StalenessTotals:
    """Per node index: staleness value -> number of gradients with that staleness."""

    histogram: dict[int, dict[int, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, columns: dict[str, np.ndarray]) -> StalenessTotals:
        """The totals of a block of staleness rows (columns ``node`` and ``value``)."""
        nodes, values = columns["node"].astype(np.int64), columns["value"].astype(np.int64)
        hist: dict[int, dict[int, int]] = {}
        if not len(nodes):
            return cls(hist)
        # Count (node, value) pairs as one int64 each, node * width + (value - low): its order is the pairs'
        # lexicographic order, and a 1-D unique sorts plain integers (a 2-D unique along an axis sorts
        # structured rows, ~30x slower: a full chunk took ~90 ms, and the driver waits on it).
        low, high = int(values.min()), int(values.max())
        width = high - low + 1
        if int(nodes.max()) < (1 << 62) // width and int(nodes.min()) >= 0:
            combined, counts = np.unique(nodes * width + (values - low), return_counts=True)
            pairs = zip((combined // width).tolist(), (combined % width + low).tolist(), strict=True)
        else:  # a range too wide to pack (never met in practice): the slow, general way
            stacked, counts = np.unique(np.stack([nodes, values]), axis=1, return_counts=True)
            pairs = zip(stacked[0].tolist(), stacked[1].tolist(), strict=True)
        for (node, value), count in zip(pairs, counts.tolist(), strict=True):
            hist.setdefault(node, {})[value] = count
        return cls(hist)

    def __add__(self, other: StalenessTotals) -> StalenessTotals:
        merged = {node: dict(h) for node, h in self.histogram.items()}
        for node, h in other.histogram.items():
            mine = merged.setdefault(node, {})
            for value, count in h.items():
                mine[value] = mine.get(value, 0) + count
        return StalenessTotals(merged)

    def values_and_counts(self, node: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Sorted distinct staleness values and their counts, over all nodes or one."""
        merged: dict[int, int] = {}
        for n, h in self.histogram.items():
            if node is None or n == node:
                for value, count in h.items():
                    merged[value] = merged.get(value, 0) + count
        values = np.array(sorted(merged), dtype=np.int64)
        return values, np.array([merged[v] for v in values.tolist()], dtype=np.int64)

    def summary(self, node: int | None = None, percentile: float = 95.0) -> dict[str, float]:
        """Mean, percentile (``p95``), max and count, exactly as numpy would give over every gradient."""
        values, counts = self.values_and_counts(node)
        n = int(counts.sum())
        if n == 0:
            return {"mean": 0.0, "p95": 0.0, "max": 0.0, "count": 0}
        return {
            "mean": float(np.dot(values, counts) / n),
            "p95": quantile_from_counts(values, counts, percentile / 100.0),
            "max": float(values[-1]),
            "count": n,
        }


def quantile_from_counts(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """``np.percentile(np.repeat(values, counts), 100 * q)`` (linear interpolation) without the repeat."""
    n = int(counts.sum())
    cumulative = np.cumsum(counts)
    position = q * (n - 1)
    lo = int(np.floor(position))
    hi = min(lo + 1, n - 1)

    def value_at(i: int) -> float:  # the i-th smallest of the repeated values
        return float(values[int(np.searchsorted(cumulative, i, side="right"))])

    low, high = value_at(lo), value_at(hi)
    return low + (position - lo) * (high - low)


T = TypeVar("T", EventTotals, StalenessTotals)


def sum_totals(parts: Iterable[T], start: T) -> T:
    total = start
    for part in parts:
        total = total + part
    return total


__all__ = ["EventTotals", "RowCount", "StalenessTotals", "quantile_from_counts", "sum_totals"]
