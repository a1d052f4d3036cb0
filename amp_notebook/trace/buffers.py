"""Per-worker trace buffers: bounded chunks of packed rows, one writer, lock-free readers, exact totals.

Each handled message appends one *event* row (node, phase, key, queue depth, start, end, messages); a
*bundle* (several messages for one node run as one call) appends one row too, with ``key`` its first
message's key and ``messages`` their number, and one *member* row (event row index, key, time) per
message, so the keys of a bundle can be listed; each gradient a parameterized node receives appends one
*staleness* row (node, key, staleness, time). Each kind of row lives in a :class:`Table` of chunks:

* the **current chunk** is one ``bytearray`` of packed rows (a ``struct`` row of the table's column
  types, no padding); the writer appends a row with one ``+=`` of the packed bytes (cheap, no lock: the
  hot path pays one ``struct`` pack per row, a third of what one ``array.append`` per column cost);
* when it holds ``chunk_rows`` rows the writer **seals** it: reads it once as a numpy structured array,
  copies each column out (read-only, contiguous; the chunk is never appended to again), summarizes it once
  into totals (:mod:`amp_notebook.trace.totals`) and starts a new current chunk;
* with a ``capacity``, sealed chunks that would let the table exceed ``capacity`` rows are **dropped**,
  oldest first, and their totals are added to the totals of dropped rows. Old rows are dropped whole,
  never decimated: what the table holds is every row of the most recent span (between
  ``capacity - chunk_rows`` and ``capacity`` rows), so a Gantt of a recent window is exact;
* the staleness and member tables also **follow** the event table: once it has dropped rows, a sealed
  chunk of theirs that ends before the oldest event row held is dropped too (:func:`drop_old`). A worker's
  buffer thus holds one recent span in all three tables, and its memory stops growing when the event table
  is full. (The other tables fill more slowly, a row per gradient or per bundled message against a row per
  handled message or bundle, so on their own they went on growing long after the Gantt's rows were full;
  the members of a dropped bundle row named a row no reader could find.)

Totals never drop: busy seconds and rows per phase per worker, and each node's staleness histogram
(count, sum, mean, max, percentiles), are the dropped chunks' totals + the sealed chunks' (computed once)
+ the current chunk's (summed when read). Every row has an absolute index (rows the worker wrote before
it), so a reader can ask for the rows since a cursor and learn how many it missed.

Why no lock is needed (CPython, GIL): extending a ``bytearray`` with one row's bytes and an attribute
assignment are each atomic, so the current chunk always holds whole rows and a reader copies the prefix of
complete rows it sees. Sealing publishes a new immutable :class:`_View` (sealed chunks, current chunk,
dropped totals) with one attribute assignment, so a reader that reads ``table.view`` once sees a consistent
set; the chunks of an older view stay valid (sealed columns are never written, dropped ones live while a
reader holds them). The hot path pays one length check per row for all this.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from amp_notebook.errors import SettingError
from amp_notebook.ir.message import PHASES
from amp_notebook.trace.totals import EventTotals, RowCount, StalenessTotals

DEFAULT_CAPACITY = 1_000_000  # rows per worker and kind: ~37 MB of event rows
MAX_CHUNK_ROWS = 65_536

EVENT_COLUMNS = (
    ("node", "i"), ("phase", "b"), ("key", "q"), ("depth", "i"), ("messages", "i"), ("start", "d"), ("end", "d"),
)  # fmt: skip
STALENESS_COLUMNS = (("node", "i"), ("key", "q"), ("value", "i"), ("time", "d"))
MEMBER_COLUMNS = (("row", "q"), ("key", "q"), ("time", "d"))
NUMPY_TYPES = {"b": "i1", "i": "<i4", "q": "<i8", "d": "<f8"}  # a column's type code -> its packed numpy type

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


class _View(NamedTuple):
    sealed: tuple[Sealed, ...]
    current: Any  # the chunk the writer appends packed rows to (a bytearray; a native table's: columns)
    current_first: int  # absolute index of the current chunk's first row
    dropped: Any  # totals of the rows no longer held


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


class Table:
    """One kind of row (events, staleness or bundle members) as bounded chunks; see the module docstring."""

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
        self.last = columns[-1][0]
        self.span = span  # (column of start times, column of end times)
        self.numbered = numbered  # readers get a `row` column: each row's absolute index
        self.summarize = summarize
        self.capacity = check_capacity(capacity)
        self.chunk_rows = chunk_rows_for(capacity)
        self.max_sealed = None if capacity is None else capacity // self.chunk_rows - 1
        self.row = np.dtype([(name, NUMPY_TYPES[code]) for name, code in columns])  # packed: no padding
        self.packer = struct.Struct("<" + "".join(code for _, code in columns))  # the writer's: one row's bytes
        self.row_bytes = self.packer.size
        self.chunk_bytes = self.chunk_rows * self.row_bytes
        self.follows = follows  # a table (same writer) whose oldest row held bounds what this one keeps
        self.view = _View((), bytearray(), 0, zero)

    # ------------------------------------------------------------------ writer
    def seal(self) -> bytearray:
        """Writer only: seal the current chunk, drop chunks beyond the capacity; returns the new current chunk."""
        view = self.view
        cols = self._columns(view.current)
        for col in cols.values():
            col.flags.writeable = False
        n = len(cols[self.last])
        lo_col, hi_col = self.span
        lo = float(cols[lo_col].min()) if n else 0.0
        hi = float(cols[hi_col].max()) if n else 0.0
        kept = (*view.sealed, Sealed(view.current_first, cols, self.summarize(cols), lo, hi))
        horizon = self.follows.horizon() if self.follows is not None else None
        kept, dropped = drop_old(kept, view.dropped, self.max_sealed, horizon)
        current = bytearray()
        self.view = _View(kept, current, view.current_first + n, dropped)  # one atomic publish
        return current

    def horizon(self) -> float | None:
        """Writer only: the earliest start of the rows held once some were dropped (None before: all held)."""
        view = self.view
        if view.sealed:
            first = view.sealed[0]
            return first.lo if first.first > 0 else None
        if view.current_first == 0 or self._current_len(view) == 0:
            return None
        return float(np.frombuffer(view.current, dtype=self.row, count=1)[self.span[0]][0])

    def append(self, cols: Columns) -> int:
        """Writer only: append rows given as columns (every column of the table, in any numeric type), chunk by
        chunk; returns the number of rows appended."""
        n = len(cols[self.last])
        rows = np.empty(n, dtype=self.row)
        for name, _ in self.columns:
            rows[name] = cols[name]
        data = rows.tobytes()
        done = 0
        while done < n:
            current = self.view.current
            have = len(current) // self.row_bytes
            if have >= self.chunk_rows:
                current = self.seal()
                have = 0
            take = min(n - done, self.chunk_rows - have)
            current += data[done * self.row_bytes : (done + take) * self.row_bytes]  # whole rows at once
            done += take
        return n

    # ------------------------------------------------------------------ readers
    def _columns(self, packed: bytes | bytearray) -> Columns:
        """The complete rows of a chunk (or a copy of one) as contiguous columns of their own."""
        n = len(packed) // self.row_bytes
        rows = np.frombuffer(packed, dtype=self.row, count=n)
        return {name: np.ascontiguousarray(rows[name]) for name, _ in self.columns}

    def _current_rows(self, view: _View) -> Columns:
        current = view.current
        return self._columns(bytes(current[: len(current) // self.row_bytes * self.row_bytes]))

    def _current_len(self, view: _View) -> int:
        """Complete rows in the current chunk."""
        return len(view.current) // self.row_bytes

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
        return sum(len(s) for s in view.sealed) + self._current_len(view)

    def written(self) -> int:
        view = self.view
        return view.current_first + self._current_len(view)


class BufferReads:
    """The reader half of a worker's trace, shared by :class:`WorkerBuffer` and the native engine's buffer:
    both hold an ``event_table``, a ``staleness_table`` and a ``member_table``."""

    __slots__ = ()
    event_table: Table
    staleness_table: Table
    member_table: Table

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


class WorkerBuffer(BufferReads):
    """One worker's trace: an event table, a staleness table and a bundle-member table, each holding at most
    ``capacity`` rows (``None``: every row). The current chunks and row packers are attributes, for the
    writer's hot path."""

    __slots__ = (
        "_event_bytes", "_event_row", "_events", "_member_bytes", "_member_row", "_members", "_staleness",
        "_staleness_bytes", "_staleness_row", "event_table", "member_table", "staleness_table",
    )  # fmt: skip

    def __init__(self, capacity: int | None = DEFAULT_CAPACITY) -> None:
        self.event_table = Table(EVENT_COLUMNS, ("start", "end"), EventTotals.of, EventTotals(), capacity, True)
        self.staleness_table = Table(STALENESS_COLUMNS, ("time", "time"), StalenessTotals.of, StalenessTotals(),
                                     capacity, follows=self.event_table)  # fmt: skip
        self.member_table = Table(MEMBER_COLUMNS, ("time", "time"), RowCount.of, RowCount(), capacity,
                                  follows=self.event_table)  # fmt: skip
        self._events, self._event_bytes = self.event_table.view.current, self.event_table.chunk_bytes
        self._event_row = self.event_table.packer.pack
        self._staleness, self._staleness_bytes = self.staleness_table.view.current, self.staleness_table.chunk_bytes
        self._staleness_row = self.staleness_table.packer.pack
        self._members, self._member_bytes = self.member_table.view.current, self.member_table.chunk_bytes
        self._member_row = self.member_table.packer.pack

    @property
    def capacity(self) -> int | None:
        return self.event_table.capacity

    # ------------------------------------------------------------------ writer (one thread)
    def record(self, node: int, phase: int, key: int, start: float, end: float, depth: int, messages: int = 1) -> None:
        events = self._events
        if len(events) >= self._event_bytes:
            events = self._events = self.event_table.seal()
        events += self._event_row(node, phase, key, depth, messages, start, end)

    def record_bundle(self, node: int, phase: int, keys: list[int], start: float, end: float, depth: int) -> None:
        """One event row for a bundle of ``len(keys)`` messages, and a member row per message's key."""
        row = self.event_table.written()
        self.record(node, phase, keys[0], start, end, depth, len(keys))
        pack = self._member_row
        for key in keys:
            members = self._members
            if len(members) >= self._member_bytes:
                members = self._members = self.member_table.seal()
            members += pack(row, key, start)

    def record_staleness(self, node: int, key: int, staleness: int, time: float) -> None:
        rows = self._staleness
        if len(rows) >= self._staleness_bytes:
            rows = self._staleness = self.staleness_table.seal()
        rows += self._staleness_row(node, key, staleness, time)

    # ------------------------------------------------------------------ readers (any thread)


__all__ = [
    "DEFAULT_CAPACITY", "EVENT_COLUMNS", "MEMBER_COLUMNS", "PHASES", "STALENESS_COLUMNS", "BufferReads", "Sealed",
    "Table", "WorkerBuffer", "check_capacity", "chunk_rows_for", "drop_old",
]  # fmt: skip
