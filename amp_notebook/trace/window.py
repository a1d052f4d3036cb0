"""Reading a trace a piece at a time: a time window, or only the rows written since the last read.

A live dashboard redraws 4-10 times a second; copying every held row each time would cost more as the run
grows. Two reads keep the cost proportional to what is drawn:

* :func:`window` gives the event rows whose span ``[start, end]`` overlaps ``[start_s, end_s)`` (seconds
  since the run began). Each worker's sealed chunks know the span of times they cover, so only the chunks
  that overlap are looked at, plus the current chunk.
* :func:`since` gives the rows written after a :class:`Cursor`, and the cursor to pass next time. A cursor
  holds, per worker, the absolute index of the next event row, staleness row and bundle member row to read
  (rows are numbered from the start of the run and never renumbered, so dropping old rows does not move
  it). If a reader falls so far behind that rows it had not read were dropped, ``missed`` counts them.

Rows of one worker come in the order that worker wrote them; the rows of one increment are merged over
workers in order of start time (staleness rows: of time), like :meth:`Trace.events`. Concatenating the
increments of one worker gives exactly that worker's rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from amp_notebook.errors import SettingError
from amp_notebook.trace.buffers import Columns

if TYPE_CHECKING:
    from amp_notebook.trace.trace import Trace


@dataclass(frozen=True)
class Cursor:
    """Per worker: the absolute index of the next event row, staleness row and member row to read."""

    events: tuple[int, ...]
    staleness: tuple[int, ...]
    members: tuple[int, ...] = ()

    @classmethod
    def start(cls, workers: int) -> Cursor:
        return cls((0,) * workers, (0,) * workers, (0,) * workers)


@dataclass(frozen=True)
class Increment:
    """What :func:`since` returns: the new rows, the cursor for the next call, and rows missed."""

    events: Columns  # worker, row, node, phase, key, start, end, depth, messages; seconds since the run began
    staleness: Columns  # worker, node, key, value, time
    cursor: Cursor
    members: Columns = field(default_factory=dict)  # worker, row (the bundle's event row), key
    missed_events: int = 0
    missed_staleness: int = 0

    def __len__(self) -> int:
        return len(self.events["start"])


def _merge(parts: list[Columns], origin: float, time_columns: tuple[str, ...], order_by: str) -> Columns:
    cols = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    for name in time_columns:
        cols[name] = cols[name] - origin
    order = np.argsort(cols[order_by], kind="stable")
    return {name: col[order] for name, col in cols.items()}


def _with_worker(cols: Columns, w: int, length_column: str) -> Columns:
    return {"worker": np.full(len(cols[length_column]), w, dtype=np.int32), **cols}


def window(trace: Trace, start_s: float, end_s: float) -> Columns:
    """Event rows overlapping ``[start_s, end_s)``, as numpy columns sorted by start (seconds since start)."""
    if not end_s >= start_s:
        raise SettingError(
            "end_s", f"window: expected start_s <= end_s, got start_s={start_s}, end_s={end_s}; swap them"
        )
    lo, hi = start_s + trace.origin, end_s + trace.origin
    parts = [_with_worker(buf.event_table.window(lo, hi), w, "end") for w, buf in enumerate(trace.buffers)]
    return _merge(parts, trace.origin, ("start", "end"), "start")


def since(trace: Trace, cursor: Cursor | None = None) -> Increment:
    """The rows written after ``cursor`` (from the beginning when None) and the cursor for the next call."""
    if cursor is None:
        cursor = Cursor.start(trace.workers)
    if len(cursor.events) != trace.workers or len(cursor.staleness) != trace.workers:
        raise SettingError(
            "cursor",
            f"since: the cursor is for {len(cursor.events)} workers but the trace has {trace.workers}; "
            "pass a cursor returned by this trace's since(), or None to start over",
        )
    events, stale, members = [], [], []
    next_events, next_stale, next_members = [], [], []
    missed_events = missed_stale = 0
    member_cursor = cursor.members or (0,) * trace.workers
    for w, buf in enumerate(trace.buffers):
        # members first: every member read then has its bundle's event row written before it
        rows, nxt, _ = buf.member_table.read(member_cursor[w])
        members.append(_with_worker(rows, w, "time"))
        next_members.append(nxt)
        rows, nxt, missed = buf.event_table.read(cursor.events[w])
        events.append(_with_worker(rows, w, "end"))
        next_events.append(nxt)
        missed_events += missed
        rows, nxt, missed = buf.staleness_table.read(cursor.staleness[w])
        stale.append(_with_worker(rows, w, "time"))
        next_stale.append(nxt)
        missed_stale += missed
    return Increment(
        events=_merge(events, trace.origin, ("start", "end"), "start") if events else {},
        staleness=_merge(stale, trace.origin, ("time",), "time") if stale else {},
        cursor=Cursor(tuple(next_events), tuple(next_stale), tuple(next_members)),
        missed_events=missed_events,
        missed_staleness=missed_stale,
        members={name: np.concatenate([m[name] for m in members]) for name in ("worker", "row", "key")}
        if members
        else {},
    )


__all__ = ["Cursor", "Increment", "since", "window"]
