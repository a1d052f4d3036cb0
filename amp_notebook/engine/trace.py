"""Read a native worker's trace rows in place, with the reader interface of :mod:`amp_notebook.trace.buffers`.

The native ``TraceBuffer`` (``src/trace.h``) writes rows into chunks of columns and publishes each chunk's
row count with release semantics; ``chunks(kind)`` gives each chunk as numpy arrays over its memory (no
copy) and its published count. :class:`NativeTable` is a :class:`~amp_notebook.trace.buffers.Table` whose
view is rebuilt from those chunks when read: a full chunk is sealed once (its totals summarized, as the
Python writer does when it seals), chunks beyond the capacity are dropped oldest first, and so are the
staleness and member chunks that end before the oldest event row held (``drop_old``, the Python writer's
rule: one recent span in all three tables), their totals folded into the dropped totals and the native
writer told it may free them; the last chunk is the current one, read to its published count. Everything
else (``read``, ``window``, ``totals``, ``held``, ``written``) is Table's own code, so the dashboard,
exports and metrics read a native run as they read a Python one. Readers run on any thread; one lock per
table serializes the rebuilds.

The native writer never drops a chunk by itself (a dropped chunk's totals are summarized here), so a run
nobody reads must still be folded: the native driver calls :meth:`NativeWorkerBuffer.fold` as its workers
handle messages (``engine/backend.py``), which bounds what a worker's buffer holds to its capacity plus
the rows written between two folds.
"""

from __future__ import annotations

import threading
from typing import Any

from amp_notebook.trace.buffers import (
    DEFAULT_CAPACITY,
    EVENT_COLUMNS,
    MEMBER_COLUMNS,
    STALENESS_COLUMNS,
    BufferReads,
    Columns,
    Sealed,
    Table,
    _View,
    check_capacity,
    chunk_rows_for,
    drop_old,
)
from amp_notebook.trace.totals import EventTotals, RowCount, StalenessTotals


class NativeTable(Table):
    """One kind of row of a native buffer (``"events"``, ``"members"`` or ``"staleness"``)."""

    def __init__(self, native: Any, kind: str, columns: tuple[tuple[str, str], ...], span: tuple[str, str],
                 summarize: Any, zero: Any, capacity: int | None, numbered: bool = False,
                 follows: NativeTable | None = None) -> None:  # fmt: skip
        self._native, self._kind = native, kind
        self.columns, self.last, self.span, self.numbered = columns, columns[-1][0], span, numbered
        self.summarize = summarize
        self.capacity = check_capacity(capacity)
        self.chunk_rows = chunk_rows_for(capacity)
        self.max_sealed = None if capacity is None else capacity // self.chunk_rows - 1
        self.follows = follows  # the event table, whose oldest row held bounds what this one keeps
        self._sealed: tuple[Sealed, ...] = ()
        self._dropped = zero
        self._lock = threading.Lock()

    @property  # type: ignore[override]
    def view(self) -> _View:
        horizon = self.follows.horizon() if self.follows is not None else None  # its own lock, taken first
        with self._lock:
            chunks = self._native.chunks(self._kind)
            sealed = list(self._sealed)
            known = sealed[-1].first + len(sealed[-1]) if sealed else None
            for first, rows, cols in chunks[:-1]:  # every chunk but the last is full: seal it once
                if known is not None and first < known:
                    continue
                lo_col, hi_col = self.span
                lo = float(cols[lo_col].min()) if rows else 0.0
                hi = float(cols[hi_col].max()) if rows else 0.0
                sealed.append(Sealed(first, cols, self.summarize(cols), lo, hi))
                known = first + rows
            kept, self._dropped = drop_old(tuple(sealed), self._dropped, self.max_sealed, horizon)
            if len(kept) < len(sealed):
                self._native.forget_before(self._kind, kept[0].first if kept else chunks[-1][0])
            self._sealed = kept
            first, _, current = chunks[-1]
            return _View(kept, current, first, self._dropped)

    def horizon(self) -> float | None:
        """The earliest start of the sealed rows held once some were dropped (None before: all held)."""
        sealed = self._sealed  # replaced whole under the lock: this read is one consistent tuple
        return sealed[0].lo if sealed and sealed[0].first > 0 else None

    def _current_rows(self, view: _View) -> Columns:
        """The current chunk's published rows, read in place (the engine gives columns cut to their count)."""
        return view.current

    def _current_len(self, view: _View) -> int:
        return len(view.current[self.last])

    @view.setter
    def view(self, value: _View) -> None:  # Table's writer publishes views; the native writer needs none
        raise AttributeError("a native table is written by the engine, not by Python")


class NativeWorkerBuffer(BufferReads):
    """A native ``TraceBuffer`` (``native``: the engine's worker writes it) with the reader half of
    :class:`~amp_notebook.trace.buffers.WorkerBuffer`, holding at most ``capacity`` rows per kind."""

    def __init__(self, capacity: int | None = DEFAULT_CAPACITY) -> None:
        from amp_notebook.engine import native

        self.native = native_buffer = native().TraceBuffer(chunk_rows_for(check_capacity(capacity)))
        self.event_table = NativeTable(native_buffer, "events", EVENT_COLUMNS, ("start", "end"), EventTotals.of,
                                       EventTotals(), capacity, numbered=True)  # fmt: skip
        self.staleness_table = NativeTable(native_buffer, "staleness", STALENESS_COLUMNS, ("time", "time"),
                                           StalenessTotals.of, StalenessTotals(), capacity,
                                           follows=self.event_table)  # fmt: skip
        self.member_table = NativeTable(native_buffer, "members", MEMBER_COLUMNS, ("time", "time"), RowCount.of,
                                        RowCount(), capacity, follows=self.event_table)  # fmt: skip

    def fold(self) -> None:
        """Seal the full chunks and drop what the capacity and the event span leave out (the event table
        first: the others follow its oldest row)."""
        for table in (self.event_table, self.staleness_table, self.member_table):
            table.view  # noqa: B018 (rebuilding the view is the fold)


__all__ = ["NativeTable", "NativeWorkerBuffer"]
