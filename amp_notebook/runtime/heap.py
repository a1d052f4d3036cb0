"""While worker threads train, Python's cyclic collector skips the objects that existed before the run.

Why: a full collection walks every object the collector tracks, holding the GIL. On the native engine it runs
on the driver, the thread that admits keys, and the workers run out of admitted keys within a few
milliseconds and wait for it. Measured here: a full collection of a benchmark process's 70k objects took
9-17 ms alone and 32 ms beside two busy workers, and the GG-NN epoch it fell in took 159 ms instead of about
110. A notebook's heap is often ten or a hundred times larger. On the Python engine every worker waits for
the GIL meanwhile.

How: ``gc.freeze()`` moves every tracked object into the permanent generation, which collections ignore.
Objects made during the run are collected as always, cycles included, and reference counting frees what it
always frees. When the last run ends, ``gc.unfreeze()`` hands the frozen objects back to the oldest
generation, so cyclic garbage among them is collected later, not lost.

The freeze is process-wide, as the BLAS limit is (``blas.py``), and runs may overlap (a background run beside
another), so it is counted: the first run to start freezes, the last to end unfreezes. A process that froze
objects itself (``gc.get_freeze_count() > 0`` as the first run starts) is left as it is: its objects are frozen
already, and unfreezing at the end would undo its own freeze.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_active = 0
_froze = False  # this module froze the heap (and so unfreezes it when the last run ends)


def acquire() -> None:
    """One more run training: freeze the heap if this is the only run and nothing is frozen yet."""
    global _active, _froze
    with _lock:
        if _active == 0 and gc.get_freeze_count() == 0:
            gc.freeze()
            _froze = True
        _active += 1


def release() -> None:
    """One run fewer: the last one unfreezes what the first one froze."""
    global _active, _froze
    with _lock:
        _active -= 1
        if _active == 0 and _froze:
            gc.unfreeze()
            _froze = False


@contextmanager
def frozen_heap() -> Iterator[None]:
    """The objects that exist now are out of the collector's walks inside (module docstring); nested and
    concurrent uses share one freeze."""
    acquire()
    try:
        yield
    finally:
        release()


def runs_freezing() -> int:
    """How many runs hold the freeze now (for tests)."""
    return _active


__all__ = ["acquire", "frozen_heap", "release", "runs_freezing"]
