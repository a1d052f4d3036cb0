"""The live knobs of a run: the settings that may change while it goes, in one object the session owns.

A run's settings are fixed when it starts, except four that a live :class:`~amp_notebook.runtime.run.Run`
(and the dashboard's sliders) may turn:

* ``max_active_keys``: keys in flight at most (the controller admits by it);
* ``min_update_frequency``: per node, the gradients it holds before a local update (``amp`` mode);
* ``max_bundle``: per node, the waiting messages it runs as one call;
* ``paused``: workers take no new forward message (backward work and updates drain).

Everything else about a compiled graph (routes, owners, optimizers) lives in the immutable
:class:`~amp_notebook.runtime.plan.Plan`; the knobs start from what the plan and the run's settings say.

Who reads, who writes. Writers call the ``set_*`` methods (a live Run, on the driver thread for the
per-node thresholds and ``max_active_keys``, on the caller's thread for ``paused``). Workers in the same
process read the values in place on their hot path: ``min_update_frequency`` and ``max_bundle`` are lists
whose items are replaced (never the lists themselves), so a worker or inbox that holds a list sees each
change at its next read, without a lock (an item assignment is atomic under the GIL). ``paused`` is a plain
attribute, read before each take. Anything that cannot read them in place (a worker in another process, a
native engine with its own copy) *listens*: :meth:`Knobs.subscribe` registers a callable that is told of
every change, after the value is in place, on the thread that made it. The Ray backend mirrors each change
to its actors this way; the threaded backend listens for ``paused`` to wake sleeping workers at a resume.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class KnobChange:
    """One change: which knob, the nodes it concerns (per-node knobs; empty otherwise) and the new value."""

    knob: str
    nodes: tuple[int, ...]
    value: int | bool


Listener = Callable[[KnobChange], None]


class Knobs:
    """A run's live knobs (module docstring). Owns the values; never validates a user's input (the Run does,
    naming nodes) and never touches a worker: listeners do."""

    __slots__ = ("_listeners", "max_active_keys", "max_bundle", "min_update_frequency", "paused")

    def __init__(
        self,
        max_active_keys: int,
        min_update_frequency: Sequence[int],
        max_bundle: Sequence[int] | None = None,
        paused: bool = False,
    ) -> None:
        self.max_active_keys = max_active_keys
        self.min_update_frequency: list[int] = list(min_update_frequency)
        self.max_bundle: list[int] = list(max_bundle) if max_bundle is not None else [1] * len(min_update_frequency)
        if len(self.max_bundle) != len(self.min_update_frequency):
            raise ValueError(
                f"Knobs: {len(self.min_update_frequency)} min_update_frequency values but {len(self.max_bundle)} "
                "max_bundle values; give one per node"
            )
        self.paused = paused
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        """Tell ``listener`` of every later change (after the value is in place, on the changing thread)."""
        self._listeners.append(listener)

    def set_max_active_keys(self, k: int) -> None:
        self.max_active_keys = k
        self._tell(KnobChange("max_active_keys", (), k))

    def set_min_update_frequency(self, nodes: Sequence[int], m: int) -> None:
        thresholds = self.min_update_frequency
        for i in nodes:
            thresholds[i] = m
        self._tell(KnobChange("min_update_frequency", tuple(nodes), m))

    def set_max_bundle(self, nodes: Sequence[int], m: int) -> None:
        caps = self.max_bundle
        for i in nodes:
            caps[i] = m
        self._tell(KnobChange("max_bundle", tuple(nodes), m))

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        self._tell(KnobChange("paused", (), paused))

    def values(self) -> dict[str, object]:
        """Every knob's value now (copies of the per-node lists): what a worker elsewhere starts from."""
        return {
            "max_active_keys": self.max_active_keys,
            "min_update_frequency": list(self.min_update_frequency),
            "max_bundle": list(self.max_bundle),
            "paused": self.paused,
        }

    def _tell(self, change: KnobChange) -> None:
        for listener in self._listeners:
            listener(change)


__all__ = ["KnobChange", "Knobs", "Listener"]
