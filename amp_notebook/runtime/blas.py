"""One BLAS thread while any run trains, the user's setting back once the last run has ended.

Workers run their matmuls on one BLAS thread each (more would fight over the cores). Two facts shape this
module:

* the limit is process-wide, and runs can overlap (a background run in a notebook while another trains):
  so the first run to start saves and sets the limit and the last one to end restores it (a count), rather
  than each run restoring what it saw, which would lift the limit under a run still going, or leave it
  at one thread for good;
* OpenBLAS ignores a thread-count change made from another thread once the main thread has set one (as a
  foreground run, or any ``threadpoolctl`` call in a notebook, does). So the limit is set by the thread
  that starts a run (``train``), also for background runs, and restored by that thread: a background run
  that ends on its own marks the restore as due, and it happens at the next call from the starting thread
  into the run (``wait``, ``stop``, ``status``, ...) or into ``train``, and in IPython / Jupyter before the
  next cell runs (a ``pre_run_cell`` hook, registered when a run starts from the shell's main thread), so
  the user's own numpy work in the next cell gets its threads back without touching the run.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from threadpoolctl import threadpool_limits

_lock = threading.Lock()
_active = 0
_limiter: Any = None
_owner: int | None = None  # the thread that set the limit, the one that can restore it
_hooked_shell: Any = None  # the IPython shell whose cells settle the limit (see _settle_before_each_cell)


def acquire() -> None:
    """One more run training: set the limit if none is set (from this thread)."""
    global _active, _limiter, _owner
    with _lock:
        if _limiter is None:
            _limiter = threadpool_limits(limits=1, user_api="blas")
            _owner = threading.get_ident()
        _active += 1
    if threading.current_thread() is threading.main_thread():
        _settle_before_each_cell()


def release() -> None:
    """One run fewer: the last one restores the user's setting, now if this is the thread that set the
    limit, else at the next :func:`settle` from that thread."""
    global _active
    with _lock:
        _active -= 1
        _restore_if_due()


def settle() -> None:
    """Restore the user's setting if no run holds the limit any more and this thread set it."""
    with _lock:
        _restore_if_due()


def _restore_if_due() -> None:
    global _limiter, _owner
    if _active == 0 and _limiter is not None and threading.get_ident() == _owner:
        _limiter.restore_original_limits()
        _limiter, _owner = None, None


def _settle_before_each_cell() -> None:
    """In IPython (a notebook's kernel), settle before every cell: the shell runs cells on the main thread,
    the one that set the limit. Registered once per shell; nothing happens outside IPython."""
    global _hooked_shell
    if "IPython" not in sys.modules:  # not in IPython; never import it just to find that out
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None or shell is _hooked_shell:
        return
    shell.events.register("pre_run_cell", _settle_event)
    _hooked_shell = shell


def _settle_event(*_info: Any) -> None:
    settle()


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """BLAS limited to one thread inside; nested and concurrent uses share one limit."""
    acquire()
    try:
        yield
    finally:
        release()


def runs_limiting() -> int:
    """How many runs hold the limit now (for tests)."""
    return _active


__all__ = ["acquire", "release", "runs_limiting", "settle", "single_threaded_blas"]
