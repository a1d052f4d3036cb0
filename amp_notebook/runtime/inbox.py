"""A worker's inbox: which message it handles next, and which waiting messages join it in a bundle.

The inbox is the worker's own (one thread reads and writes it; a threaded backend drains its lock-free
mailbox into it). Two rules decide the next message:

* **priority** across directions: ``backward_first`` (the paper, appendix A) takes backward messages and
  flush updates before forward ones, so gradients return sooner (less staleness, fewer cached
  activations); ``fifo`` takes the earliest arrival of either direction. With several nodes per worker,
  strict backward-first can make the workers take turns (one drains its backward work while the other
  starves of forward work); arrival order keeps both fed (``amp-notebook bench speedup`` shows both).
* **order** within a direction: ``oldest_key`` takes the message whose key was admitted earliest (keys
  are numbered in admission order), so the key furthest along finishes first and its successors follow it
  down the pipeline; ``arrival`` takes messages in the order they came.

Bundles. Once the next message is chosen, the messages already waiting for the same node, direction and
port join it, up to that node's ``max_bundle`` (1: no bundling), in arrival order; the worker runs them
as one call. A bundle never mixes nodes, directions or ports (replicas are different nodes).

Each direction keeps a heap of ``(rank, seq, message)`` (rank: the key, or the arrival number) and each
(node, direction, port) group a dict of its waiting messages by arrival number. A message taken as part
of a bundle leaves its heap entry behind; the entry is skipped when it surfaces (lazy deletion), so
pushing and taking cost a heap operation and a dict update each.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from itertools import islice

from amp_notebook.ir.message import FWD, Message

PRIORITIES = ("backward_first", "fifo")
ORDERS = ("oldest_key", "arrival")

Group = tuple[int, int, str]  # (node, direction, port)


class Inbox:
    __slots__ = ("_by_key", "_fifo", "_groups", "_heaps", "_seq", "_size", "_taken", "max_bundle")

    def __init__(self, max_bundle: Sequence[int] | list[int], priority: str = "backward_first",
                 order: str = "oldest_key") -> None:  # fmt: skip
        if priority not in PRIORITIES:
            raise ValueError(f"priority: expected one of {PRIORITIES}, got {priority!r}")
        if order not in ORDERS:
            raise ValueError(f"order: expected one of {ORDERS}, got {order!r}")
        self.max_bundle = max_bundle  # per node; shared with the plan, so live changes apply at the next take
        self._fifo = priority == "fifo"
        self._by_key = order == "oldest_key"
        self._heaps: tuple[list[tuple[int, int, Message]], list[tuple[int, int, Message]]] = ([], [])  # bwd, fwd
        self._groups: dict[Group, dict[int, Message]] = {}
        self._taken: set[int] = set()
        self._seq = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, msg: Message) -> None:
        seq = self._seq = self._seq + 1
        heapq.heappush(
            self._heaps[msg.direction == FWD], (msg.key if self._by_key else seq, seq, msg)
        )  # flush updates have key -1: first
        group = (msg.node, msg.direction, msg.port)
        waiting = self._groups.get(group)
        if waiting is None:
            self._groups[group] = {seq: msg}
        else:
            waiting[seq] = msg
        self._size += 1

    def has_work(self, allow_forward: bool = True) -> bool:
        """Whether :meth:`take` would return a bundle."""
        return bool(self._top(self._heaps[0]) or (allow_forward and self._top(self._heaps[1])))

    def forward_waiting(self) -> int:
        """Forward messages waiting (held while a run is paused)."""
        return sum(len(m) for (_, direction, _), m in self._groups.items() if direction == FWD)

    def take(self, allow_forward: bool = True) -> list[Message] | None:
        """The next bundle (one message and those that join it), or None when nothing may be taken."""
        bwd, fwd = self._heaps
        heap = bwd if self._top(bwd) is not None else None
        if allow_forward:
            top_fwd = self._top(fwd)
            if top_fwd is not None and (heap is None or (self._fifo and top_fwd[1] < bwd[0][1])):
                heap = fwd
        if heap is None:
            return None
        _, seq, msg = heapq.heappop(heap)
        group = (msg.node, msg.direction, msg.port)
        waiting = self._groups[group]
        del waiting[seq]
        bundle = [msg]
        cap = self.max_bundle[msg.node]
        if cap > 1 and waiting:
            joined = list(islice(waiting, cap - 1))
            for s in joined:
                bundle.append(waiting.pop(s))
            self._taken.update(joined)
        if not waiting:
            del self._groups[group]
        self._size -= len(bundle)
        return bundle

    def _top(self, heap: list[tuple[int, int, Message]]) -> tuple[int, int, Message] | None:
        """The heap's first live entry (entries of messages already taken in a bundle are dropped)."""
        taken = self._taken
        while heap:
            entry = heap[0]
            if entry[1] not in taken:
                return entry
            taken.discard(entry[1])
            heapq.heappop(heap)
        return None


__all__ = ["ORDERS", "PRIORITIES", "Inbox"]
