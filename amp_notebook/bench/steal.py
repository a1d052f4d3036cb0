"""CPU time the hypervisor took from this machine while a benchmark ran: steal, read around each timed run.

On a virtual machine the host runs the virtual CPUs on physical cores it may share with other guests. The
time a virtual CPU was ready to run but the host ran something else is *steal*: Linux counts it in the
eighth field of the ``cpu`` line of ``/proc/stat``, in clock ticks, summed over the CPUs. No process of
this machine can see or prevent it, and ``top``'s load and idle figures hide it. On the 2-core VM these
benchmarks were written on, steal was about 5% of the CPU time while one worker ran and up to 29% while
two did, from one run to the next, and a GG-NN epoch on 2 workers ran at 1,870 graphs/s with 29% stolen
against 4,900 with none, a few seconds apart. So a ratio of two runs can move by 2x for reasons outside
the machine.

:func:`cpu_times` reads the counters; :func:`steal_share` turns two readings into the share of all CPU
time between them that was stolen (steal ticks over all ticks: every CPU's user, nice, system, idle,
iowait, irq, softirq and steal time, which together make the CPUs' wall-clock time). :class:`StealLog`
times callables and keeps each call's share. Off Linux (no ``/proc/stat``) every reading is ``None`` and
the share is unknown, never zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
PROC_STAT = Path("/proc/stat")
STEAL_FIELD = 7  # user nice system idle iowait irq softirq steal (guest and guest_nice are inside user and nice)
LOW_STEAL = 0.05  # a run whose share of stolen CPU time is at most this counts as a run on the CPUs it was given


@dataclass(frozen=True)
class CpuTimes:
    """The machine's CPU time since boot, in clock ticks summed over the CPUs: stolen, and all of it."""

    steal: int
    total: int


def cpu_times(path: Path = PROC_STAT) -> CpuTimes | None:
    """The ``cpu`` line of ``/proc/stat`` now; None where the file is missing or unreadable, or its line has
    fewer fields than a kernel that counts steal (2.6.11 and later) writes."""
    try:
        with path.open() as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < STEAL_FIELD + 2 or fields[0] != "cpu":
        return None
    try:
        ticks = [int(v) for v in fields[1 : STEAL_FIELD + 2]]
    except ValueError:
        return None
    return CpuTimes(steal=ticks[STEAL_FIELD], total=sum(ticks))


def steal_share(before: CpuTimes | None, after: CpuTimes | None) -> float | None:
    """The share of all CPU time between two readings that the host took (0 to 1); None when either reading is
    missing or no tick passed between them (a run shorter than a clock tick: the share is unknown)."""
    if before is None or after is None or after.total <= before.total:
        return None
    return max(0.0, after.steal - before.steal) / (after.total - before.total)


@dataclass
class StealLog:
    """Each timed call's steal share, per name, in call order (``shares[name]``: a float or None per call)."""

    shares: dict[str, list[float | None]] = field(default_factory=dict)

    def timed(self, name: str, fn: Callable[[], T]) -> Callable[[], T]:
        """``fn`` that records its call's share under ``name`` (a call that raises records nothing)."""

        def call() -> T:
            before = cpu_times()
            value = fn()
            self.shares.setdefault(name, []).append(steal_share(before, cpu_times()))
            return value

        return call


def low(share: float | None) -> bool:
    """Whether a run's share of stolen time was known and at most :data:`LOW_STEAL`."""
    return share is not None and share <= LOW_STEAL


def percent(share: float | None) -> str:
    """A share as the report prints it: ``12%``, or ``?`` where it is unknown."""
    return "?" if share is None else f"{100 * share:.0f}%"
