"""The watchdog: a run that stops making progress stops with a diagnosis instead of hanging.

Credit counting (``credits.py``) knows, for every key in flight, how many of its messages exist somewhere.
If some do and yet no worker has handled a message for ``watchdog_s`` seconds (and the run is not paused,
which holds forward work on purpose), nothing will ever happen again: a message was lost, a worker thread
ended, or an op does not return. The threaded backend's driver checks this a few times a second while it
waits for events (:class:`Watchdog`), and at once whether every worker thread is still alive; the simulator
knows it exactly, when its event heap runs dry before the controller has finished. Both raise
:class:`StuckRunError` with the same :class:`Diagnosis`:

* the keys in flight, with how many messages of each the credits still count, and any flush in flight;
* the queue depth of every worker, and what each worker is doing (idle, inside which node's step, or its
  thread has ended);
* every node that holds state for a key: a cache or forward version waiting for the backward message
  that never came, or a join waiting for its other inputs. A lost backward message shows up as exactly
  that: the node it was for still holds the key's forward state, and nothing is queued anywhere.

The diagnosis is plain data (``as_dict()`` for ``Run.status`` and the dashboard, ``text()`` for the error
message); :func:`diagnose` builds it from what any backend can report (contexts, credit counts, queue depths),
so a backend whose workers live elsewhere (processes, actors) can gather the same facts and call it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from amp_notebook.errors import AmpError
from amp_notebook.ir.message import State
from amp_notebook.ir.ops import NodeContext
from amp_notebook.runtime.config import RunConfig
from amp_notebook.runtime.plan import Plan

DEFAULT_WATCHDOG_S = RunConfig.setting("watchdog_s").default  # longer than any single step of the models here
MAX_HELD_SHOWN = 20


class StuckRunError(AmpError, RuntimeError):
    """A run that can make no more progress (a lost message, a dead worker thread, an op that never returns);
    ``diagnosis`` says what was in flight, queued and held when it stopped."""

    def __init__(self, diagnosis: Diagnosis) -> None:
        self.diagnosis = diagnosis
        super().__init__(diagnosis.text())


@dataclass(frozen=True)
class HeldState:
    """A node that holds state for a key: what a message in flight of that key left behind."""

    node: str
    kind: str
    worker: int
    key: int | None
    what: str  # "waits for its backward message" or "join waits for its other inputs"
    states: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Diagnosis:
    """Why a run is stuck, from its state when the watchdog fired: keys and flushes still in flight, queue depths, what
    each worker is doing and which nodes hold state."""

    reason: str
    conclusion: str
    keys_in_flight: dict[int, float]  # key -> messages of it that still exist (credits), or its weight still out
    flushes_in_flight: dict[int, int]
    queue_depth: list[int]  # per worker
    workers: list[str]  # per worker: what it is doing
    held: list[HeldState]

    def text(self) -> str:
        keys = ", ".join(f"{k} ({_out(n)})" for k, n in list(self.keys_in_flight.items())[:10])
        more = len(self.keys_in_flight) - 10
        lines = [
            f"the run is stuck: {self.reason}.",
            f"  {self.conclusion}",
            f"  keys in flight: {keys or 'none'}" + (f" and {more} more" if more > 0 else ""),
        ]
        if self.flushes_in_flight:
            lines.append(f"  flushes in flight: {self.flushes_in_flight}")
        depths = ", ".join(f"worker {w}: {d}" for w, d in enumerate(self.queue_depth))
        lines.append(f"  queued messages: {depths}")
        lines += [f"  worker {w}: {what}" for w, what in enumerate(self.workers)]
        for h in self.held[:MAX_HELD_SHOWN]:
            shown = ", ".join(h.states[:3]) + (f" and {len(h.states) - 3} more" if len(h.states) > 3 else "")
            lines.append(f"  {h.kind} {h.node!r} (worker {h.worker}) holds key {h.key}: {h.what} [{shown}]")
        if len(self.held) > MAX_HELD_SHOWN:
            lines.append(f"  ... and {len(self.held) - MAX_HELD_SHOWN} more nodes holding state")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (keys of dicts become strings)."""
        data = asdict(self)
        data["keys_in_flight"] = {str(k): v for k, v in self.keys_in_flight.items()}
        data["flushes_in_flight"] = {str(k): v for k, v in self.flushes_in_flight.items()}
        return data


def _out(n: float) -> str:
    """What of a key is still out: a count of messages (credits) or a fraction of its weight (weighted credits)."""
    if isinstance(n, int):
        return f"{n} message{'s' if n != 1 else ''}"
    return f"{n:.3g} of its weight out"


def diagnose(
    reason: str,
    plan: Plan,
    contexts: Sequence[NodeContext],
    keys_in_flight: dict[int, float],
    flushes_in_flight: dict[int, int],
    queue_depth: list[int],
    workers: list[str],
    held: list[HeldState] | None = None,
) -> Diagnosis:
    """What was in flight, queued and held; ``workers`` describes each worker (``"idle"`` when it is). ``held``
    is read from ``contexts`` unless given (workers elsewhere report their own)."""
    held = held_states(plan, contexts) if held is None else held
    lost = not any(queue_depth) and all(w == "idle" for w in workers)
    if any(w.startswith("thread ended") for w in workers):
        conclusion = "a worker thread ended without reporting an error (a bug in the runtime): its work is lost"
    elif any(w.startswith("inside") for w in workers):
        conclusion = (
            "a worker is still inside one step: an op that does not return, or one slower than watchdog_s "
            "(raise watchdog_s for such a model, or pass watchdog_s=None)"
        )
    elif lost and keys_in_flight:
        waiting = [h for h in held if h.key in keys_in_flight and h.what.startswith("waits for its backward")]
        conclusion = "nothing is queued and no worker is busy, yet the credits count messages: a message was lost"
        if waiting:  # the lost message was for the node nearest the loss; those before it wait on that one
            order = {name: i for i, name in enumerate(plan.graph.topological_order())}
            h = max(waiting, key=lambda h: order.get(h.node, -1))
            conclusion += f"; {h.kind} {h.node!r} still waits for key {h.key}'s backward message"
    elif any(queue_depth):
        conclusion = "messages are queued but no worker takes them (a worker that stopped taking work)"
    else:
        conclusion = "nothing is queued and nothing is held"
    return Diagnosis(
        reason, conclusion, dict(keys_in_flight), dict(flushes_in_flight), list(queue_depth), list(workers), held
    )


def held_states(plan: Plan, contexts: Sequence[NodeContext]) -> list[HeldState]:
    """Every (node, key) with cached forward state, a forward version or a waiting join, in node order."""
    found: list[HeldState] = []
    for i, ctx in enumerate(contexts):
        by_key: dict[tuple[int | None, str], list[str]] = {}
        backward = [*_snapshot(ctx.cache), *_snapshot(ctx.fwd_version)]
        joins = _snapshot(ctx.joins)
        for what, entries in (("waits for its backward message", backward), ("join waits for its other inputs", joins)):
            for entry in entries:
                states = by_key.setdefault((_key_of(entry), what), [])
                text = repr(entry)
                if text not in states:
                    states.append(text)
        for (key, what), states in by_key.items():
            found.append(HeldState(plan.names[i], type(plan.ops[i]).__name__, plan.owner[i], key, what, states))
    return found


def _snapshot(d: dict[Any, Any]) -> list[Any]:
    """The keys of a dict another thread may be changing (a stuck run's are still)."""
    for _ in range(10):
        try:
            return list(d)
        except RuntimeError:  # changed size during iteration: try again
            continue
    return []


def _key_of(entry: Any) -> int | None:
    """The key of a cache entry: a State's, or the first element of a join's match tuple."""
    if isinstance(entry, State):
        return entry.get("key")  # type: ignore[return-value]
    if isinstance(entry, tuple) and entry and isinstance(entry[0], int):
        return entry[0]
    return None


class Watchdog:
    """Progress tracking for a driver that wakes every ``tick_s``: :meth:`stuck` is True once no message has
    been handled for ``timeout_s`` while messages are in flight and the run is not paused."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = float(RunConfig.setting("watchdog_s").check_each(timeout_s))
        self.tick_s = min(0.25, self.timeout_s / 4)
        self._progress = -1
        self._since = 0.0

    def stuck(self, progress: int, in_flight: bool, paused: bool, now: float) -> bool:
        if progress != self._progress or not in_flight or paused:
            self._progress = progress
            self._since = now
            return False
        return now - self._since >= self.timeout_s

    def idle_s(self, now: float) -> float:
        return now - self._since


__all__ = ["DEFAULT_WATCHDOG_S", "Diagnosis", "HeldState", "StuckRunError", "Watchdog", "diagnose", "held_states"]
