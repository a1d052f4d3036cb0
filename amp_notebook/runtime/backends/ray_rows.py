"""Trace rows shipped from Ray workers into the driver's buffers, column by column.

Each worker actor writes its own :class:`~amp_notebook.trace.buffers.WorkerBuffer` (on its own clock) and
ships the rows it wrote since its last shipment: every column of the event and staleness tables, named
as the tables name them (``EVENT_COLUMNS``, ``STALENESS_COLUMNS``), so a column added there travels with
no change here. The driver shifts the time columns of each table (its ``span``) by the worker's clock
offset and appends the rows to that worker's buffer in the driver, through :func:`append_rows`, which
keeps the buffer's one-writer protocol (the time column last, chunks sealed when full). The Trace,
dashboard, exports and reports then read a Ray run exactly as they read a threaded one.
"""

from __future__ import annotations

import numpy as np

from amp_notebook.trace.buffers import Columns, Table, WorkerBuffer


def append_rows(table: Table, cols: Columns, shift_s: float = 0.0) -> int:
    """Append rows given as columns (every column of ``table``) to ``table``; times moved by ``shift_s``.
    Returns the number of rows appended. One writer only, like ``WorkerBuffer.record``."""
    names = [name for name, _ in table.columns]
    missing = [n for n in names if n not in cols]
    if missing:
        raise ValueError(
            f"trace rows lack columns {missing} (got {sorted(cols)}): the driver and the Ray workers run different "
            "versions of amp_notebook; install the same version on every node"
        )
    n = len(cols[table.last])
    if n == 0:
        return 0
    times = set(table.span)
    data = {}
    for name, code in table.columns:
        col = np.asarray(cols[name])
        if name in times and shift_s:
            col = col + shift_s
        data[name] = np.ascontiguousarray(col, dtype=np.dtype(code))
    done = 0
    while done < n:
        current = table.view.current
        have = len(current[table.last])
        if have >= table.chunk_rows:
            current = table.seal()
            have = 0
        take = min(n - done, table.chunk_rows - have)
        for name, _ in table.columns:  # in order: the time column, last, counts complete rows
            current[name].frombytes(data[name][done : done + take].tobytes())
        done += take
    return n


def append_worker_rows(buffer: WorkerBuffer, events: Columns, staleness: Columns, shift_s: float) -> None:
    """A worker's shipment: its event and staleness rows, on the driver's clock."""
    append_rows(buffer.event_table, events, shift_s)
    append_rows(buffer.staleness_table, staleness, shift_s)


__all__ = ["append_rows", "append_worker_rows"]
