"""Training with the reference interpreter: the oracle every backend's ``sync`` mode is checked against.

The :class:`~amp_notebook.ir.interpret.Interpreter` runs one key at a time to completion with its own
routing (no workers, no plan, no credits). This module drives it as a backend: the same
:class:`~amp_notebook.runtime.controller.Controller` as the runtime (``sync`` mode: the same seeded key
order, validation keys after each epoch's training keys, a flush after every training key), through the
same action loop (:func:`~amp_notebook.runtime.controller.carry_out`). Admitting a key runs it to
completion at once, so its completion event follows immediately; a flush updates every node; replicas
average before each epoch's validation keys, as the runtime's do.
"""

from __future__ import annotations

from typing import Any

from amp_notebook.data.batch import Dataset
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.runtime.controller import Action, Controller, Handlers, KeyInfo, carry_out


def train_reference(
    interpreter: Interpreter,
    dataset: Dataset,
    epochs: int = 1,
    seed: int = 0,
    shuffle: bool = True,
    validate: bool = True,
) -> list[dict[str, Any]]:
    """Synchronous SGD with ``interpreter``, one key at a time in the runtime's ``sync`` order; returns one
    ``{"epoch", "reports"}`` entry per epoch (each loss report tagged with its key's ``train`` and ``epoch``)."""
    controller = Controller(
        dataset, "sync", 1, epochs, seed, shuffle, validate,
        average_before_validation=bool(interpreter.graph.replica_groups),
    )  # fmt: skip
    epoch_reports: list[dict[str, Any]] = []
    current: list[dict[str, Any]] = []

    def admit(info: KeyInfo) -> list[Action]:
        for r in interpreter.run_key(info.batch, key=info.key, train=info.train):
            current.append({**r, "train": info.train, "epoch": info.epoch})
        return controller.on_key_complete(info.key)

    def flush(flush_id: int) -> list[Action]:
        interpreter.update()
        return controller.on_flush_complete(flush_id)

    def end_epoch(epoch: int) -> list[Action]:
        interpreter.end_epoch()
        epoch_reports.append({"epoch": epoch, "reports": list(current)})
        current.clear()
        return controller.on_epoch_end()

    def average() -> list[Action]:  # replicas average before each epoch's validation keys
        interpreter.average_replicas()
        return controller.on_average_complete()

    carry_out(controller.start(), Handlers(admit, flush, end_epoch, average))
    return epoch_reports


__all__ = ["train_reference"]
