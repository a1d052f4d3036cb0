"""The dashboard's data feed: trace rows packed as binary columns, plus small JSON figures, in frames.

A frame is what one widget message carries: ``content`` (JSON: what the columns are, run status, metrics)
and ``buffers`` (one little-endian binary column each, in the order ``content["columns"]`` names them).
The browser wraps each buffer in a typed array without parsing anything, so a frame of 10^5 rows costs
a few copies, not 10^5 JSON objects.

* :class:`LiveFeed` follows a running :class:`~amp_notebook.runtime.run.Run`: each :meth:`LiveFeed.poll`
  takes only the rows written since the last one (a trace cursor), the run's status, a sample of the
  series that are not in the trace (keys in flight, moving averages of loss and accuracy, throughput over
  the last seconds),
  and the exact whole-run metrics (staleness histograms, utilization) from the trace's running totals.
  Samples taken a few times a second miss a short run, so keys in flight are also rebuilt from the rows,
  as a replay rebuilds them, in a view's first frame (:meth:`LiveFeed.snapshot`) and in the last one.
* :func:`static_frames` turns a finished trace (a run's, the simulator's, or one opened from a file) into
  frames for replay: all its rows in chunks, then its metrics, with keys in flight rebuilt from the rows.

Nothing here needs a browser or a kernel: the dashboard sends these frames, tests and the ``dashboard``
benchmark read them directly.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.trace.buffers import PHASES
from amp_notebook.trace.metrics import staleness_histogram, utilization
from amp_notebook.trace.totals import StalenessTotals
from amp_notebook.trace.window import Cursor

if TYPE_CHECKING:
    from amp_notebook.runtime.run import Run
    from amp_notebook.trace.trace import Trace

# name, wire dtype (little-endian), the typed array the browser makes of it
EVENT_WIRE = (("start", "<f8"), ("end", "<f8"), ("worker", "<u2"), ("phase", "u1"), ("node", "<i4"),
              ("key", "<i4"), ("depth", "<i4"), ("messages", "<i4"), ("row", "<u4"))  # fmt: skip
STALENESS_WIRE = (("time", "<f8"), ("worker", "<u2"), ("node", "<i4"), ("value", "<i4"))
# the keys of bundles: one row per message of a bundle, naming the bundle by its worker and event row
MEMBER_WIRE = (("worker", "<u2"), ("row", "<u4"), ("key", "<i4"))
MAX_ROWS_PER_FRAME = 200_000  # a feed that fell further behind sends the newest rows and counts the rest
STATIC_CHUNK_ROWS = 250_000
MAX_SERIES_POINTS = 2_000
RATE_WINDOW_S = 2.0  # the live throughput is taken over this many seconds
HISTORY_S = 60.0  # a view opened while a run goes gets this many seconds of its rows


@dataclass
class Frame:
    """One message to the dashboard's front end: JSON content and the binary column buffers beside it."""

    content: dict[str, Any]
    buffers: list[bytes] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.buffers)


def pack(
    events: dict[str, np.ndarray] | None,
    staleness: dict[str, np.ndarray] | None,
    run: int = 0,
    members: dict[str, np.ndarray] | None = None,
) -> tuple[dict[str, Any], list[bytes]]:
    """Columns as wire buffers: (the JSON describing them, the buffers). Rows with no data give n = 0."""
    columns: list[dict[str, Any]] = []
    buffers: list[bytes] = []
    tables = (("events", EVENT_WIRE, events), ("staleness", STALENESS_WIRE, staleness),
              ("members", MEMBER_WIRE, members))  # fmt: skip
    for table, wire, cols in tables:
        n = 0 if not cols else len(cols[wire[0][0]])
        for name, dtype in wire:
            if n == 0 or cols is None:
                data = np.zeros(0, dtype=dtype)
            elif name in cols:
                data = np.ascontiguousarray(cols[name], dtype=dtype)
            else:  # rows from before bundles (a trace file of version 1): one message each, no row index
                data = np.full(n, 1 if name == "messages" else 0, dtype=dtype)
            columns.append({"table": table, "name": name, "dtype": dtype.lstrip("<"), "n": n})
            buffers.append(data.tobytes())
    return {"run": run, "columns": columns}, buffers


def _members_of(trace: Trace, events: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The member rows of the bundles among ``events`` (worker, row, key)."""
    members = trace.members()
    if not members or not len(members["key"]) or not len(events.get("row", ())):
        return {}
    bundles = events["messages"] > 1
    wanted = set(zip(events["worker"][bundles].tolist(), events["row"][bundles].tolist(), strict=True))
    keep = np.array([wr in wanted for wr in zip(members["worker"].tolist(), members["row"].tolist(), strict=True)])
    return {name: col[keep] for name, col in members.items()}


def _newest(cols: dict[str, np.ndarray], limit: int, order_by: str) -> tuple[dict[str, np.ndarray], int]:
    n = len(cols[order_by]) if cols else 0
    if n <= limit:
        return cols, 0
    return {name: col[n - limit :] for name, col in cols.items()}, n - limit


def staleness_histograms(trace: Trace) -> dict[str, list[list[int]]]:
    """Per parameterized node that received gradients: [[staleness, gradients], ...], exact over the run."""
    return {node: [[int(v), int(c)] for v, c in h.items()] for node, h in staleness_histogram(trace).items()}


def keys_in_flight_series(events: dict[str, np.ndarray], max_points: int = MAX_SERIES_POINTS) -> list[list[float]]:
    """Keys in flight over time rebuilt from event rows: a key is in flight from its first row's start to
    its last row's end. [[t, keys], ...], thinned to at most ``max_points`` steps."""
    keys = events["key"]
    if len(keys) == 0:
        return []
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    first = np.r_[0, np.nonzero(np.diff(k))[0] + 1]
    begin = np.minimum.reduceat(events["start"][order], first)
    end = np.maximum.reduceat(events["end"][order], first)
    times = np.concatenate([begin, end])
    steps = np.concatenate([np.ones(len(begin)), -np.ones(len(end))])
    at = np.lexsort((steps, times))  # at equal times a key ends before the next begins
    level = np.cumsum(steps[at])
    t = times[at]
    pick = np.linspace(0, len(t) - 1, min(len(t), max_points)).round().astype(int)
    return [[float(t[i]), float(level[i])] for i in pick]


class LiveFeed:
    """Frames of a running :class:`Run`, one per :meth:`poll`, each with only the rows new since the last."""

    def __init__(self, run: Run, max_rows: int = MAX_ROWS_PER_FRAME, history_s: float = HISTORY_S) -> None:
        self.run = run
        self.trace = run.trace
        self.max_rows = max_rows
        self.history_s = history_s  # the span of rows that keys in flight are rebuilt from
        self.cursor = Cursor.start(self.trace.workers)
        self.frames = 0
        self.rows_sent = 0
        self.rows_skipped = 0
        self.epochs_sent = 0
        self.finished = False  # the run had ended when the last poll began: that poll read every row
        self._counts: deque[tuple[float, int]] = deque([(time.perf_counter(), 0)])  # (time, instances done)
        # Whole-run figures kept up from the rows read, so a poll costs what is new, not what is held;
        # if rows were dropped before this feed read them, it falls back to the trace's exact totals.
        self._complete = True
        self._busy = np.zeros(self.trace.workers)
        self._hist = StalenessTotals()  # every staleness row read so far

    def poll(self, kind: str = "rows") -> Frame:
        ended = bool(self.run.done)
        inc = self.trace.since(self.cursor)
        self.cursor = inc.cursor
        self._follow_totals(inc.events, inc.staleness, inc.missed_events + inc.missed_staleness)
        events, skipped_e = _newest(inc.events, self.max_rows, "start")
        staleness, _ = _newest(inc.staleness, self.max_rows, "time")
        self.rows_skipped += skipped_e + inc.missed_events
        self.rows_sent += len(events["start"]) if events else 0
        content, buffers = pack(events, staleness, members=inc.members)
        content.update(type=kind, meta=self.meta())
        self.frames += 1
        self.finished = ended
        content["meta"]["finished"] = ended
        if ended:  # the last frame: keys in flight over the run's end, from its rows
            now = content["meta"]["status"]["elapsed_s"]
            window = self.trace.window(max(0.0, now - self.history_s), now + 1.0)
            content["meta"]["keys_in_flight"] = keys_in_flight_series(window)
        return Frame(content, buffers)

    def snapshot(self, history_s: float) -> Frame:
        """A frame that replaces what a view holds: the rows of the last ``history_s`` seconds (for a view
        that opens while the run goes). It also moves the cursor past every row it could include."""
        inc = self.trace.since(self.cursor)
        self.cursor = inc.cursor
        self._follow_totals(inc.events, inc.staleness, inc.missed_events + inc.missed_staleness)
        now = self.run.status["elapsed_s"]
        events, _ = _newest(self.trace.window(max(0.0, now - history_s), now + 1.0), self.max_rows, "start")
        stale = self.trace.staleness()
        keep = stale["time"] >= now - history_s
        content, buffers = pack(events, {k: v[keep] for k, v in stale.items()}, members=_members_of(self.trace, events))
        self.epochs_sent = 0
        content.update(type="reset", meta=self.meta())
        content["meta"]["finished"] = bool(self.run.done)
        content["meta"]["keys_in_flight"] = keys_in_flight_series(events) if events else []
        return Frame(content, buffers)

    def _follow_totals(self, events: dict[str, np.ndarray], staleness: dict[str, np.ndarray], missed: int) -> None:
        if missed:
            self._complete = False
        if not self._complete:
            return
        if events and len(events["start"]):
            self._busy += np.bincount(
                events["worker"], weights=events["end"] - events["start"], minlength=len(self._busy)
            )
        if staleness and len(staleness["value"]):
            self._hist += StalenessTotals.of(staleness)

    def _whole_run(self, elapsed: float) -> tuple[dict[str, list[list[int]]], list[float]]:
        """Staleness histograms and utilization over the whole run: from what this feed read, when it read
        every row; from the trace's running totals otherwise."""
        if not self._complete:
            return staleness_histograms(self.trace), utilization(self.trace, elapsed)
        names = self.trace.node_names
        hist = {names[n]: [[v, c] for v, c in sorted(h.items())] for n, h in sorted(self._hist.histogram.items())}
        return hist, [float(b / elapsed) if elapsed > 0 else 0.0 for b in self._busy]

    def meta(self) -> dict[str, Any]:
        status = self.run.status
        now = time.perf_counter()
        n = status["train_instances_done"]
        # instances/s over the last RATE_WINDOW_S (from one frame to the next it jumps by whole keys)
        counts = self._counts
        counts.append((now, n))
        while len(counts) > 2 and counts[1][0] <= now - RATE_WINDOW_S:
            counts.popleft()
        t_prev, n_prev = counts[0]
        throughput = (n - n_prev) / (now - t_prev) if now > t_prev else 0.0
        history = self.run.history
        new_epochs = [e.as_dict() for e in history[self.epochs_sent :]]
        self.epochs_sent = len(history)
        elapsed = status["elapsed_s"]
        hist, util = self._whole_run(elapsed)
        return {
            "status": status,
            "sample": {
                "t": elapsed,
                "keys_in_flight": status["keys_in_flight"],
                "loss": status["recent_loss"],
                "accuracy": status["recent_accuracy"],
                "throughput": throughput,  # recent: over the last RATE_WINDOW_S
            },
            "run_throughput": n / elapsed if elapsed > 0 else None,  # training instances/s over the run
            "epochs": new_epochs,
            "staleness_hist": hist,
            "utilization": util,
            "rows_sent": self.rows_sent,
            "rows_skipped": self.rows_skipped,
        }


def static_frames(
    trace: Trace, run: int = 0, history: list[dict[str, Any]] | None = None, chunk_rows: int = STATIC_CHUNK_ROWS
) -> list[Frame]:
    """Every row of a finished trace, in chunks, then one frame with its metrics (``kind`` "meta")."""
    events, staleness = trace.events(), trace.staleness()
    n = len(events["start"])
    frames = []
    for lo in range(0, max(n, 1), chunk_rows):
        ev = {k: v[lo : lo + chunk_rows] for k, v in events.items()}
        st = staleness if lo == 0 else None
        content, buffers = pack(ev, st, run=run, members=_members_of(trace, ev))
        content.update(type="rows", meta=None)
        frames.append(Frame(content, buffers))
    duration = float(events["end"].max()) if n else 0.0
    totals = trace.event_totals()
    content = {
        "type": "meta",
        "run": run,
        "meta": {
            "duration_s": duration,
            "keys_in_flight": keys_in_flight_series(events),
            "epochs": list(history or []),
            "staleness_hist": staleness_histograms(trace),
            "utilization": utilization(trace, duration),
            "rows": n,
            "phase_rows": {p: sum(t.phase_rows[i] for t in totals) for i, p in enumerate(PHASES)},
            "finished": True,
        },
    }
    frames.append(Frame(content, []))
    return frames


__all__ = [
    "EVENT_WIRE",
    "MEMBER_WIRE",
    "STALENESS_WIRE",
    "Frame",
    "LiveFeed",
    "keys_in_flight_series",
    "pack",
    "staleness_histograms",
    "static_frames",
]
