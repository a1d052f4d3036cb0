"""The ledger protocol, held to the same rules for both implementations: pure state machines, no threads.

Counting credits (:class:`~amp_notebook.runtime.credits.Credits`, one object for both sides) and weighted
credits (:class:`~amp_notebook.runtime.backends.ray_credits.Completion` on the driver's side, a
:class:`~amp_notebook.runtime.backends.ray_credits.WeightLedger` per worker on the step side) are driven
through the same random executions, written against ``runtime/ledger.py`` only: keys admitted, messages
fanning out and dying out over several workers, local updates (messages sent on before the bundle's
release), flushes. A key must complete exactly when its last message has been released, never before.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_notebook.ir.message import BWD, FWD, UPDATE, Message, State
from amp_notebook.runtime.backends.ray_credits import Completion, WeightLedger
from amp_notebook.runtime.credits import Credits
from amp_notebook.runtime.ledger import Ledger, StepLedger


class Counting:
    """Credits: the driver's side and every worker's step side are one object; releases report completions."""

    def __init__(self, workers: int) -> None:
        self.ledger = Credits()
        self.steps: list[StepLedger] = [self.ledger] * workers
        self.heard: list[tuple[Any, Any]] = []

    def driver(self) -> Ledger:
        return self.ledger

    def released(self, w: int, completed: tuple[Any, Any] | None) -> None:
        if completed is not None:
            self.heard.append(completed)

    def sent(self, src: int, dst: int, m: Message) -> None:
        """A message moved between workers: nothing to hand over (the counts are shared)."""

    def admitted(self, dst: int, m: Message) -> None:
        """An admitted message reached its worker."""

    def ship(self, w: int) -> None:
        """Nothing is shipped: completions come from releases."""


class Weighing:
    """Weighted credits: the driver's Completion and one WeightLedger per worker; completions come from the
    driver absorbing what a worker shipped."""

    def __init__(self, workers: int) -> None:
        self.completion = Completion()
        self.reports = [deque() for _ in range(workers)]
        self.steps: list[StepLedger] = [WeightLedger(self.reports[w]) for w in range(workers)]
        self.heard: list[tuple[Any, Any]] = []

    def driver(self) -> Ledger:
        return self.completion

    def released(self, w: int, completed: tuple[Any, Any] | None) -> None:
        assert completed is None, "a worker cannot know that a key is complete"

    def admitted(self, dst: int, m: Message) -> None:
        self.steps[dst].hold(m, self.completion.share_of(m))  # type: ignore[attr-defined]

    def sent(self, src: int, dst: int, m: Message) -> None:
        self.steps[dst].hold(m, self.steps[src].weight_of(m))  # type: ignore[attr-defined]

    def ship(self, w: int) -> None:
        returned, flushes, _ = self.steps[w].take()  # type: ignore[attr-defined]
        self.heard.append(self.completion.absorb(returned, flushes))


IMPLEMENTATIONS = {"credits": Counting, "weights": Weighing}


def msg(node: int, key: int, direction: int = FWD) -> Message:
    return Message(node, "in", direction, None, State(key=key))


def execute(impl: Any, seed: int, workers: int, keys: int) -> None:
    """A random execution (module docstring); checks completions against the truth as they are heard."""
    rng = random.Random(seed)
    driver = impl.driver()
    in_flight: list[tuple[int, Message]] = []
    remaining: dict[int, int] = {}
    completed: list[int] = []

    def hear() -> None:
        for done, flushed in impl.heard:
            assert not flushed
            for key in done:
                assert remaining[key] == 0, f"key {key} completed with {remaining[key]} messages in flight"
                completed.append(key)
        impl.heard.clear()

    for key in range(keys):
        msgs = [msg(0, key) for _ in range(rng.randint(1, 3))]
        driver.admit_key(key, msgs)
        remaining[key] = len(msgs)
        for m in msgs:
            dst = rng.randrange(workers)
            impl.admitted(dst, m)
            in_flight.append((dst, m))
    assert driver.busy() and set(driver.in_flight()[0]) == set(range(keys))
    while in_flight:
        w, m = in_flight.pop(rng.randrange(len(in_flight)))
        step = impl.steps[w]
        fan_out = 0 if m.node >= 6 else rng.choice((0, 1, 1, 2, 3))
        outs = [msg(m.node + 1, m.key, rng.choice((FWD, BWD))) for _ in range(fan_out)]
        remaining[m.key] += len(outs) - 1
        if outs and rng.random() < 0.3:  # a local update follows: the messages leave first
            step.send_on([m], outs)
            placed = [(rng.randrange(workers), o) for o in outs]
            for dst, o in placed:
                impl.sent(w, dst, o)
            in_flight.extend(placed)
            hear()
            assert m.key not in completed, "complete while its bundle was still in hand"
            impl.released(w, step.release([m], []))
        else:
            impl.released(w, step.release([m], outs))
            for o in outs:
                dst = rng.randrange(workers)
                impl.sent(w, dst, o)
                in_flight.append((dst, o))
        if rng.random() < 0.5:
            impl.ship(rng.randrange(workers))
        hear()
    for w in range(workers):
        impl.ship(w)
    hear()
    assert sorted(completed) == list(range(keys))
    assert not driver.busy() and driver.in_flight() == ({}, {})


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**9), workers=st.integers(1, 4), keys=st.integers(1, 6))
def test_keys_complete_exactly_when_their_last_message_is_released(name, seed, workers, keys):
    execute(IMPLEMENTATIONS[name](workers), seed, workers, keys)


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
def test_a_flush_completes_when_its_last_update_is_released(name):
    impl = IMPLEMENTATIONS[name](2)
    driver = impl.driver()
    updates = [Message(i, "", UPDATE, None, State(flush=3)) for i in range(3)]
    driver.admit_flush(3, updates)
    for m in updates:
        impl.admitted(0, m)
    assert driver.in_flight() == ({}, {3: 3}) and driver.busy()
    impl.released(0, impl.steps[0].release(updates[:2], []))
    impl.ship(0)
    assert all(flushed == [] for _, flushed in impl.heard)
    impl.heard.clear()
    impl.released(1, impl.steps[1].release(updates[2:], []))
    impl.ship(1)
    assert [list(f) for _, f in impl.heard if f] == [[3]]
    assert not driver.busy()


def test_counting_credits_report_what_is_in_flight_as_message_counts():
    credits = Credits()
    credits.admit_key(7, [msg(0, 7), msg(1, 7)])
    assert credits.in_flight() == ({7: 2}, {})
    assert credits.release([msg(0, 7)], [msg(2, 7), msg(3, 7)]) is None
    assert credits.in_flight() == ({7: 3}, {})


def test_weighted_credits_report_what_is_in_flight_as_fractions():
    completion = Completion()
    a, b = msg(0, 4), msg(1, 4)
    completion.admit_key(4, [a, b])
    ledger = WeightLedger(deque())
    ledger.hold(a, completion.share_of(a))
    ledger.release([a], [])
    completion.absorb(*ledger.take()[:2])
    assert completion.in_flight() == ({4: 0.5}, {})
    with pytest.raises(ValueError, match="already in flight"):
        completion.admit_key(4, [msg(0, 4)])
