"""What the reproduction's figures were measured on, and how loaded the machine was while they were.

A throughput measured on a shared machine is only as good as the machine was idle. Every timed figure of
``reproduce`` is recorded beside the 1-minute load average before and after it (rounded to one decimal:
the load average is itself a smoothed estimate). A figure is *loaded* when the load exceeded the number of
cores: other processes then competed for the cores, and PyTorch's intra-op threads (which spin and wait
for each other) suffer far more from that than our worker threads do, so a peer measured so can read
several times too slow.
"""

from __future__ import annotations

import datetime
import os
import platform
from typing import Any


def cores() -> int:
    return os.cpu_count() or 1


def load_1min() -> float:
    """The 1-minute load average, rounded to one decimal."""
    return round(os.getloadavg()[0], 1)


def loaded(load: float | list[float] | None) -> bool:
    """Whether a load (or the largest of several) exceeded this machine's cores."""
    if load is None:
        return False
    worst = max(load) if isinstance(load, list) else load
    return worst > cores()


def load_words(load: float | list[float] | None) -> str:
    """A load as a reader should see it: ``load 3.8 on 2 cores`` (``3.1-5.6`` for a range)."""
    values = [] if load is None else load if isinstance(load, list) else [load]
    if not values:
        return "load not recorded"
    span = f"{min(values):.1f}" if min(values) == max(values) else f"{min(values):.1f}-{max(values):.1f}"
    return f"load {span} on {cores()} cores"


def machine(engine: str = "auto") -> dict[str, Any]:
    """This machine, the engine asked to run the workers, and its load when the run began."""
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "cores": cores(), "engine": engine,
        "python": platform.python_version(), "platform": platform.platform(), "load_1min": load_1min(),
    }  # fmt: skip


__all__ = ["cores", "load_1min", "load_words", "loaded", "machine"]
