"""What each worker waited for: its idle time split by what ended each wait.

A worker that is not handling a message is waiting. Where a run scales poorly (2 workers well under twice 1
worker), the question is what they waited for. This module answers it from the trace's event rows alone:

* the *gaps* of a worker are the times between the end of one of its events and the start of its next;
  gaps shorter than ``min_gap_s`` are the cost of taking the next message, counted apart (``short``);
* each longer gap is ended by an event of some key. The key's latest earlier event (any worker, ended by
  the time the gap ended) says what the worker waited for:

  - none in the rows held: the key had just been admitted: the worker waited for ``a new key`` (the
    controller's admission, ``max_active_keys``, the driver);
  - on another worker ``j``: the worker waited for a message from ``worker j`` (j's queue and work, and
    the hop between the two);
  - on this worker: the key's previous step was here, so the wait was for something else of that key
    (the other input of a join, a message bundled behind another) or for the wake-up itself: ``local``;
  - after the worker's last event: the others were still busy at ``the end`` of the window.

Each cause gets the seconds of the gaps it ended, and the top (cause, node, phase) triples name where. A
bundle's row carries its first key only, and the rows are the trace's held window (the buffers keep the
most recent rows), so the split covers that window. It reads rows, never the graph: the trace is all it needs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amp_notebook.errors import SettingError

MIN_GAP_S = 20e-6  # shorter gaps are the cost of taking the next message (module docstring)
NEW_KEY, LOCAL, SHORT, END = "a new key", "local", "short", "the end"


def other_worker(worker: int) -> str:
    return f"worker {worker}"


@dataclass(frozen=True)
class WorkerWaits:
    """One worker's time over the window its rows cover: busy, idle, and the idle time split by cause."""

    worker: int
    span_s: float  # from the window's first event start (any worker) to its last event end
    busy_s: float
    idle_s: float  # span_s - busy_s
    by_cause: dict[str, float]  # cause -> seconds (``SHORT`` holds the gaps under min_gap_s)
    top: list[tuple[str, str, str, float, int]] = field(default_factory=list)  # cause, node, phase, s, gaps

    def share(self, seconds: float) -> float:
        return seconds / self.span_s if self.span_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "worker": self.worker, "span_s": self.span_s, "busy_s": self.busy_s, "idle_s": self.idle_s,
            "by_cause": dict(self.by_cause),
            "top": [{"cause": c, "node": n, "phase": p, "seconds": s, "gaps": k} for c, n, p, s, k in self.top],
        }  # fmt: skip


def waits(
    events: Mapping[str, np.ndarray], node_names: Sequence[str], phases: Sequence[str], workers: int,
    min_gap_s: float = MIN_GAP_S, top: int = 5,
) -> list[WorkerWaits]:  # fmt: skip
    """Each worker's idle time split by cause (module docstring), from event columns (``Trace.events``: worker,
    node, phase, key, start, end); ``top`` (cause, node, phase) triples per worker, by seconds."""
    if min_gap_s < 0:
        raise SettingError("min_gap_s", f"waits: min_gap_s is a duration in seconds, expected >= 0, got {min_gap_s}")
    worker = np.asarray(events["worker"], dtype=np.int64)
    key = np.asarray(events["key"], dtype=np.int64)
    start = np.asarray(events["start"], dtype=float)
    end = np.asarray(events["end"], dtype=float)
    if len(start) == 0:
        return [WorkerWaits(w, 0.0, 0.0, 0.0, {}) for w in range(workers)]
    first, last = float(start.min()), float(end.max())
    span = last - first
    # every key's events by end time, to find the latest one ended by a given moment
    by_key = np.lexsort((end, key))
    key_sorted, end_sorted = key[by_key], end[by_key]
    bounds = np.searchsorted(key_sorted, np.unique(key_sorted))
    group_of = {int(k): (int(a), int(b)) for k, a, b in
                zip(np.unique(key_sorted), bounds, np.r_[bounds[1:], len(key_sorted)], strict=True)}  # fmt: skip
    out = []
    for w in range(workers):
        rows = np.flatnonzero(worker == w)
        rows = rows[np.argsort(start[rows], kind="stable")]
        busy = float((end[rows] - start[rows]).sum())
        causes: dict[str, float] = defaultdict(float)
        where: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0])
        # the idle time before the worker's first event and after its last counts as gaps too
        ends = np.r_[first, end[rows]]
        starts = np.r_[start[rows], last]
        for i, gap in enumerate(starts - ends):
            if gap <= 0:
                continue
            if gap < min_gap_s or i == len(rows):
                causes[SHORT if gap < min_gap_s else END] += gap
                continue
            n = rows[i]
            cause = _cause(group_of[int(key[n])], end_sorted, worker[by_key], start[n], w)
            causes[cause] += gap
            slot = where[(cause, node_names[int(events["node"][n])], phases[int(events["phase"][n])])]
            slot[0] += gap
            slot[1] += 1
        ranked = sorted(where.items(), key=lambda kv: -kv[1][0])[:top]
        out.append(WorkerWaits(
            w, span, busy, span - busy, {c: float(v) for c, v in causes.items()},
            [(c, node, phase, float(s), int(k)) for (c, node, phase), (s, k) in ranked],
        ))  # fmt: skip
    return out


def _cause(group: tuple[int, int], end_sorted: np.ndarray, worker_sorted: np.ndarray, at: float, w: int) -> str:
    """What a gap that ended at ``at`` with an event of one key waited for: the key's latest event that ended
    by ``at`` (``group`` is the key's slice of the events sorted by key, then end)."""
    a, b = group
    j = a + int(np.searchsorted(end_sorted[a:b], at, side="right")) - 1
    if j < a:
        return NEW_KEY
    source = int(worker_sorted[j])
    return LOCAL if source == w else other_worker(source)


def summary(waits_of: Sequence[WorkerWaits]) -> str:
    """One line per worker: busy and idle shares, the idle split by cause, and the top wait's node."""
    lines = []
    for ww in waits_of:
        if ww.span_s <= 0:
            lines.append(f"worker {ww.worker}: no events")
            continue
        causes = sorted(((c, s) for c, s in ww.by_cause.items() if s > 0), key=lambda cs: -cs[1])
        split = ", ".join(f"{ww.share(s):.0%} {c}" for c, s in causes)
        head = ""
        if ww.top:
            cause, node, phase, seconds, gaps = ww.top[0]
            head = f"; most: {node} {phase} after {cause} ({ww.share(seconds):.0%}, {gaps} waits)"
        lines.append(f"worker {ww.worker}: busy {ww.share(ww.busy_s):.0%}, idle {ww.share(ww.idle_s):.0%} "
                     f"({split}){head}")  # fmt: skip
    return "\n".join(lines)


__all__ = ["END", "LOCAL", "MIN_GAP_S", "NEW_KEY", "SHORT", "WorkerWaits", "other_worker", "summary", "waits"]
