"""CPU time the hypervisor took from this machine while a run went: steal, read from ``/proc/stat``.

On a virtual machine the host runs the virtual CPUs on physical cores it may share with other guests. The
time a virtual CPU was ready to run but the host ran something else is *steal*: Linux counts it in the
eighth field of the ``cpu`` line of ``/proc/stat``, in clock ticks summed over the CPUs. No process of this
machine can see or prevent it, and the load average and ``top``'s idle time hide it, yet it slows a run
directly: on a shared 2-core VM, one GG-NN epoch on 2 workers ran at 1,870 graphs/s with 29% of the CPUs'
time stolen and another at 4,920 with none, seconds apart.

:func:`cpu_times` reads the counters; :func:`steal_share` turns two readings into the share of all CPU time
between them that was stolen (steal ticks over all ticks: every CPU's user, nice, system, idle, iowait, irq,
softirq and steal time, which together make the CPUs' wall-clock time). :class:`StealMeter` reads them when
a run starts and ends (the threaded backends' ``steal_share`` in ``TrainResult.backend_stats``). Off Linux (no
``/proc/stat``) every reading is ``None`` and the share unknown, never zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
STEAL_FIELD = 7  # user nice system idle iowait irq softirq steal (guest and guest_nice are inside user and nice)
LOW_STEAL = 0.05  # at most this share stolen: the run had about the CPUs it was given


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


class StealMeter:
    """The steal share of one span: :meth:`start` as the run's clock starts, :meth:`stop` as it ends; ``share``
    is None until then, or where it is unknown."""

    def __init__(self) -> None:
        self._start: CpuTimes | None = None
        self.share: float | None = None

    def start(self) -> None:
        self._start, self.share = cpu_times(), None

    def stop(self) -> None:
        self.share = steal_share(self._start, cpu_times())


def steal_text(share: float | None) -> str | None:
    """A line for a run's summary when the host took more than :data:`LOW_STEAL` of the CPUs' time, else None."""
    if share is None or share <= LOW_STEAL:
        return None
    return (f"{share:.0%} of the CPUs' time went to the host's other work (steal, /proc/stat): this run was "
            "slower than this machine runs when its host is quiet")  # fmt: skip
