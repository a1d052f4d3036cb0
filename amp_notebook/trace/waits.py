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
    node, phase, key, start, end); ``top`` (cause, node, phase) triples per worker, by seconds. Vectorized: a
    million rows take about a second."""
    if min_gap_s < 0:
        raise SettingError("min_gap_s", f"waits: min_gap_s is a duration in seconds, expected >= 0, got {min_gap_s}")
    worker = np.asarray(events["worker"], dtype=np.int64)
    key = np.asarray(events["key"], dtype=np.int64)
    start = np.asarray(events["start"], dtype=float)
    end = np.asarray(events["end"], dtype=float)
    if len(start) == 0:
        return [WorkerWaits(w, 0.0, 0.0, 0.0, {}) for w in range(workers)]
    node = np.asarray(events["node"], dtype=np.int64)
    phase = np.asarray(events["phase"], dtype=np.int64)
    first, last = float(start.min()), float(end.max())
    span = last - first
    # Every gap of every worker at once, the rows of each worker in start order (stable, as the trace holds
    # them). Gap i of a worker runs from the end of its event i - 1 (the window's first start for i = 0) to
    # the start of its event i (the window's last end after its last event).
    rows = np.lexsort((start, worker))
    w_of, n_rows = worker[rows], len(rows)
    head = np.r_[True, w_of[1:] != w_of[:-1]]  # each worker's first row
    gap_from = np.where(head, first, np.r_[first, end[rows][:-1]])
    gap = start[rows] - gap_from
    tails = np.flatnonzero(np.r_[w_of[1:] != w_of[:-1], True])  # each worker's last row: the gap after it
    tail_gap = last - end[rows][tails]
    cause = _causes(key, end, worker, rows, start[rows])  # per row: what the gap before it waited for
    out = []
    for w in range(workers):
        mine = slice(*np.searchsorted(w_of, [w, w + 1]))
        g, c, ended_by = gap[mine], cause[mine], rows[mine]
        busy = float((end[ended_by] - start[ended_by]).sum())
        tail = tail_gap[np.searchsorted(tails, mine.stop - 1)] if mine.stop > mine.start else last - first
        short = (g > 0) & (g < min_gap_s)
        long = (g > 0) & (g >= min_gap_s)
        by_cause: dict[str, float] = {}
        firsts: dict[str, int] = {}
        if short.any():
            by_cause[SHORT], firsts[SHORT] = float(g[short].sum()), int(np.argmax(short))
        for code in np.unique(c[long]):
            hit = long & (c == code)
            name = _cause_name(int(code), w)
            by_cause[name], firsts[name] = float(g[hit].sum()), int(np.argmax(hit))
        if tail > 0:
            name = SHORT if tail < min_gap_s else END
            by_cause[name] = by_cause.get(name, 0.0) + float(tail)
            firsts.setdefault(name, n_rows)
        causes = {name: by_cause[name] for name in sorted(by_cause, key=firsts.__getitem__)}  # first seen first
        ranked = _top(g[long], c[long], ended_by[long], node, phase, node_names, phases, w, top)
        out.append(WorkerWaits(w, span, busy, span - busy, causes, ranked))
    return out


_NEW_KEY_CODE = -1  # a cause code: -1 for a new key, else the worker the key's previous event ran on


def _causes(key: np.ndarray, end: np.ndarray, worker: np.ndarray, rows: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each row (``rows[i]``, whose gap ended at ``at[i]``): the worker of its key's latest event that ended
    by then (any worker), or ``_NEW_KEY_CODE``. One merge: the events (by key, then end) and the queries (by
    key, then time) in one order, an event before a query at the same time; the last event at or before each
    query, carried forward, is the one asked for when it belongs to the query's key."""
    n = len(key)
    by_key = np.lexsort((end, key))
    m_key = np.r_[key[by_key], key[rows]]
    m_time = np.r_[end[by_key], at]
    m_query = np.r_[np.zeros(n, dtype=np.int8), np.ones(len(rows), dtype=np.int8)]
    order = np.lexsort((m_query, m_time, m_key))  # stable: equal events keep their order by key, then end
    is_event = m_query[order] == 0
    latest = np.maximum.accumulate(np.where(is_event, order, -1))  # merged index of the last event so far
    queries = ~is_event
    found = latest[queries]
    query_row = order[queries] - n
    codes = np.full(len(rows), _NEW_KEY_CODE, dtype=np.int64)
    same_key = (found >= 0) & (m_key[np.maximum(found, 0)] == key[rows[query_row]])
    codes[query_row[same_key]] = worker[by_key[found[same_key]]]
    return codes


def _cause_name(code: int, w: int) -> str:
    return NEW_KEY if code == _NEW_KEY_CODE else LOCAL if code == w else other_worker(code)


def _top(
    gaps: np.ndarray, codes: np.ndarray, ended_by: np.ndarray, node: np.ndarray, phase: np.ndarray,
    node_names: Sequence[str], phases: Sequence[str], w: int, top: int,
) -> list[tuple[str, str, str, float, int]]:  # fmt: skip
    """The ``top`` (cause, node, phase) triples of one worker's long gaps by seconds (ties: first seen first)."""
    if len(gaps) == 0:
        return []
    triples = np.stack([codes, node[ended_by], phase[ended_by]], axis=1)
    unique, first_seen, group = np.unique(triples, axis=0, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    seconds = np.bincount(group, weights=gaps, minlength=len(unique))
    count = np.bincount(group, minlength=len(unique))
    ranked = np.lexsort((first_seen, -seconds))[:top]
    return [
        (_cause_name(int(unique[i, 0]), w), node_names[int(unique[i, 1])], phases[int(unique[i, 2])],
         float(seconds[i]), int(count[i]))
        for i in ranked
    ]  # fmt: skip


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
