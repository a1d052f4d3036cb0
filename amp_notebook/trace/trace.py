"""A run's trace: what every worker did, when, for which node and key; and every gradient's staleness.

``Trace`` reads the per-worker buffers (live, while the run goes, or after it) and gives columns as
numpy arrays with times in seconds since the run started (virtual seconds for the simulator).

Buffers hold at most ``capacity`` recent rows per worker (``train(..., trace_capacity=...)``), staleness
rows no older than the oldest event row held, so :meth:`Trace.events` and :meth:`Trace.staleness` give
the rows of one recent span, while :meth:`Trace.event_totals` and :meth:`Trace.staleness_totals` are exact
over the whole run (the metrics use them). :meth:`Trace.window` and :meth:`Trace.since` read a time window
or only the new rows (:mod:`amp_notebook.trace.window`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from amp_notebook.trace.buffers import PHASES, WorkerBuffer
from amp_notebook.trace.totals import EventTotals, StalenessTotals, sum_totals
from amp_notebook.trace.waits import MIN_GAP_S, WorkerWaits, waits
from amp_notebook.trace.window import Cursor, Increment, _merge, _with_worker, since, window


class Trace:
    """A read-only view of a run's trace: the per-worker buffers, the node names and the time origin.

    Owns nothing it writes: the workers append to their own buffers, and every method here reads them (live or
    after the run) into numpy columns with times in seconds since the run started. It never locks or changes
    the buffers, and never knows about the graph beyond the node names."""

    def __init__(self, buffers: Sequence[WorkerBuffer], node_names: Sequence[str], origin: float = 0.0) -> None:
        self.buffers = list(buffers)
        self.node_names = list(node_names)
        self.origin = origin
        self.phases = PHASES

    @property
    def workers(self) -> int:
        return len(self.buffers)

    def events(self) -> dict[str, np.ndarray]:
        """One row per handled message, bundle or update: worker, row (per worker, from the run's start),
        node, phase, key (a bundle's first), start, end, depth, messages (1, or a bundle's size), sorted by
        start time."""
        if not self.buffers:
            return {
                n: np.zeros(0) for n in ("worker", "row", "node", "phase", "key", "start", "end", "depth", "messages")
            }
        parts = [_with_worker(buf.snapshot()[0], w, "end") for w, buf in enumerate(self.buffers)]
        return _merge(parts, self.origin, ("start", "end"), "start")

    def members(self) -> dict[str, np.ndarray]:
        """The keys of every bundle held: worker, row (the bundle's event ``row``), key; one row per message."""
        parts = [_with_worker(buf.members(), w, "time") for w, buf in enumerate(self.buffers)]
        cols = _merge(parts, self.origin, ("time",), "time") if parts else {}
        return {name: cols[name] for name in ("worker", "row", "key")} if cols else {}

    def bundle_keys(self) -> dict[tuple[int, int], list[int]]:
        """(worker, event row) of each bundle held -> the keys of its messages, in the order it ran them."""
        cols = self.members()
        out: dict[tuple[int, int], list[int]] = {}
        for w, row, key in zip(*(cols[n].tolist() for n in ("worker", "row", "key")), strict=True) if cols else ():
            out.setdefault((w, row), []).append(key)
        return out

    def staleness(self) -> dict[str, np.ndarray]:
        """One row per gradient received by a parameterized node: worker, node, key, value (staleness), time."""
        parts = [_with_worker(buf.snapshot()[1], w, "time") for w, buf in enumerate(self.buffers)]
        return _merge(parts, self.origin, ("time",), "time")

    def window(self, start_s: float, end_s: float) -> dict[str, np.ndarray]:
        """Event rows overlapping ``[start_s, end_s)`` (seconds since the run began), sorted by start."""
        return window(self, start_s, end_s)

    def since(self, cursor: Cursor | None = None) -> Increment:
        """Rows written after ``cursor`` (all held rows when None) and the cursor to pass next time."""
        return since(self, cursor)

    def event_totals(self) -> list[EventTotals]:
        """Per worker, over the whole run (rows dropped from the buffers included): rows, busy s, rows per phase."""
        return [buf.event_totals() for buf in self.buffers]

    def staleness_totals(self) -> StalenessTotals:
        """Every gradient's staleness over the whole run, as a histogram per node (exact after drops)."""
        return sum_totals((buf.staleness_totals() for buf in self.buffers), StalenessTotals())

    def waits(self, min_gap_s: float = MIN_GAP_S, top: int = 5) -> list[WorkerWaits]:
        """What each worker waited for over the rows held: its idle time split by what ended each wait (a new
        key, a message from another worker, the key's own step here), with the top (cause, node, phase) per
        worker (:mod:`amp_notebook.trace.waits`); ``summary(trace.waits())`` prints it."""
        return waits(self.events(), self.node_names, self.phases, self.workers, min_gap_s, top)

    def node_seconds(self) -> dict[str, float]:
        """Each node's handling time over the rows held (seconds, bundles and updates included): node name ->
        seconds, every node named (0.0 where it has no row). Exact for the whole run only while no row was
        dropped (``trace_capacity=None`` keeps every row)."""
        cols = self.events()
        total = np.zeros(len(self.node_names))
        np.add.at(total, cols["node"].astype(np.int64), cols["end"] - cols["start"])
        return dict(zip(self.node_names, total.tolist(), strict=True))

    def busy_s(self) -> list[float]:
        """Seconds each worker spent handling messages and updates, over the whole run."""
        return [t.busy_s for t in self.event_totals()]

    def dropped_rows(self) -> int:
        """Event rows written but no longer held (the buffers keep the most recent ``capacity`` per worker)."""
        return sum(buf.total_rows - len(buf) for buf in self.buffers)

    def table(self) -> Any:
        """The events as a pandas DataFrame when pandas is installed, else the dict of columns."""
        cols = self.events()
        named = dict(cols)
        named["node_name"] = np.array(self.node_names, dtype=object)[cols["node"]] if len(cols["node"]) else []
        named["phase_name"] = np.array(self.phases, dtype=object)[cols["phase"]] if len(cols["phase"]) else []
        try:
            import pandas as pd
        except ImportError:
            return named
        return pd.DataFrame(named)

    def to_chrome(
        self, path: str | Path | None = None, counters: bool = True, window: tuple[float, float] | None = None
    ) -> dict[str, Any]:
        """Chrome/Perfetto trace document (written to ``path`` when given); ``window`` in seconds."""
        from amp_notebook.trace.chrome import chrome_trace, write_chrome_trace

        doc = chrome_trace(self, counters=counters, window=window)
        if path is not None:
            write_chrome_trace(doc, path)
        return doc
