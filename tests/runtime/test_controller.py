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


def lockstep(mode: str, seed: int, **settings) -> int:
    """Two controllers of the same run, one told of each completion by ``on_key_complete`` and the other of the
    same completions in batches by ``on_keys_complete``: the actions of a batch must be the per-key actions
    in order. Flushes, averages and epoch ends are answered at once; a pause and a stop come mid-run.
    Returns how many batches held more than one key."""
    rng = np.random.default_rng(seed)
    one, many = (Controller(dataset(n_train=23, n_val=5), mode, epochs=3, seed=seed, **settings) for _ in range(2))
    in_flight: list[int] = []

    def answer(actions, c: Controller) -> list:
        out, pending = [], list(actions)
        while pending:
            a = pending.pop(0)
            out.append(a)
            if isinstance(a, Admit):
                in_flight.append(a.info.key) if c is one else None
            elif isinstance(a, Flush):
                pending = c.on_flush_complete(a.flush_id) + pending
            elif isinstance(a, EpochEnd):
                pending = c.on_epoch_end() + pending
            elif not isinstance(a, Finish):  # Average
                pending = c.on_average_complete() + pending
        return out

    assert answer(one.start(), one) == answer(many.start(), many)
    multi, step = 0, 0
    while not one.finished:
        step += 1
        if step == 9:
            assert answer(one.pause(), one) == answer(many.pause(), many)
        if one.paused and (step == 12 or not in_flight):
            assert answer(one.resume(), one) == answer(many.resume(), many)
        if step == 20:
            assert answer(one.stop(), one) == answer(many.stop(), many)
        count = int(rng.integers(1, len(in_flight) + 1))
        picked = [in_flight.pop(int(rng.integers(len(in_flight)))) for _ in range(count)]
        multi += len(picked) > 1
        each = []
        for key in picked:
            each += answer(one.on_key_complete(key), one)
        assert answer(many.on_keys_complete(picked), many) == each, (mode, settings, picked)
        assert one.active == many.active and one.pending == many.pending
    assert one.finished and many.finished
    return multi


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    ("mode", "settings"),
    [("amp", {"max_active_keys": 5}), ("amp", {"max_active_keys": 3, "average_before_validation": True}),
     ("amp", {"max_active_keys": 4, "average_every": 5}), ("pipeline", {"max_active_keys": 4}),
     ("sync", {})],
)  # fmt: skip
def test_completions_in_a_batch_give_the_actions_of_the_completions_one_by_one(mode, settings, seed):
    assert lockstep(mode, seed, **settings) > 0 or mode == "sync"  # batches of several keys were tried


def test_carry_out_hands_a_run_of_admissions_to_admit_many_in_one_call():
    c = Controller(dataset(n_train=5, n_val=0), "amp", max_active_keys=3, epochs=1, shuffle=False)
    calls: list[list[int]] = []

    def admit_many(infos):
        calls.append([i.key for i in infos])
        return c.on_key_complete(infos[0].key) if infos[0].key == 0 else []  # key 0 skipped: completes at once

    def refused(*_):
        raise AssertionError("a run of admissions goes to admit_many")

    handlers = Handlers(refused, refused, lambda epoch: c.on_epoch_end(), None, admit_many)
    assert carry_out(c.start(), handlers) is False
    assert calls == [[0, 1, 2], [3]]  # key 0's follow-up (admit 3) ran after the whole run
    assert carry_out(c.on_keys_complete([1, 2, 3]), handlers) is False
    assert calls[-1] == [4]
