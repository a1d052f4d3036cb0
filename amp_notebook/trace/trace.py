"""A run's trace: what every worker did, when, for which node and key; and every gradient's staleness.

``Trace`` reads the per-worker buffers (live, while the run goes, or after it) and gives columns as
numpy arrays with times in seconds since the run started (virtual seconds for the simulator).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from amp_notebook.trace.buffers import PHASES, WorkerBuffer


class Trace:
    def __init__(self, buffers: Sequence[WorkerBuffer], node_names: Sequence[str], origin: float = 0.0) -> None:
        self.buffers = list(buffers)
        self.node_names = list(node_names)
        self.origin = origin
        self.phases = PHASES

    @property
    def workers(self) -> int:
        return len(self.buffers)

    def events(self) -> dict[str, np.ndarray]:
        """One row per handled message (and per update): worker, node, phase, key, start, end, depth,
        sorted by start time."""
        parts = []
        for w, buf in enumerate(self.buffers):
            rows, _ = buf.snapshot()
            rows["worker"] = np.full(len(rows["end"]), w, dtype=np.int32)
            parts.append(rows)
        cols = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]} if parts else {}
        if not cols:
            return {n: np.zeros(0) for n in ("worker", "node", "phase", "key", "start", "end", "depth")}
        cols["start"] = cols["start"] - self.origin
        cols["end"] = cols["end"] - self.origin
        order = np.argsort(cols["start"], kind="stable")
        return {name: col[order] for name, col in cols.items()}

    def staleness(self) -> dict[str, np.ndarray]:
        """One row per gradient received by a parameterized node: node, key, value (staleness), time."""
        parts = [buf.snapshot()[1] for buf in self.buffers]
        cols = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
        cols["time"] = cols["time"] - self.origin
        order = np.argsort(cols["time"], kind="stable")
        return {name: col[order] for name, col in cols.items()}

    def table(self) -> Any:
        """The events as a pandas DataFrame when pandas is installed, else the dict of columns."""
        cols = self.events()
        named = dict(cols)
        named["node_name"] = np.array(self.node_names, dtype=object)[cols["node"]] if len(cols["node"]) else []
        named["phase_name"] = np.array(self.phases, dtype=object)[cols["phase"]] if len(cols["phase"]) else []
        try:
            import pandas as pd
        except ImportError:
            return named
        return pd.DataFrame(named)

    def to_chrome(
        self, path: str | Path | None = None, counters: bool = True, window: tuple[float, float] | None = None
    ) -> dict[str, Any]:
        """Chrome/Perfetto trace document (written to ``path`` when given); ``window`` in seconds."""
        from amp_notebook.trace.chrome import chrome_trace, write_chrome_trace

        doc = chrome_trace(self, counters=counters, window=window)
        if path is not None:
            write_chrome_trace(doc, path)
        return doc
