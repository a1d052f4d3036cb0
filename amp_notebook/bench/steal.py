"""Steal, the CPU time the host took from this virtual machine, around each timed run of a benchmark.

The reader is :mod:`amp_notebook.runtime.steal` (what steal is, how it is read, what it did to runs here).
:class:`StealLog` times callables and keeps each call's share, so that a benchmark can print them beside
its rounds and pick out the rounds the host left alone (:func:`low`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from amp_notebook.runtime.steal import LOW_STEAL, StealMeter

T = TypeVar("T")


@dataclass
class StealLog:
    """Each timed call's steal share, per name, in call order (``shares[name]``: a float or None per call)."""

    shares: dict[str, list[float | None]] = field(default_factory=dict)

    def timed(self, name: str, fn: Callable[[], T]) -> Callable[[], T]:
        """``fn`` that records its call's share under ``name`` (a call that raises records nothing)."""

        def call() -> T:
            meter = StealMeter()
            meter.start()
            value = fn()
            meter.stop()
            self.shares.setdefault(name, []).append(meter.share)
            return value

        return call


def low(share: float | None) -> bool:
    """Whether a run's share of stolen time was known and at most :data:`LOW_STEAL`."""
    return share is not None and share <= LOW_STEAL


def percent(share: float | None) -> str:
    """A share as the report prints it: ``12%``, or ``?`` where it is unknown."""
    return "?" if share is None else f"{100 * share:.0f}%"


__all__ = ["StealLog", "low", "percent"]
