"""Credit counting: completion in one process (the :class:`~amp_notebook.runtime.ledger.Ledger` and
:class:`~amp_notebook.runtime.ledger.StepLedger` of the threaded backend and the simulator).

ARCHITECTURE.md, invariant 5. Each key's count starts at the number of messages injected for it (one per
Input node). Every handled message gives up its own credit and gives one to each message it emits (an op
never changes a message's key, so they are the same key's). The key is complete when its count reaches
zero: no message of it remains anywhere. A flush (``sync``/``pipeline`` mode) is counted the same way:
its count is the number of update messages sent, and each handled update gives one up.

Order matters where workers run concurrently (``runtime/ledger.py``): the credits of emitted messages are
added *before* they are delivered, and the handled bundle's credits are released only after the work that
must finish before its keys may complete (its node's local update). Then another worker cannot consume an
emitted message and drive the count to zero early.

The counts are shared by every worker of a backend; one lock guards them (held for a few dict updates).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from amp_notebook.ir.message import UPDATE, Message
from amp_notebook.runtime.ledger import Completed


class Credits:
    """Both sides of the ledger in one process (module docstring). Owns the counts per key and per flush and
    their lock; never knows of workers or the controller: its caller hands the completed keys on."""

    def __init__(self) -> None:
        self.keys: dict[int, int] = {}
        self.flushes: dict[int, int] = {}
        self.lock = threading.Lock()

    # ------------------------------------------------------------ the driver's side
    def admit_key(self, key: int, msgs: Sequence[Message]) -> None:
        with self.lock:
            self.keys[key] = self.keys.get(key, 0) + len(msgs)

    def admit_flush(self, flush_id: int, msgs: Sequence[Message]) -> None:
        with self.lock:
            self.flushes[flush_id] = self.flushes.get(flush_id, 0) + len(msgs)

    def in_flight(self) -> tuple[dict[int, float], dict[int, int]]:
        with self.lock:
            return dict(self.keys), dict(self.flushes)

    def busy(self) -> bool:
        return bool(self.keys) or bool(self.flushes)

    # ------------------------------------------------------------ a step's side
    def send_on(self, bundle: Sequence[Message], outs: Sequence[Message]) -> None:
        keys = self.keys
        with self.lock:
            for m in outs:
                keys[m.key] += 1

    def release(self, bundle: Sequence[Message], outs: Sequence[Message]) -> Completed | None:
        keys = self.keys
        with self.lock:
            if len(bundle) == 1 and bundle[0].direction != UPDATE:  # one key: one count moves by len(outs) - 1
                key = bundle[0].key
                left = keys[key] + len(outs) - 1
                if left:
                    keys[key] = left
                    return None
                del keys[key]
                return [key], []
            done: list[int] = []
            flushed: list[int] = []
            for m in outs:
                keys[m.key] += 1
            for m in bundle:
                if m.direction == UPDATE:
                    flush_id: int = m.state["flush"]  # type: ignore[assignment]
                    left = self.flushes[flush_id] - 1
                    if left:
                        self.flushes[flush_id] = left
                    else:
                        del self.flushes[flush_id]
                        flushed.append(flush_id)
                    continue
                left = keys[m.key] - 1
                if left:
                    keys[m.key] = left
                else:
                    del keys[m.key]
                    done.append(m.key)
        return (done, flushed) if done or flushed else None


__all__ = ["Credits"]
