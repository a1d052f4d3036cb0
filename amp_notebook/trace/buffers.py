"""Per-worker trace buffers: bounded chunked columns, one writer, lock-free readers, exact totals.

Each handled message appends one *event* row (node, phase, key, queue depth, start, end, messages); a
*bundle* (several messages for one node run as one call) appends one row too, with ``key`` its first
message's key and ``messages`` their number, and one *member* row (event row index, key, time) per
message, so the keys of a bundle can be listed; each gradient a parameterized node receives appends one
*staleness* row (node, key, staleness, time). Each kind of row lives in a :class:`Table` of chunks:

* the **current chunk** is one ``array.array`` per column; the writer appends to it (cheap, no lock);
* when it holds ``chunk_rows`` rows the writer **seals** it: wraps each column as a read-only numpy view
  (zero copy: a sealed chunk is never appended to again), summarizes it once into totals
  (:mod:`amp_notebook.trace.totals`) and starts a new current chunk;
* with a ``capacity``, sealed chunks that would let the table exceed ``capacity`` rows are **dropped**,
  oldest first, and their totals are added to the totals of dropped rows. Old rows are dropped whole,
  never decimated: what the table holds is every row of the most recent span (between
  ``capacity - chunk_rows`` and ``capacity`` rows), so a Gantt of a recent window is exact;
* the staleness and member tables also **follow** the event table: once it has dropped rows, a sealed
  chunk of theirs that ends before the oldest event row held is dropped too. A worker's buffer thus holds
  one recent span in all three tables, and its memory stops growing when the event table is full. (The
  other tables fill more slowly, a row per gradient or per bundled message against a row per handled
  message or bundle, so on their own they went on growing long after the Gantt's rows were full; the
  members of a dropped bundle row named a row no reader could find.)

Totals never drop: busy seconds and rows per phase per worker, and each node's staleness histogram
(count, sum, mean, max, percentiles), are the dropped chunks' totals + the sealed chunks' (computed once)
+ the current chunk's (summed when read). Every row has an absolute index (rows the worker wrote before
it), so a reader can ask for the rows since a cursor and learn how many it missed.

Why no lock is needed (CPython, GIL): ``array.append`` and an attribute assignment are each atomic. The
writer appends a row's columns in order and the time column (``end``/``time``) last, so the length of that
column counts complete rows and a reader slices (copies) every column of the current chunk to it. Sealing
publishes a new immutable :class:`_View` (sealed chunks, current chunk, dropped totals) with one
attribute assignment, so a reader that reads ``table.view`` once sees a consistent set; the chunks of an
older view stay valid (sealed arrays are never written, dropped ones live while a reader holds them).
The hot path pays one length check per row for all this.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from amp_notebook.errors import SettingError
from amp_notebook.trace.totals import EventTotals, RowCount, StalenessTotals

PHASE_FWD, PHASE_BWD, PHASE_UPDATE = 0, 1, 2
PHASES = ("fwd", "bwd", "update")
DEFAULT_CAPACITY = 1_000_000  # rows per worker and kind: ~33 MB of event columns
MAX_CHUNK_ROWS = 65_536

EVENT_COLUMNS = (
    ("node", "i"), ("phase", "b"), ("key", "q"), ("depth", "i"), ("messages", "i"), ("start", "d"), ("end", "d"),
)  # fmt: skip
STALENESS_COLUMNS = (("node", "i"), ("key", "q"), ("value", "i"), ("time", "d"))
MEMBER_COLUMNS = (("row", "q"), ("key", "q"), ("time", "d"))

Columns = dict[str, np.ndarray]


def check_capacity(capacity: int | None) -> int | None:
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
        raise SettingError(
            "trace_capacity",
            f"trace_capacity: expected an int >= 1 (rows kept per worker) or None (keep every row), got {capacity!r}",
        )
    return capacity


def chunk_rows_for(capacity: int | None) -> int:
    """Rows per chunk: an eighth of the capacity (so at most 1/8 of it is dropped at once), at most 64 Ki."""
    return MAX_CHUNK_ROWS if capacity is None else max(1, min(capacity // 8, MAX_CHUNK_ROWS))


@dataclass(frozen=True)
class Sealed:
    """A full chunk: read-only numpy columns, its totals, and the span of times it covers."""

    first: int  # absolute index of its first row
    columns: Columns
    totals: Any
    lo: float  # earliest start (or time) in it
    hi: float  # latest end (or time) in it

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))


def drop_old(
    sealed: tuple[Sealed, ...], dropped: Any, max_sealed: int | None, horizon: float | None
) -> tuple[tuple[Sealed, ...], Any]:
    """The sealed chunks still held, oldest first, and the dropped rows' totals, after dropping the oldest
    chunks beyond ``max_sealed`` and those that end before ``horizon`` (the oldest event time a followed
    table holds; None: nothing to follow)."""
    start = 0
    if max_sealed is not None:
        start = max(0, len(sealed) - max_sealed)
    if horizon is not None:
        while start < len(sealed) and sealed[start].hi < horizon:
            start += 1
    for chunk in sealed[:start]:
        dropped = dropped + chunk.totals
    return sealed[start:], dropped


class _View(NamedTuple):
    sealed: tuple[Sealed, ...]
    current: dict[str, array]  # the chunk the writer appends to
    current_first: int  # absolute index of the current chunk's first row
    dropped: Any  # totals of the rows no longer held


class Table:
    """One kind of row (events or staleness) as bounded chunks; see the module docstring."""

    def __init__(
        self,
        columns: tuple[tuple[str, str], ...],
        span: tuple[str, str],
        summarize: Callable[[Columns], Any],
        zero: Any,
        capacity: int | None,
        numbered: bool = False,
        follows: Table | None = None,
    ) -> None:
        self.columns = columns
        self.last = columns[-1][0]  # the writer appends this column last
        self.span = span  # (column of start times, column of end times)
        self.numbered = numbered  # readers get a `row` column: each row's absolute index
        self.summarize = summarize
        self.capacity = check_capacity(capacity)
        self.chunk_rows = chunk_rows_for(capacity)
        self.max_sealed = None if capacity is None else capacity // self.chunk_rows - 1
        self.follows = follows  # a table (same writer) whose oldest row held bounds what this one keeps
        self.view = _View((), self._new_chunk(), 0, zero)

    def _new_chunk(self) -> dict[str, array]:
        return {name: array(code) for name, code in self.columns}

    # ------------------------------------------------------------------ writer
    def seal(self) -> dict[str, array]:
        """Writer only: seal the current chunk, drop chunks beyond the capacity; returns the new current chunk."""
        view = self.view
        n = len(view.current[self.last])
        cols: Columns = {}
        for name, code in self.columns:
            col = np.frombuffer(view.current[name], dtype=code)[:n]
            col.flags.writeable = False
            cols[name] = col
        lo_col, hi_col = self.span
        lo = float(cols[lo_col].min()) if n else 0.0
        hi = float(cols[hi_col].max()) if n else 0.0
        kept = (*view.sealed, Sealed(view.current_first, cols, self.summarize(cols), lo, hi))
        horizon = self.follows.horizon() if self.follows is not None else None
        kept, dropped = drop_old(kept, view.dropped, self.max_sealed, horizon)
        current = self._new_chunk()
        self.view = _View(kept, current, view.current_first + n, dropped)  # one atomic publish
        return current

    def horizon(self) -> float | None:
        """Writer only: the earliest start of the rows held once some were dropped (None before: all held)."""
        view = self.view
        if view.sealed:
            first = view.sealed[0]
            return first.lo if first.first > 0 else None
        starts = view.current[self.span[0]]
        return starts[0] if view.current_first > 0 and len(view.current[self.last]) else None

    # ------------------------------------------------------------------ readers
    def _current_rows(self, view: _View) -> Columns:
        n = len(view.current[self.last])
        return {name: np.frombuffer(view.current[name][:n], dtype=code) for name, code in self.columns}

    def _join(self, parts: list[Columns]) -> Columns:
        if not parts:
            empty = {name: np.zeros(0, dtype=code) for name, code in self.columns}
            return {"row": np.zeros(0, dtype=np.int64), **empty} if self.numbered else empty
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}

    def read(self, since: int = 0) -> tuple[Columns, int, int]:
        """Rows with absolute index >= ``since`` still held: (columns, the next index to ask for, rows missed
        because they were dropped before being read). A numbered table's column ``row`` holds each row's
        absolute index."""
        view = self.view
        current = self._current_rows(view)
        first_held = view.sealed[0].first if view.sealed else view.current_first
        parts = [
            self._numbered({name: col[max(0, since - s.first):] for name, col in s.columns.items()},
                           max(since, s.first))
            for s in view.sealed
            if s.first + len(s) > since
        ]  # fmt: skip
        parts.append(
            self._numbered(
                {name: col[max(0, since - view.current_first) :] for name, col in current.items()},
                max(since, view.current_first),
            )
        )
        next_row = view.current_first + len(current[self.last])
        return self._join(parts), max(next_row, since), max(0, first_held - since)

    def window(self, lo: float, hi: float) -> Columns:
        """Rows whose span [start, end] overlaps [lo, hi) (times on the writer's clock), with ``row``."""
        view = self.view
        start, end = self.span
        parts = []
        chunks = [(s.columns, s.first) for s in view.sealed if s.hi >= lo and s.lo < hi]
        chunks.append((self._current_rows(view), view.current_first))
        for cols, first in chunks:
            keep = (cols[end] >= lo) & (cols[start] < hi)
            if keep.any():
                parts.append({name: col[keep] for name, col in self._numbered(cols, first).items()})
        return self._join(parts)

    def _numbered(self, cols: Columns, first: int) -> Columns:
        """``cols`` with a leading ``row`` column (each row's absolute index, from ``first``) if numbered."""
        if not self.numbered:
            return cols
        n = len(cols[self.last])
        return {"row": np.arange(first, first + n, dtype=np.int64), **cols}

    def totals(self) -> Any:
        """Totals over every row ever written, dropped or held."""
        view = self.view
        total = view.dropped
        for s in view.sealed:
            total = total + s.totals
        return total + self.summarize(self._current_rows(view))

    def held(self) -> int:
        view = self.view
        return sum(len(s) for s in view.sealed) + len(view.current[self.last])

    def written(self) -> int:
        view = self.view
        return view.current_first + len(view.current[self.last])


class WorkerBuffer:
    """One worker's trace: an event table, a staleness table and a bundle member table, each holding at most
    ``capacity`` rows (``None``: every row), the latter two no row older than the event table's oldest (see
    the module docstring). The columns of the current chunks are attributes, for the writer's hot path."""

    __slots__ = (
        "_event_chunk_rows", "_member_chunk_rows", "_staleness_chunk_rows", "depth", "end", "event_table", "key",
        "member_table", "messages", "node", "phase", "st_key", "st_node", "st_time", "st_value", "staleness_table",
        "start",
    )  # fmt: skip

    def __init__(self, capacity: int | None = DEFAULT_CAPACITY) -> None:
        self.event_table = Table(EVENT_COLUMNS, ("start", "end"), EventTotals.of, EventTotals(), capacity, True)
        self.staleness_table = Table(STALENESS_COLUMNS, ("time", "time"), StalenessTotals.of, StalenessTotals(),
                                     capacity, follows=self.event_table)  # fmt: skip
        self.member_table = Table(MEMBER_COLUMNS, ("time", "time"), RowCount.of, RowCount(), capacity,
                                  follows=self.event_table)  # fmt: skip
        self._event_chunk_rows = self.event_table.chunk_rows
        self._staleness_chunk_rows = self.staleness_table.chunk_rows
        self._member_chunk_rows = self.member_table.chunk_rows
        self._bind_events(self.event_table.view.current)
        self._bind_staleness(self.staleness_table.view.current)

    @property
    def capacity(self) -> int | None:
        return self.event_table.capacity

    def _bind_events(self, chunk: dict[str, array]) -> None:
        self.node, self.phase, self.key = chunk["node"], chunk["phase"], chunk["key"]
        self.depth, self.messages, self.start, self.end = (
            chunk["depth"],
            chunk["messages"],
            chunk["start"],
            chunk["end"],
        )

    def _bind_staleness(self, chunk: dict[str, array]) -> None:
        self.st_node, self.st_key, self.st_value, self.st_time = (
            chunk["node"], chunk["key"], chunk["value"], chunk["time"]
        )  # fmt: skip

    # ------------------------------------------------------------------ writer (one thread)
    def record(self, node: int, phase: int, key: int, start: float, end: float, depth: int, messages: int = 1) -> None:
        if len(self.end) >= self._event_chunk_rows:
            self._bind_events(self.event_table.seal())
        self.node.append(node)
        self.phase.append(phase)
        self.key.append(key)
        self.depth.append(depth)
        self.messages.append(messages)
        self.start.append(start)
        self.end.append(end)  # last: its length counts complete rows

    def record_bundle(self, node: int, phase: int, keys: list[int], start: float, end: float, depth: int) -> None:
        """One event row for a bundle of ``len(keys)`` messages, and a member row per message's key."""
        row = self.event_table.written()
        self.record(node, phase, keys[0], start, end, depth, len(keys))
        table = self.member_table
        chunk = table.view.current
        for key in keys:
            if len(chunk["time"]) >= self._member_chunk_rows:
                chunk = table.seal()
            chunk["row"].append(row)
            chunk["key"].append(key)
            chunk["time"].append(start)  # last

    def record_staleness(self, node: int, key: int, staleness: int, time: float) -> None:
        if len(self.st_time) >= self._staleness_chunk_rows:
            self._bind_staleness(self.staleness_table.seal())
        self.st_node.append(node)
        self.st_key.append(key)
        self.st_value.append(staleness)
        self.st_time.append(time)  # last

    # ------------------------------------------------------------------ readers (any thread)
    def snapshot(self) -> tuple[Columns, Columns]:
        """Copies of the held event and staleness rows, each in time order (the order they were written)."""
        return self.event_table.read()[0], self.staleness_table.read()[0]

    def members(self) -> Columns:
        """The member rows of the bundles held: event row index (as ``event_table.written()`` counts rows),
        key, and the bundle's start time."""
        return self.member_table.read()[0]

    def event_totals(self) -> EventTotals:
        return self.event_table.totals()

    def staleness_totals(self) -> StalenessTotals:
        return self.staleness_table.totals()

    @property
    def total_rows(self) -> int:
        """Event rows written over the whole run, held or dropped."""
        return self.event_table.written()

    def __len__(self) -> int:
        """Event rows held now (at most ``capacity``)."""
        return self.event_table.held()


__all__ = [
    "DEFAULT_CAPACITY", "EVENT_COLUMNS", "MEMBER_COLUMNS", "PHASES", "PHASE_BWD", "PHASE_FWD", "PHASE_UPDATE",
    "STALENESS_COLUMNS", "Sealed", "Table", "WorkerBuffer", "check_capacity", "chunk_rows_for", "drop_old",
]  # fmt: skip
