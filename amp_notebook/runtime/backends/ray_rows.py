"""Trace rows shipped from Ray workers into the driver's buffers, column by column.

Each worker actor writes its own :class:`~amp_notebook.trace.buffers.WorkerBuffer` (on its own clock) and
ships the rows it wrote since its last shipment: every column of every table of the buffer (events,
staleness, bundle members: whatever :func:`tables` finds), named as the tables name them
(``EVENT_COLUMNS``, ...), so a table or column added there travels with no change here. Rows are shipped
in order and none is dropped on the way (a shipment reports rows the actor dropped before shipping them),
so the absolute row indices that member rows refer to are the same in the driver's buffer. The driver
shifts the time columns of each table (its ``span``) by the worker's clock
offset and appends the rows to that worker's buffer in the driver, through :func:`append_rows`, which
keeps the buffer's one-writer protocol (whole rows at once, chunks sealed when full). The Trace,
dashboard, exports and reports then read a Ray run exactly as they read a threaded one.
"""

from __future__ import annotations

import numpy as np

from amp_notebook.errors import AmpError
from amp_notebook.trace.buffers import Columns, Table, WorkerBuffer


class ShippedRowsError(AmpError, ValueError):
    """Trace rows a Ray worker shipped that this driver cannot read: the two run different versions."""


def append_rows(table: Table, cols: Columns, shift_s: float = 0.0) -> int:
    """Append rows given as columns (every column of ``table``) to ``table``; times moved by ``shift_s``.
    Returns the number of rows appended. One writer only, like ``WorkerBuffer.record``."""
    names = [name for name, _ in table.columns]
    missing = [n for n in names if n not in cols]
    if missing:
        raise ShippedRowsError(
            f"trace rows lack columns {missing} (got {sorted(cols)}): the driver and the Ray workers run different "
            "versions of amp_notebook; install the same version on every node"
        )
    if len(cols[table.last]) == 0:
        return 0
    times = set(table.span)
    shifted = {name: np.asarray(cols[name]) + shift_s if name in times and shift_s else cols[name] for name in names}
    return table.append(shifted)


def tables(buffer: WorkerBuffer) -> dict[str, Table]:
    """The tables of a worker's buffer, by attribute name (``event_table``, ``staleness_table``, ...)."""
    return {name: getattr(buffer, name) for name in type(buffer).__slots__ if name.endswith("_table")}


def read_new_rows(buffer: WorkerBuffer, cursors: dict[str, int]) -> dict[str, tuple[Columns, int]]:
    """Writer side: each table's rows since ``cursors`` (advanced), with the rows dropped before being read."""
    shipment = {}
    for name, table in tables(buffer).items():
        cols, cursors[name], missed = table.read(cursors.get(name, 0))
        shipment[name] = ({n: cols[n] for n, _ in table.columns}, missed)
    return shipment


def append_worker_rows(buffer: WorkerBuffer, shipment: dict[str, tuple[Columns, int]], shift_s: float) -> int:
    """Driver side: a worker's shipment into its buffer, on the driver's clock; returns the rows missed."""
    missed = 0
    for name, table in tables(buffer).items():
        cols, lost = shipment[name]
        append_rows(table, cols, shift_s)
        missed += lost
    return missed


__all__ = ["ShippedRowsError", "append_rows", "append_worker_rows", "read_new_rows", "tables"]
