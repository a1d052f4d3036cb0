"""The admission gate (``src/engine.h``): in ``amp`` mode the controller admits a few keys beyond
``max_active_keys`` and the native engine keeps at most ``max_active_keys`` in flight, holding the rest in
admission order until keys complete; a worker whose step completed keys lets held keys in.

* the engine alone, its workers not started: the limit, raising it, opening it, held keys going in a batch at a
  time, and ``busy`` counting held keys;
* the controller: how many keys it admits ahead, in which modes, and what ``in_flight`` reports;
* runs: every key completes, the keys in flight never exceeded the limit, the gate held keys, and a sync run
  has no gate.
"""

from __future__ import annotations

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.engine.assemble import assemble
from amp_notebook.errors import SettingError
from amp_notebook.runtime.config import RunConfig
from amp_notebook.runtime.controller import Admit, Controller
from amp_notebook.runtime.launch import build_session
from amp_notebook.runtime.train import train
from tests.conftest import digits_dataset


def idle_engine(batch_size: int = 10):
    """An assembled engine whose workers never start, and the batches of its data."""
    data = digits_dataset(batch_size=batch_size)
    session, _ = build_session(models.mlp(input_width=64, hidden=8), data, RunConfig(workers=1, engine="native"))
    return assemble(session), data.train, len(session.plan.inputs)


def keys_of(batches, first: int = 0):
    return [(first + i, True, b.inputs, b.fields, b.size) for i, b in enumerate(batches)]


def test_the_gate_lets_in_as_many_keys_as_its_limit_and_holds_the_rest_in_order():
    engine, batches, n_inputs = idle_engine()
    engine.set_key_limit(2)
    assert engine.admit_many(keys_of(batches[:5])) == [-1] * 5  # all admitted: two in flight, three held
    assert engine.in_flight()[0] == {0: n_inputs, 1: n_inputs}
    assert sum(engine.queued()) == 2 * n_inputs  # only their messages were posted
    assert (engine.held_keys(), engine.keys_held(), engine.peak_keys()) == (3, 3, 2)
    assert engine.busy()
    engine.set_key_limit(4)  # a larger limit lets the oldest held keys in at once
    assert sorted(engine.in_flight()[0]) == [0, 1, 2, 3]
    assert engine.held_keys() == 1
    engine.admit_many(keys_of(batches[5:6], first=5))  # a later key queues behind the held one
    assert sorted(engine.in_flight()[0]) == [0, 1, 2, 3] and engine.held_keys() == 2
    engine.set_key_limit(0)  # open: everything goes in
    assert sorted(engine.in_flight()[0]) == [0, 1, 2, 3, 4, 5]
    assert (engine.held_keys(), engine.keys_held(), engine.peak_keys()) == (0, 4, 6)
    assert sum(engine.queued()) == 6 * n_inputs


def test_held_keys_go_in_a_batch_at_a_time():
    engine, batches, _ = idle_engine()
    engine.set_key_limit(4, 3)
    engine.admit_many(keys_of(batches[:6]))
    assert sorted(engine.in_flight()[0]) == [0, 1, 2, 3] and engine.held_keys() == 2
    engine.set_key_limit(5, 3)  # room for one: not a batch (of 3, or of the 2 held), so none goes in
    assert sorted(engine.in_flight()[0]) == [0, 1, 2, 3] and engine.held_keys() == 2
    engine.set_key_limit(6, 3)  # room for the 2 held: fewer than a batch are held, so they go in together
    assert sorted(engine.in_flight()[0]) == [0, 1, 2, 3, 4, 5] and engine.held_keys() == 0


def test_without_a_limit_every_admitted_key_goes_in_at_once():
    engine, batches, _ = idle_engine()
    engine.admit_many(keys_of(batches[:3]))
    assert sorted(engine.in_flight()[0]) == [0, 1, 2]
    assert (engine.held_keys(), engine.keys_held()) == (0, 0)


def test_a_bad_limit_or_batch_is_refused():
    engine, _, _ = idle_engine()
    with pytest.raises(ValueError, match=r"a number of keys >= 0 \(0: no gate\)"):
        engine.set_key_limit(-1)
    for batch in (0, 5):
        with pytest.raises(ValueError, match=r"a batch at a time, 1 <= batch <= limit"):
            engine.set_key_limit(4, batch)


def test_the_controller_admits_ahead_only_in_amp_mode_and_reports_at_most_the_limit_in_flight():
    data = digits_dataset(batch_size=10)
    for mode, admitted in (("amp", 5), ("sync", 1), ("pipeline", 3)):
        c = Controller(data, mode=mode, max_active_keys=3, validate=False)
        c.admit_ahead(2)
        actions = c.start()
        assert sum(isinstance(a, Admit) for a in actions) == admitted, mode
        assert c.in_flight() == min(admitted, 1 if mode == "sync" else 3), mode
    with pytest.raises(SettingError, match=r"admit_ahead: expected an int >= 0, got -1"):
        Controller(data).admit_ahead(-1)


@pytest.mark.parametrize("workers", [1, 2])
def test_an_amp_run_keeps_at_most_max_active_keys_in_flight_and_the_gate_holds_the_others(workers: int):
    data = digits_dataset(batch_size=10)
    result = train(models.mlp(input_width=64, hidden=8), data, engine="native", mode="amp", max_active_keys=3,
                   workers=workers, epochs=2, validate=True)  # fmt: skip
    gate = result.backend_stats["admission"]
    assert 1 <= gate["peak_keys_in_flight"] <= 3
    assert gate["keys_held"] > 0  # admitted ahead, held, then let in by the workers
    assert result.train_instances == 2 * sum(b.size for b in data.train)
    assert result.session.keys_done == 2 * (len(data.train) + len(data.val))
    assert len(result.history) == 2 and all(np.isfinite(e.train_loss) for e in result.history)


def test_a_sync_run_has_no_gate():
    data = digits_dataset(batch_size=10)
    result = train(models.mlp(input_width=64, hidden=8), data, engine="native", mode="sync", workers=1, epochs=1)
    assert "admission" not in result.backend_stats
