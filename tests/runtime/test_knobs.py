"""The live knobs: one object the session owns, values changed in place, listeners told after each change."""

from __future__ import annotations

import pytest

from amp_notebook import models
from amp_notebook.data import load_digits_dataset
from amp_notebook.runtime.knobs import KnobChange, Knobs
from amp_notebook.runtime.plan import Plan
from amp_notebook.runtime.session import RunConfig, Session


def test_changes_are_made_in_place_then_told_to_every_listener_in_order():
    knobs = Knobs(4, [1, 2, 3])
    thresholds, caps = knobs.min_update_frequency, knobs.max_bundle
    heard: list[tuple[str, KnobChange, list[int], list[int], bool]] = []
    for name in ("a", "b"):

        def listen(c: KnobChange, name: str = name) -> None:
            heard.append((name, c, list(knobs.min_update_frequency), list(knobs.max_bundle), knobs.paused))

        knobs.subscribe(listen)
    knobs.set_min_update_frequency([0, 2], 5)
    knobs.set_max_bundle([1], 8)
    knobs.set_paused(True)
    knobs.set_max_active_keys(7)
    assert knobs.min_update_frequency is thresholds and thresholds == [5, 2, 5]  # the same list: readers hold it
    assert knobs.max_bundle is caps and caps == [1, 8, 1]
    assert knobs.paused and knobs.max_active_keys == 7
    assert [(name, c) for name, c, *_ in heard] == [
        ("a", KnobChange("min_update_frequency", (0, 2), 5)), ("b", KnobChange("min_update_frequency", (0, 2), 5)),
        ("a", KnobChange("max_bundle", (1,), 8)), ("b", KnobChange("max_bundle", (1,), 8)),
        ("a", KnobChange("paused", (), True)), ("b", KnobChange("paused", (), True)),
        ("a", KnobChange("max_active_keys", (), 7)), ("b", KnobChange("max_active_keys", (), 7)),
    ]  # fmt: skip
    # each listener saw the value already in place
    assert heard[0][2] == [5, 2, 5] and heard[2][3] == [1, 8, 1] and heard[4][4] is True


def test_values_are_copies_and_lengths_must_agree():
    knobs = Knobs(2, [1, 3], [4, 1])
    values = knobs.values()
    assert values == {"max_active_keys": 2, "min_update_frequency": [1, 3], "max_bundle": [4, 1], "paused": False}
    values["max_bundle"][0] = 99
    assert knobs.max_bundle == [4, 1]
    assert Knobs(1, [2, 2]).max_bundle == [1, 1]
    with pytest.raises(ValueError, match="one per node"):
        Knobs(1, [1, 1], [1])


def test_a_session_starts_its_knobs_from_the_plan_and_settings_and_its_plan_is_frozen():
    g = models.mlp(input_width=64, hidden=8)
    g.nodes["linear1"].min_update_frequency = 3
    config = RunConfig(workers=2, max_active_keys=5, min_update_frequency=2, max_bundle={"linear2": 4})
    session = Session(g, load_digits_dataset(batch_size=100), config)
    plan, knobs = session.plan, session.knobs
    assert isinstance(plan, Plan)
    assert knobs.max_active_keys == 5
    assert knobs.min_update_frequency[plan.index["linear1"]] == 3  # the node's own
    assert knobs.min_update_frequency[plan.index["linear2"]] == 2  # the run's
    assert knobs.max_bundle == [4 if n == "linear2" else 1 for n in plan.names]
    assert all(w.knobs is knobs for w in session.workers)
    with pytest.raises(AttributeError):
        plan.owner = (0,) * len(plan.names)  # type: ignore[misc]
    assert isinstance(plan.min_update_frequency, tuple) and isinstance(plan.ops, tuple)
    session.controller.start()
    session.set_max_active_keys(6)
    assert knobs.max_active_keys == 6 and session.controller.max_active_keys == 6
