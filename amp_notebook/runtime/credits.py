"""Credit counting: how the runtime knows a key (or a flush) is complete without asking any model.

ARCHITECTURE.md, invariant 5. Each key's count starts at the number of messages injected for it (one per
Input node). Every handled message gives up its own credit and gives one to each message it emits (an op
never changes a message's key, so they are the same key's). The key is complete when its count reaches
zero: no message of it remains anywhere. A flush (``sync``/``pipeline`` mode) is counted the same way:
its count is the number of update messages sent, and each handled update gives one up.

Order matters where workers run concurrently: the credits of emitted messages are added *before* they
are delivered, and the handled message's credit is released only after the work that must finish before
the key may complete (its node's local update: an epoch end must not average replicas mid-update). Then
another worker cannot consume an emitted message and drive the count to zero early.

The counts are shared by every worker of a backend; one lock guards them (held for a few dict updates).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from amp_notebook.ir.message import UPDATE, Message


class Credits:
    def __init__(self) -> None:
        self.keys: dict[int, int] = {}
        self.flushes: dict[int, int] = {}
        self.lock = threading.Lock()

    def inject_key(self, key: int, n: int) -> None:
        with self.lock:
            self.keys[key] = self.keys.get(key, 0) + n

    def inject_flush(self, flush_id: int, n: int) -> None:
        with self.lock:
            self.flushes[flush_id] = self.flushes.get(flush_id, 0) + n

    def add(self, outs: Sequence[Message]) -> None:
        """Credits for emitted messages that are about to be delivered before their bundle is released."""
        keys = self.keys
        with self.lock:
            for m in outs:
                keys[m.key] += 1

    def release(self, bundle: Sequence[Message], outs: Sequence[Message] = ()) -> tuple[list[int], list[int]]:
        """The handled ``bundle`` gives up its credits, ``outs`` (not yet counted) get theirs; returns the keys
        and flushes that completed."""
        keys = self.keys
        done: list[int] = []
        flushed: list[int] = []
        with self.lock:
            if len(bundle) == 1 and bundle[0].direction != UPDATE:  # the common case: one message, one key
                key = bundle[0].key
                left = keys[key] + len(outs) - 1
                if left:
                    keys[key] = left
                else:
                    del keys[key]
                    done.append(key)
                return done, flushed
            for m in outs:
                keys[m.key] += 1
            for m in bundle:
                if m.direction == UPDATE:
                    flush_id = m.state["flush"]
                    left = self.flushes[flush_id] - 1
                    if left:
                        self.flushes[flush_id] = left
                    else:
                        del self.flushes[flush_id]
                        flushed.append(flush_id)  # type: ignore[arg-type]
                    continue
                left = keys[m.key] - 1
                if left:
                    keys[m.key] = left
                else:
                    del keys[m.key]
                    done.append(m.key)
        return done, flushed

    def outstanding(self) -> dict[int, int]:
        """Keys that still hold messages, with their counts (diagnosis of a stuck run)."""
        with self.lock:
            return dict(self.keys)


__all__ = ["Credits"]
