"""``Run.done``: a property that reads as a bool and, for old code, can still be called.

``Run.done`` was once a method (``run.done()``) while ``state``, ``status``, ``error`` and ``result`` were
properties. It is a property now; what it returns is a :class:`DoneFlag`, which behaves as the bool it
holds (``if run.done:``, ``not run.done``, ``run.done == True``) and, when called as the old method was,
returns that bool and warns with a ``DeprecationWarning``.
"""

from __future__ import annotations

import warnings
from typing import Any


class DoneFlag:
    """Whether a run has ended, as a bool; calling it (the old ``run.done()``) still works but warns."""

    __slots__ = ("_value",)

    def __init__(self, value: bool) -> None:
        self._value = bool(value)

    def __bool__(self) -> bool:
        return self._value

    def __call__(self) -> bool:
        warnings.warn(
            "Run.done is a property now: write `run.done`, not `run.done()`", DeprecationWarning, stacklevel=2
        )
        return self._value

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, DoneFlag):
            return self._value == other._value
        if isinstance(other, bool):
            return self._value == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._value)

    def __repr__(self) -> str:
        return repr(self._value)


__all__ = ["DoneFlag"]
