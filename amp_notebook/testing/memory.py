"""Measuring what a long run holds: resident memory, a robust growth rate, Python allocation sites that
grow, and the per-key bookkeeping a session still holds.

A run that trains for hours must hold no more at its end than after its warm-up (its trace buffers full,
its caches warm): everything it keeps per key is freed when the key completes, and what it keeps over the
whole run is a fixed-size aggregate. Four measures test that:

* :func:`rss_mb`: the process's resident memory now, in MB (what the operating system charges the run);
* :func:`robust_slope`: the Theil-Sen estimate of a growth rate, the median of the slopes between every
  pair of samples. Resident memory jumps when the allocator takes or returns an arena and when a trace
  buffer seals or drops a chunk; a least-squares fit follows those jumps, the median of pairwise slopes
  does not (it tolerates up to ~29% of the samples being outliers);
* :class:`AllocationSites`: ``tracemalloc`` snapshots taken over a run; :meth:`AllocationSites.growth`
  diffs the first snapshot after the warm-up against the last one and lists the source lines whose live
  allocations grew the most (the sites to read when the slope is not flat). Tracing every allocation slows
  the run (about twice here), so it is off unless asked for;
* :func:`bookkeeping`: the entries a session holds in its per-key structures (node caches, joins, forward
  versions; the controller's and the session's tables of keys in flight; keys skipped for NaN/inf), the
  keys and flushes its backend's ledger counts in flight, and the trace rows its buffers hold; for a native
  run, the engine's own tables too: the entries each node's kernel caches, the forward versions it
  records, the messages queued, and the trace rows its buffers hold (what the native writer still keeps,
  not only what a reader shows). In flight these are bounded by ``max_active_keys``;
  after a run they are all empty except the trace rows and the skipped keys.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import tracemalloc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.errors import DataFormatError

if TYPE_CHECKING:
    from amp_notebook.runtime.session import Session

PER_KEY_CONTEXT_TABLES = ("cache", "joins", "fwd_version")


def rss_mb() -> float:
    """Resident memory of this process now, in MB (2**20 bytes). Linux reads ``/proc/self/statm``; elsewhere
    the peak so far (``ru_maxrss``) is the closest figure the standard library has."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def trim_heap() -> bool:
    """Free cyclic garbage and hand the heap's free memory back to the operating system (glibc
    ``malloc_trim``); False where there is no glibc. Resident memory then counts what the process can still
    reach, not garbage awaiting a full collection or what its allocator keeps for reuse."""
    gc.collect()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


def robust_slope(x: Any, y: Any) -> float:
    """The Theil-Sen slope of ``y`` against ``x``: the median of ``(y[j] - y[i]) / (x[j] - x[i])`` over all
    pairs with ``x[i] < x[j]``. 0.0 with fewer than two distinct ``x``."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if xs.shape != ys.shape or xs.ndim != 1:
        raise DataFormatError(
            f"robust_slope: expected two 1-d sequences of one length, got shapes {xs.shape} and {ys.shape}; pass "
            "the sample times and the values measured at them"
        )
    i, j = np.triu_indices(len(xs), k=1)
    dx = xs[j] - xs[i]
    keep = dx != 0
    if not keep.any():
        return 0.0
    return float(np.median((ys[j] - ys[i])[keep] / dx[keep]))


@dataclass(frozen=True)
class Site:
    """A source line whose live allocations grew between two snapshots."""

    where: str  # "path:line"
    grew_bytes: int
    grew_blocks: int
    bytes_now: int

    def as_dict(self) -> dict[str, Any]:
        return {"where": self.where, "grew_bytes": self.grew_bytes, "grew_blocks": self.grew_blocks,
                "bytes_now": self.bytes_now}  # fmt: skip


@dataclass
class AllocationSites:
    """``tracemalloc`` snapshots over a run: :meth:`start`, :meth:`take` at intervals (keeps only the
    baseline, the first taken at or after ``baseline_s``, and the latest), :meth:`growth`, :meth:`stop`."""

    frames: int = 1  # traceback depth kept per allocation (1: group by the allocating line)
    baseline: tracemalloc.Snapshot | None = None
    latest: tracemalloc.Snapshot | None = None
    traced_mb: list[float] = field(default_factory=list)  # Python-traced memory at each take

    def start(self) -> None:
        tracemalloc.start(self.frames)

    def take(self, at_baseline: bool) -> None:
        """A snapshot; it becomes the baseline if ``at_baseline`` and there is none yet."""
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        self.traced_mb.append(tracemalloc.get_traced_memory()[0] / 2**20)
        if at_baseline and self.baseline is None:
            self.baseline = snap
        else:
            self.latest = snap

    def growth(self, limit: int = 10) -> list[Site]:
        """The ``limit`` lines whose live allocations grew most from the baseline to the latest snapshot."""
        if self.baseline is None or self.latest is None:
            return []
        stats = self.latest.compare_to(self.baseline, "lineno")
        grown = [s for s in stats if s.size_diff > 0][:limit]
        return [
            Site(f"{s.traceback[0].filename}:{s.traceback[0].lineno}", s.size_diff, s.count_diff, s.size) for s in grown
        ]

    def stop(self) -> None:
        tracemalloc.stop()


def bookkeeping(session: Session, backend: Any = None) -> dict[str, int]:
    """Entries held per key by ``session`` now (see the module docstring), and trace rows held per table;
    with a native ``backend``, the engine's entries too (``engine ...``)."""
    held = {f"node {name}": 0 for name in PER_KEY_CONTEXT_TABLES}
    for ctx in session.contexts:
        for name in PER_KEY_CONTEXT_TABLES:
            held[f"node {name}"] += len(getattr(ctx, name))
    controller = session.controller
    held["controller keys"] = len(controller.keys)
    held["controller active"] = len(controller.active)
    held["session key_epoch"] = len(session.key_epoch)
    ledger = getattr(backend, "ledger", None)  # the backend's side of completion (runtime/ledger.py)
    if ledger is not None:
        keys, flushes = ledger.in_flight()
        held["ledger keys in flight"], held["ledger flushes in flight"] = len(keys), len(flushes)
    held["skipped keys"] = len(session.numerics.skipped) if session.numerics is not None else 0
    for table in ("event_table", "staleness_table", "member_table"):
        held[f"trace {table.split('_')[0]} rows"] = sum(getattr(b, table).held() for b in session.buffers)
    engine = getattr(backend, "engine", None)
    if engine is not None:
        held["engine node caches"] = held["engine forward versions"] = 0
        for node in range(len(session.plan.names)):
            entries = engine.held(node)  # None while its worker is inside a step
            if entries is not None:
                held["engine node caches"] += int(entries[0])
                held["engine forward versions"] += len(entries[1])
        held["engine queued messages"] = sum(engine.queued())
        for kind in ("events", "members", "staleness"):
            held[f"trace native {kind} rows"] = sum(
                rows for b in session.buffers for _, rows, _ in b.native.chunks(kind)
            )  # fmt: skip
    return held


__all__ = ["AllocationSites", "Site", "bookkeeping", "robust_slope", "rss_mb", "trim_heap"]
