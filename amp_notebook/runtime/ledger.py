"""Completion behind one protocol: how a run knows that a key (or a flush) is done.

ARCHITECTURE.md, invariant 5: a key is complete when no message of it remains anywhere, which a ledger
decides by accounting for every message, so no model needs hand-written termination logic. The ledger has
two sides, because the code that admits keys and the code that handles messages may run in different
threads or processes:

* the **driver's side** (:class:`Ledger`), which the session talks to: before the messages that admit a
  key (or start a flush) are delivered, the session registers them (``admit_key``, ``admit_flush``); a
  backend asks it what is still in flight (``in_flight``: the watchdog's test and a stuck run's
  diagnosis).
* a **step's side** (:class:`StepLedger`), which :meth:`~amp_notebook.runtime.worker.Worker.step` talks
  to: messages the step sends on before its bundle is released (``send_on``: when a local update follows,
  the outgoing messages leave first), then the bundle's release with whatever it emitted and did not send
  yet (``release``), which returns the keys and flushes that it completed, when this side can tell (None
  when nothing completed: the common case costs no allocation).

Two rules hold on both sides, whatever runs concurrently: an outgoing message is accounted for *before* it
is delivered (else another worker could handle it and complete its key early), and a bundle gives up its
own share only after the work that must finish before its keys may complete (its node's local update: an
epoch end must not average replicas mid-update).

Implementations:

* :class:`~amp_notebook.runtime.credits.Credits` counts messages in one process (threads, the simulator):
  one object is both sides, a release that brings a key's count to zero returns the key, and the backend
  hands it to the session.
* Weighted credit recovery (:mod:`~amp_notebook.runtime.backends.ray_credits`) spans processes:
  :class:`~amp_notebook.runtime.backends.ray_credits.Completion` is the driver's side and each worker's
  :class:`~amp_notebook.runtime.backends.ray_credits.WeightLedger` a step's side. No worker can know that a
  key is complete, so its ``release`` returns nothing; the driver learns of completions when it absorbs
  the weights workers return.

A new engine implements one of the two (or both sides natively, as long as the rules above hold); the
session and the controller never see which.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from amp_notebook.ir.message import Message

Completed = tuple[list[int], list[int]]  # (keys, flushes) that completed, in the order they did


class Ledger(Protocol):
    """The driver's side of completion (module docstring)."""

    def admit_key(self, key: int, msgs: Sequence[Message]) -> None:
        """``msgs`` (one per Input node) admit ``key`` and are about to be delivered: account for them."""
        ...

    def admit_flush(self, flush_id: int, msgs: Sequence[Message]) -> None:
        """``msgs`` (one update per parameterized node) start flush ``flush_id``: account for them."""
        ...

    def in_flight(self) -> tuple[dict[int, float], dict[int, int]]:
        """Keys not yet complete, each with what of it is still out (messages counted, or the fraction of its
        weight), and flushes not yet complete with their updates still out."""
        ...

    def busy(self) -> bool:
        """Whether any key or flush is in flight (cheap: the watchdog asks a few times a second)."""
        ...


class StepLedger(Protocol):
    """A step's side of completion (module docstring)."""

    def send_on(self, bundle: Sequence[Message], outs: Sequence[Message]) -> None:
        """``outs``, emitted by ``bundle``, leave before the bundle is released (a local update follows)."""
        ...

    def release(self, bundle: Sequence[Message], outs: Sequence[Message]) -> Completed | None:
        """``bundle`` has been handled; ``outs`` (not yet accounted for) are what it emitted and did not send
        on. Returns the keys and flushes this completed, or None if none did (always, where this side cannot
        tell)."""
        ...


__all__ = ["Completed", "Ledger", "StepLedger"]
