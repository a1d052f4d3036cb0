"""The controller as a pure state machine: events in, actions out; no threads, no messages."""

from __future__ import annotations

import numpy as np
import pytest

from amp_notebook.data import Batch, Dataset
from amp_notebook.runtime.controller import (
    Admit,
    Controller,
    EpochEnd,
    Finish,
    Flush,
    Handlers,
    carry_out,
)


def dataset(n_train: int = 6, n_val: int = 2) -> Dataset:
    def key(i: int) -> Batch:
        return Batch({"x": np.full((1, 1), float(i))}, 1)

    return Dataset("toy", [key(i) for i in range(n_train)], [key(100 + i) for i in range(n_val)])


def admitted(actions) -> list[int]:
    return [a.info.key for a in actions if isinstance(a, Admit)]


def test_amp_admits_up_to_max_active_keys_and_refills_on_each_completion():
    c = Controller(dataset(), "amp", max_active_keys=3, epochs=1, shuffle=False)
    first = c.start()
    assert admitted(first) == [0, 1, 2]  # keys are numbered in admission order
    assert c.active == {0, 1, 2}
    assert admitted(c.on_key_complete(1)) == [3]
    assert admitted(c.on_key_complete(0)) == [4]
    assert admitted(c.on_key_complete(2)) == [5]
    assert admitted(c.on_key_complete(3)) == [6]  # the first validation key follows the training keys
    assert not c.info(6).train and c.info(5).train
    for key in (4, 5, 6):
        assert not [a for a in c.on_key_complete(key) if isinstance(a, EpochEnd)]
    last = c.on_key_complete(7)
    assert last == [EpochEnd(0)]
    assert c.on_epoch_end() == [Finish()]


def test_sync_flushes_after_every_training_key_and_waits_for_the_flush():
    c = Controller(dataset(n_train=2, n_val=1), "sync", max_active_keys=8, epochs=1, shuffle=False)
    assert admitted(c.start()) == [0]  # one key at a time whatever max_active_keys says
    assert c.on_key_complete(0) == [Flush(0)]
    assert c.set_max_active_keys(4) == []  # nothing is admitted while a flush is pending
    assert admitted(c.on_flush_complete(0)) == [1]
    assert c.on_key_complete(1) == [Flush(1)]
    assert admitted(c.on_flush_complete(1)) == [2]
    assert c.on_key_complete(2) == [EpochEnd(0)]  # a validation key: no flush


def test_pipeline_fills_drains_then_flushes():
    c = Controller(dataset(n_train=5, n_val=0), "pipeline", max_active_keys=2, epochs=1, shuffle=False)
    assert admitted(c.start()) == [0, 1]
    assert c.on_key_complete(0) == []  # the group is not drained yet, and no refill mid-group
    assert c.on_key_complete(1) == [Flush(0)]
    assert admitted(c.on_flush_complete(0)) == [2, 3]


def test_events_that_do_not_fit_the_state_are_refused():
    c = Controller(dataset(), "sync", epochs=1, shuffle=False)
    c.start()
    with pytest.raises(ValueError, match="key 5 is not in flight"):
        c.on_key_complete(5)
    with pytest.raises(ValueError, match="flush 0 is not the flush in progress"):
        c.on_flush_complete(0)


def test_pause_holds_admission_and_stop_finishes_after_the_keys_in_flight():
    c = Controller(dataset(), "amp", max_active_keys=2, epochs=3, shuffle=False)
    c.start()
    c.pause()
    assert c.on_key_complete(0) == []
    assert admitted(c.resume()) == [2]
    assert c.stop() == []
    assert c.on_key_complete(1) == []
    assert c.on_key_complete(2) == [Finish()]


def test_epochs_shuffle_the_key_order_by_seed():
    orders = []
    for _ in range(2):
        c = Controller(dataset(n_train=6, n_val=0), "sync", epochs=1, seed=7)
        batches = []
        actions = c.start()
        while actions:
            a = actions.pop(0)
            if isinstance(a, Admit):
                batches.append(int(a.info.batch.inputs["x"][0, 0]))
                actions += c.on_key_complete(a.info.key)
            elif isinstance(a, Flush):
                actions += c.on_flush_complete(a.flush_id)
        orders.append(batches)
    assert orders[0] == orders[1] and sorted(orders[0]) == list(range(6)) and orders[0] != list(range(6))


def test_carry_out_runs_follow_up_actions_before_the_rest():
    c = Controller(dataset(n_train=2, n_val=0), "sync", epochs=2, shuffle=False)
    log: list[str] = []

    def admit(info):
        log.append(f"admit {info.key}")
        return c.on_key_complete(info.key)  # ran to completion at once, as the reference trainer does

    def flush(flush_id):
        log.append(f"flush {flush_id}")
        return c.on_flush_complete(flush_id)

    def end_epoch(epoch):
        log.append(f"epoch {epoch}")
        return c.on_epoch_end()

    assert carry_out(c.start(), Handlers(admit, flush, end_epoch)) is True
    assert log == ["admit 0", "flush 0", "admit 1", "flush 1", "epoch 0",
                   "admit 2", "flush 2", "admit 3", "flush 3", "epoch 1"]  # fmt: skip
