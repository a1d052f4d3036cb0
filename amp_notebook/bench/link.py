"""How far apart the machine's CPUs were around each timed run of a benchmark: a cache line's round trip.

Why: workers on different CPUs hand each other messages, and every cache line of a message, of its payload and
of the locks on the way moves from one CPU's cache to the other's. On a virtual machine the host decides where
the guest's CPUs run, and may move them, without the guest seeing it in steal or in its load average. On the
2-CPU VM this was written on, the round trip flipped between about 80 ns and 400 ns, for seconds to minutes at
a time; the GG-NN on 2 workers ran at 1.6x its 1-worker throughput with the near link and at 1.1-1.2x with the
far one, in 25 paired rounds, with 0% steal throughout.

The reader is the native engine's ``core_round_trip_ns`` (``src/cores.h``: two threads pinned to the first
two CPUs the process may use pass one line back and forth; the median of 9 batches of 2,000 round trips, about
5 ms in all). :class:`LinkLog` times callables and keeps the round trip measured just before and just after
each call. A call counts as *near* when both are known and at most ``NEAR_FACTOR`` times the fastest round
trip of the whole log: the links a benchmark measured are compared with the best this machine gave it, not
with a figure from another machine. Where the engine is not built, or the process may use only one CPU, the
round trip is unknown and nothing is selected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

NEAR_FACTOR = 2.0  # a run's links count as near when at most this many times the fastest round trip measured


def round_trip_ns() -> float | None:
    """A cache line's round trip between the first two CPUs this process may use, in ns (module docstring), or
    None where it cannot be measured (the native engine is not built, one CPU, or a CPU was busy too long)."""
    from amp_notebook import engine

    try:
        value = float(engine.native().core_round_trip_ns())
    except engine.EngineUnavailableError:
        return None
    return value if math.isfinite(value) and value > 0 else None


@dataclass
class LinkLog:
    """The round trip just before and just after each timed call, per name, in call order."""

    trips: dict[str, list[tuple[float | None, float | None]]] = field(default_factory=dict)
    measure: Callable[[], float | None] | None = None  # None: round_trip_ns (tests give fakes)

    def timed(self, name: str, fn: Callable[[], T]) -> Callable[[], T]:
        """``fn`` that records the round trips around its call under ``name`` (a call that raises records
        nothing)."""

        measure = self.measure or (lambda: round_trip_ns())  # looked up at each call

        def call() -> T:
            before = measure()
            value = fn()
            self.trips.setdefault(name, []).append((before, measure()))
            return value

        return call

    def fastest(self) -> float | None:
        """The fastest round trip of every call so far (None when none was known)."""
        known = [v for runs in self.trips.values() for pair in runs for v in pair if v is not None]
        return min(known) if known else None

    def near(self, name: str) -> list[bool]:
        """Per call under ``name``: whether its links were near (module docstring)."""
        best = self.fastest()
        return [near(pair, best) for pair in self.trips.get(name, [])]


def near(pair: tuple[float | None, float | None], fastest: float | None) -> bool:
    """Whether a call's round trips (before, after) were both known and within ``NEAR_FACTOR`` of ``fastest``."""
    if fastest is None or any(v is None for v in pair):
        return False
    return max(v for v in pair if v is not None) <= NEAR_FACTOR * fastest


def span(pair: tuple[float | None, float | None]) -> str:
    """A call's round trips as the report prints them: ``82/85``, ``?`` for an unknown one."""
    return "/".join("?" if v is None else f"{v:.0f}" for v in pair)


__all__ = ["NEAR_FACTOR", "LinkLog", "near", "round_trip_ns", "span"]
