"""Tracing: per-worker columnar buffers, the Trace reader, metrics and Chrome/Perfetto export."""

from amp_notebook.trace.buffers import PHASES, WorkerBuffer
from amp_notebook.trace.chrome import chrome_trace, write_chrome_trace
from amp_notebook.trace.metrics import staleness_histogram, staleness_summary, utilization
from amp_notebook.trace.trace import Trace

__all__ = [
    "PHASES", "Trace", "WorkerBuffer", "chrome_trace", "staleness_histogram", "staleness_summary", "utilization",
    "write_chrome_trace",
]  # fmt: skip
