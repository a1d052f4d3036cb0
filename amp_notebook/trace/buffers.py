"""Per-worker columnar trace buffers: one writer (the worker), readers take snapshots.

Each handled message appends one row (node, phase, key, start, end, queue depth); each gradient a
parameterized node receives appends one staleness row (node, key, staleness, time). Columns are
``array.array`` so appends are cheap and lock-free for the single writer; a snapshot slices every column
to the length of the column written last (so rows are whole) and copies it into numpy.
"""

from __future__ import annotations

from array import array

import numpy as np

PHASE_FWD, PHASE_BWD, PHASE_UPDATE = 0, 1, 2
PHASES = ("fwd", "bwd", "update")


class WorkerBuffer:
    __slots__ = ("depth", "end", "key", "node", "phase", "st_key", "st_node", "st_time", "st_value", "start")

    def __init__(self) -> None:
        self.node = array("i")
        self.phase = array("b")
        self.key = array("q")
        self.depth = array("i")
        self.start = array("d")
        self.end = array("d")  # written last: its length is the number of complete rows
        self.st_node = array("i")
        self.st_key = array("q")
        self.st_value = array("i")
        self.st_time = array("d")  # written last

    def record(self, node: int, phase: int, key: int, start: float, end: float, depth: int) -> None:
        self.node.append(node)
        self.phase.append(phase)
        self.key.append(key)
        self.depth.append(depth)
        self.start.append(start)
        self.end.append(end)

    def record_staleness(self, node: int, key: int, staleness: int, time: float) -> None:
        self.st_node.append(node)
        self.st_key.append(key)
        self.st_value.append(staleness)
        self.st_time.append(time)

    def snapshot(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        n = len(self.end)
        rows = {
            name: np.frombuffer(getattr(self, name)[:n], dtype=getattr(self, name).typecode)
            for name in ("node", "phase", "key", "depth", "start", "end")
        }
        m = len(self.st_time)
        stale = {
            name: np.frombuffer(getattr(self, "st_" + name)[:m], dtype=getattr(self, "st_" + name).typecode)
            for name in ("node", "key", "value", "time")
        }
        return rows, stale

    def __len__(self) -> int:
        return len(self.end)
