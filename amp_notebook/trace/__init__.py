"""Tracing: per-worker bounded columnar buffers, the Trace reader, windows and incremental reads, exact
running totals, metrics, what each worker waited for, and Chrome/Perfetto export."""

from amp_notebook.trace.buffers import PHASES, WorkerBuffer
from amp_notebook.trace.chrome import chrome_trace, write_chrome_trace
from amp_notebook.trace.metrics import staleness_histogram, staleness_summary, utilization
from amp_notebook.trace.totals import EventTotals, StalenessTotals
from amp_notebook.trace.trace import Trace
from amp_notebook.trace.waits import WorkerWaits
from amp_notebook.trace.waits import summary as waits_summary
from amp_notebook.trace.window import Cursor, Increment

__all__ = [
    "PHASES", "Cursor", "EventTotals", "Increment", "StalenessTotals", "Trace", "WorkerBuffer", "WorkerWaits",
    "chrome_trace", "staleness_histogram", "staleness_summary", "utilization", "waits_summary", "write_chrome_trace",
]  # fmt: skip
