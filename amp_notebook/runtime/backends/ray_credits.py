"""Completion across processes: weighted credit recovery (Mattern 1989, Huang 1989).

The threaded backend counts each key's messages in one :class:`~amp_notebook.runtime.credits.Credits`
ledger behind a lock. Across processes no such ledger can be shared, and *counting* by reports is racy:
if worker A handles a message, emits one to worker B and reports "+1 -1" to the controller, while B
handles that message and reports "-1", B's report can reach the controller first (Ray orders calls per
caller and callee, not across callers) and the count would touch zero while a message is still in flight.

Weights avoid the race. Every key starts with weight 1, split among the messages injected for it. A
message carries its weight; a worker that handles a bundle adds up the weights of the bundle's messages
per key and splits that sum among what the bundle emits for the key:

* the outgoing messages (each gets a share before it is sent);
* a loss report the bundle made for the key (its share travels to the controller *with* the report, so
  the controller cannot see the key complete before it has the key's loss);
* when the step applies a local update before releasing the bundle (``Worker.step``: messages go on first,
  then the update), the bundle keeps one share until the update is done, so the key cannot complete while
  its gradients are being applied (invariant 5 and the epoch-end replica averaging rely on it).

Whatever has no successor (a message that emits nothing, the shares above) is *returned* to the
controller, batched per worker. Weight is conserved: the weights of all messages in flight plus the weight
returned always sum to 1, and every message in flight holds a positive weight. So the returned weight of
a key reaches exactly 1 when, and only when, no message of it remains anywhere, whatever order the
returns arrive in. No count can be reordered into a false zero, because nothing is ever subtracted.

Weights are exact dyadic rationals ``num / 2**exp`` with Python integers, so a split never runs out of
precision and the controller's test is exact: splitting ``w`` into ``n`` parts shifts ``num`` left by
``ceil(log2 n)`` bits and gives every part ``num // n`` (the first also the remainder): each part is
positive and they add up to ``w``. Exponents grow by that many bits per fan-out along a causal path (an
RNN of length 9: about 9 bits), so the integers stay small.

Flushes need no weights: an update message emits nothing, so each handled update is returned as a count
of one, and the flush is complete when all its update messages have come back.

:class:`WeightLedger` is a worker's side, the :class:`~amp_notebook.runtime.ledger.StepLedger` that
:meth:`Worker.step` is given; :class:`Completion` is the controller's side, the run's
:class:`~amp_notebook.runtime.ledger.Ledger` (``runtime/ledger.py`` argues the split).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from amp_notebook.ir.message import UPDATE, Message
from amp_notebook.runtime.ledger import Completed

Weight = tuple[int, int]  # (num, exp): the value num / 2**exp
ONE: Weight = (1, 0)
ZERO: Weight = (0, 0)


def split(weight: Weight, n: int) -> list[Weight]:
    """``weight`` in ``n`` positive parts that add up to it exactly."""
    if n < 1:
        raise ValueError(f"split: expected at least one part, got {n}")
    num, exp = weight
    if n == 1:
        return [weight]
    shift = (n - 1).bit_length()  # 2**shift >= n, so every part is at least 1 unit
    num <<= shift
    exp += shift
    part, rest = divmod(num, n)
    return [(part + rest, exp)] + [(part, exp)] * (n - 1)


def plus(a: Weight, b: Weight) -> Weight:
    """The exact sum of two weights."""
    (na, ea), (nb, eb) = a, b
    if ea < eb:
        na <<= eb - ea
        ea = eb
    elif eb < ea:
        nb <<= ea - eb
    num = na + nb
    while ea and not num & 1:  # keep the integers small: strip common factors of two
        num >>= 1
        ea -= 1
    return num, ea


def is_one(weight: Weight) -> bool:
    num, exp = weight
    return num == 1 << exp


class WeightLedger:
    """A worker's weights: of the messages it holds, of the bundle in hand, and returned but not yet shipped.

    The step side of the ledger (:class:`~amp_notebook.runtime.ledger.StepLedger`): ``send_on`` and
    ``release`` take the bundle in hand's weights and split them among what it emitted; completion is
    decided by the controller, so ``release`` returns no keys. ``reports`` is the worker's report queue:
    reports a bundle made are moved here with their shares. ``ready`` (an Event) is set whenever something
    was returned, for whoever ships returns. The mail thread ``hold``s arriving messages, the step thread
    steps, another ships (``take``): a lock guards what the last two share.
    """

    def __init__(self, reports: deque[tuple[int, dict[str, Any]]], ready: threading.Event | None = None) -> None:
        self.weights: dict[int, Weight] = {}  # id(message) -> weight, for messages held by this worker
        self.held: dict[int, Weight] = {}  # key -> weight of the bundle in hand
        self._in_hand = False  # whether the bundle in hand has given its weights to `held`
        self._reports = reports
        self._ready = ready
        self._lock = threading.Lock()
        self._returned: dict[int, Weight] = {}
        self._flushes: dict[int, int] = {}
        self._shipped_reports: list[tuple[int, dict[str, Any]]] = []

    def hold(self, msg: Message, weight: Weight) -> None:
        """A message that arrived (or that this worker sent itself) and waits in its inbox."""
        if msg.direction != UPDATE:
            self.weights[id(msg)] = weight

    def weight_of(self, msg: Message) -> Weight:
        """Give up the weight of a message that leaves this worker."""
        return self.weights.pop(id(msg), ZERO)

    def _take_in_hand(self, bundle: Sequence[Message]) -> None:
        """The bundle being handled: its weights, per key, become the weight in hand."""
        held = self.held
        for m in bundle:
            if m.direction == UPDATE:
                continue
            w = self.weights.pop(id(m))
            key = m.key
            held[key] = plus(held[key], w) if key in held else w
        self._in_hand = True

    def send_on(self, bundle: Sequence[Message], outs: Sequence[Message]) -> None:
        """Outgoing messages leave before a local update: they get their shares, the bundle keeps one."""
        if not self._in_hand:
            self._take_in_hand(bundle)
        self._distribute(outs, keep=True)

    def release(self, bundle: Sequence[Message], outs: Sequence[Message]) -> Completed | None:
        """The bundle is done: ``outs`` get their shares, the rest is returned; handled updates count for
        their flush. Completion is the controller's to detect: no keys or flushes are returned here."""
        if not self._in_hand:
            self._take_in_hand(bundle)
        self._in_hand = False
        flushes = [m.state["flush"] for m in bundle if m.direction == UPDATE]
        self._distribute(outs, keep=False)
        if flushes:
            with self._lock:
                for fid in flushes:
                    self._flushes[fid] = self._flushes.get(fid, 0) + 1  # type: ignore[index]
            if self._ready is not None:
                self._ready.set()
        return None

    def _distribute(self, outs: Sequence[Message], keep: bool) -> None:
        by_key: dict[int, list[Message]] = {}
        for m in outs:
            by_key.setdefault(m.key, []).append(m)
        reports = []
        while self._reports:
            reports.append(self._reports.popleft())
        reported = {r["key"] for _, r in reports}
        returned: list[tuple[int, Weight]] = []
        kept: dict[int, Weight] = {}
        for key, w in self.held.items():
            mine = by_key.get(key, ())
            to_report = key in reported
            n = len(mine) + to_report + keep
            if n == 0:
                returned.append((key, w))
                continue
            parts = split(w, n)
            for m, part in zip(mine, parts, strict=False):
                self.weights[id(m)] = part
            if to_report:
                returned.append((key, parts[len(mine)]))
            if keep:
                kept[key] = parts[-1]
        self.held = kept
        with self._lock:
            ret = self._returned
            for key, w in returned:
                ret[key] = plus(ret[key], w) if key in ret else w
            self._shipped_reports.extend(reports)
        if returned and self._ready is not None:
            self._ready.set()

    def has_returns(self) -> bool:
        return bool(self._returned or self._flushes)

    def take(self) -> tuple[dict[int, Weight], dict[int, int], list[tuple[int, dict[str, Any]]]]:
        """What was returned since the last take: weights per key, handled updates per flush, and the
        loss reports (whose shares are among the weights): one batch, shipped together."""
        with self._lock:
            out = self._returned, self._flushes, self._shipped_reports
            self._returned, self._flushes, self._shipped_reports = {}, {}, []
        return out


class Completion:
    """The controller's side (:class:`~amp_notebook.runtime.ledger.Ledger`): weight given to each key in flight,
    returned weight, flushes outstanding. ``admit_key`` splits the key's weight among its messages;
    whoever sends them takes each one's share with :meth:`share_of`."""

    def __init__(self) -> None:
        self.returned: dict[int, Weight] = {}
        self.flush_left: dict[int, int] = {}
        self._shares: dict[int, Weight] = {}  # id(message) -> its share, until it is sent

    def admit_key(self, key: int, msgs: Sequence[Message]) -> None:
        """Weight 1 for a key admitted as ``msgs``: split among them."""
        if key in self.returned:
            raise ValueError(f"key {key} is already in flight")
        self.returned[key] = ZERO
        for m, w in zip(msgs, split(ONE, len(msgs)), strict=True):
            self._shares[id(m)] = w

    def admit_flush(self, flush_id: int, msgs: Sequence[Message]) -> None:
        self.flush_left[flush_id] = self.flush_left.get(flush_id, 0) + len(msgs)

    def share_of(self, msg: Message) -> Weight:
        """The share an admitted message carries (zero for a flush's update: flushes are counted)."""
        return self._shares.pop(id(msg), ZERO)

    def absorb(self, returned: dict[int, Weight], flushes: dict[int, int]) -> Completed:
        """Returns from one worker; the keys and flushes that are now complete (in key / flush order)."""
        done = []
        for key in sorted(returned):
            total = plus(self.returned[key], returned[key])
            if is_one(total):
                del self.returned[key]
                done.append(key)
            else:
                self.returned[key] = total
        flushed = []
        for fid in sorted(flushes):
            left = self.flush_left[fid] - flushes[fid]
            if left:
                self.flush_left[fid] = left
            else:
                del self.flush_left[fid]
                flushed.append(fid)
        return done, flushed

    def in_flight(self) -> tuple[dict[int, float], dict[int, int]]:
        """Keys in flight with the fraction of their weight still out, and flushes with their updates out."""
        keys = {key: 1.0 - num / 2**exp for key, (num, exp) in self.returned.items()}
        return keys, dict(self.flush_left)

    def busy(self) -> bool:
        return bool(self.returned) or bool(self.flush_left)


__all__ = ["ONE", "Completion", "Weight", "WeightLedger", "is_one", "plus", "split"]
