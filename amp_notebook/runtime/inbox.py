"""A worker's inbox: which message it handles next, and which waiting messages join it in a bundle.

The inbox is the worker's own (one thread reads and writes it; a threaded backend drains its lock-free
mailbox into it). Two rules decide the next message:

* **priority** across directions: ``backward_first`` (the paper, appendix A) takes backward messages and
  flush updates before forward ones, so gradients return sooner (less staleness, fewer cached
  activations); ``fifo`` takes the earliest arrival of either direction. With several nodes per worker,
  strict backward-first can make the workers take turns (one drains its backward work while the other
  starves of forward work); arrival order keeps both fed (``amp-notebook bench speedup`` shows both);
  ``light_first`` takes the messages of nodes without parameters (tier 0: control flow, joins,
  activations, losses, each about a microsecond on the native engine) before those of parameterized nodes
  (tier 1: Linear, Embedding, LayerNorm), backward first within each tier. A light message often routes a
  key on to another worker, and held behind a heavy op's 100 us it leaves that worker idle; the heavy
  nodes, where gradients update parameters, still take their backward messages first.
* **order** within a direction: ``oldest_key`` takes the message whose key was admitted earliest (keys
  are numbered in admission order), so the key furthest along finishes first and its successors follow it
  down the pipeline; ``arrival`` takes messages in the order they came.

Bundles. Once the next message is chosen, the messages already waiting for the same node, direction and
port join it, up to that node's ``max_bundle`` (1: no bundling) and the worker's further ``limit`` (a
node that updates locally takes no more gradients than its next update needs), in arrival order; the
worker runs them as one call. A bundle never mixes nodes, directions or ports (replicas are different
nodes).

Each (node, direction, port) *group* keeps its waiting messages sorted by rank (the key, or the arrival
number), and each tier and direction a heap of groups ordered by their best rank (one tier unless
``light_first``). A message joins its group's
list (an append, as ranks mostly arrive in order); a group enters the heap when it gets its first
message, or again when a message with a better rank arrives or after a take left some of its messages.
A heap entry names the message that was first in its group when it was pushed (its arrival number); it
is *live* while that message is still first, and a stale one is skipped when it surfaces, so no other
book is kept. Taking pops the best group and cuts its first messages off as the bundle. So heap work is
paid per bundle, not per message. A lone message is a bundle of one: the same path, with its shortest
branch first.

``max_bundle`` is a live knob (:class:`~amp_notebook.runtime.knobs.Knobs`): the inbox reads the per-node
caps in place at every take, so a changed cap applies to the next bundle, messages already waiting
included.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Sequence
from heapq import heappop, heappush

from amp_notebook.errors import SettingError
from amp_notebook.ir.message import FWD, Message
from amp_notebook.runtime.knobs import Knobs

PRIORITIES = ("backward_first", "fifo", "light_first")
ORDERS = ("oldest_key", "arrival", "largest_bundle")

Group = tuple[int, int, str]  # (node, direction, port)
Entry = tuple[int, int, Group]  # (rank, entry number, group)


class Inbox:
    """One worker's waiting messages (module docstring). Owns them, grouped by node, direction and port, and the
    order they leave in; used by the one thread that steps the worker; never touches a mailbox, a thread or a
    message's payload, and reads ``max_bundle`` from the session's knobs in place."""

    __slots__ = ("_by_key", "_fifo", "_groups", "_heaps", "_largest", "_seq", "_tier", "limit", "max_bundle", "size")

    def __init__(
        self,
        knobs: Knobs,
        priority: str = "backward_first",
        order: str = "oldest_key",
        limit: Callable[[int, int], int] | None = None,
        parameterized: Sequence[bool] = (),
    ) -> None:
        if priority not in PRIORITIES:
            raise SettingError("priority", f"priority: expected one of {PRIORITIES}, got {priority!r}")
        if order not in ORDERS:
            raise SettingError("order", f"order: expected one of {ORDERS}, got {order!r}")
        self.max_bundle = knobs.max_bundle  # per node, changed in place by the knobs: read at every take
        self.limit = limit  # (node, direction) -> the cap for a node whose max_bundle is over 1
        self._fifo = priority == "fifo"
        self._by_key = order != "arrival"
        self._largest = order == "largest_bundle"
        # per tier: [forward, backward and flush updates] heaps of group entries (FWD is 0)
        tiered = priority == "light_first"
        self._heaps: tuple[tuple[list[Entry], list[Entry]], ...] = (([], []), ([], [])) if tiered else (([], []),)
        # per node: its tier (light_first: 1 for a parameterized node; a node not listed is light)
        self._tier = [int(p) for p in parameterized] if tiered else []
        self._groups: dict[Group, list[tuple[int, int, Message]]] = {}  # sorted by (rank, arrival)
        self._seq = 0
        self.size = 0  # messages waiting

    def __len__(self) -> int:
        return self.size

    def push(self, msg: Message) -> None:
        seq = self._seq = self._seq + 1
        self.size += 1
        rank = msg.key if self._by_key else seq  # flush updates have key -1 or below: first
        item = (rank, seq, msg)
        group = (msg.node, msg.direction, msg.port)
        waiting = self._groups.get(group)
        if waiting is None:
            self._groups[group] = [item]
        elif rank >= waiting[-1][0]:
            waiting.append(item)
            return
        else:
            insort(waiting, item)
            if waiting[0] is not item:
                return
        tiers = self._tier
        heaps = self._heaps[tiers[msg.node] if msg.node < len(tiers) else 0] if tiers else self._heaps[0]
        heappush(heaps[msg.direction > 0], (rank, seq, group))

    def has_work(self, allow_forward: bool = True) -> bool:
        """Whether :meth:`take` would return a bundle."""
        for fwd, bwd in self._heaps:
            if self._top(bwd) is not None or (allow_forward and self._top(fwd) is not None):
                return True
        return False

    def forward_waiting(self) -> int:
        """Forward messages waiting (held while a run is paused)."""
        return sum(len(m) for (_, direction, _), m in self._groups.items() if direction == FWD)

    def take(self, allow_forward: bool = True) -> list[Message] | None:
        """The next bundle (one message and those that join it), or None when nothing may be taken: from the
        first tier with work, backward first within it (``fifo``: the better rank of the two directions)."""
        groups = self._groups
        # the first tier with work decides; within it backward (and updates) first, or with fifo the direction
        # whose best live entry has the better rank
        for tier, (fwd, bwd) in enumerate(self._heaps):  # noqa: B007 (the loop's last tier is read below)
            heap = None
            if bwd:
                top = bwd[0]
                waiting = groups.get(top[2])
                if (waiting is not None and waiting[0][1] == top[1]) or self._top(bwd) is not None:
                    heap = bwd
            if allow_forward and fwd and (heap is None or self._fifo):
                top = fwd[0]
                waiting = groups.get(top[2])
                live = (waiting is not None and waiting[0][1] == top[1]) or self._top(fwd) is not None
                if live and (heap is None or fwd[0][0] < bwd[0][0]):
                    heap = fwd
            if heap is not None:
                break
        else:
            return None
        group = self._largest_group(heap is fwd, tier) if self._largest else heappop(heap)[2]
        waiting = groups[group]
        if len(waiting) == 1:  # a lone message: the shortest branch
            del groups[group]
            self.size -= 1
            return [waiting[0][2]]
        node = group[0]
        cap = 1
        if self.max_bundle[node] > 1:
            cap = self.max_bundle[node] if self.limit is None else self.limit(node, group[1])
        if len(waiting) <= cap:
            del groups[group]
            self.size -= len(waiting)
            return [item[2] for item in waiting]
        bundle = [item[2] for item in waiting[:cap]]
        del waiting[:cap]
        self.size -= cap
        first = waiting[0]
        heappush(heap, (first[0], first[1], group))  # live: it names the group's new first message
        return bundle

    def _largest_group(self, forward: bool, tier: int) -> Group:
        """``largest_bundle`` order: the group of the tier and direction with the most messages waiting (the
        oldest key among equals); its heap entry stays, to be skipped as stale or taken later."""
        groups, tiers = self._groups, self._tier

        def in_tier(g: Group) -> bool:
            return (tiers[g[0]] if g[0] < len(tiers) else 0) == tier

        candidates = (g for g in groups if (g[1] == FWD) == forward and in_tier(g))
        return max(candidates, key=lambda g: (len(groups[g]), -groups[g][0][0]))

    def _top(self, heap: list[Entry]) -> Entry | None:
        """The heap's first live entry (one whose message is still first in its group); stale ones are dropped."""
        groups = self._groups
        while heap:
            entry = heap[0]
            waiting = groups.get(entry[2])
            if waiting is not None and waiting[0][1] == entry[1]:
                return entry
            heappop(heap)
        return None


__all__ = ["ORDERS", "PRIORITIES", "Inbox"]
