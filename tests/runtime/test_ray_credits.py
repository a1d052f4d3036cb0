"""Weighted credit recovery (the Ray backend's completion detection) as pure state machines: no Ray.

The ledger of each worker and the controller's Completion are driven through random executions: messages
handled in random order by random workers, random fan-outs, reports and local updates, and the returns
shipped to the controller in random order and batches. A key must complete exactly when its last message
has been handled and every share has reached the controller, and never before its loss report arrives.
"""

from __future__ import annotations

import random
from collections import deque
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_notebook.ir.message import BWD, FWD, UPDATE, Message, State
from amp_notebook.runtime.backends.ray_credits import ONE, Completion, WeightLedger, is_one, plus, split


def value(w) -> Fraction:
    return Fraction(w[0], 2 ** w[1])


@given(st.integers(1, 2**40), st.integers(0, 60), st.integers(1, 50))
def test_split_gives_positive_parts_that_add_up_exactly(num, exp, n):
    parts = split((num, exp), n)
    assert len(parts) == n
    assert all(p[0] > 0 for p in parts)
    assert sum(value(p) for p in parts) == value((num, exp))


def test_plus_and_is_one():
    halves = split(ONE, 2)
    assert is_one(plus(*halves))
    thirds = split(ONE, 3)
    assert not is_one(plus(thirds[0], thirds[1]))
    assert is_one(plus(plus(thirds[0], thirds[1]), thirds[2]))
    assert split((5, 3), 1) == [(5, 3)]
    with pytest.raises(ValueError, match="at least one part"):
        split(ONE, 0)


def msg(node: int, key: int, direction: int = FWD) -> Message:
    return Message(node, "in", direction, None, State(key=key))


def run_random_execution(seed: int, workers: int, keys: int) -> None:
    """Keys fan out and die out at random over ``workers`` ledgers; returns reach the controller shuffled."""
    rng = random.Random(seed)
    reports = [deque() for _ in range(workers)]
    ledgers = [WeightLedger(reports[w]) for w in range(workers)]
    completion = Completion()
    in_flight: list[tuple[int, Message]] = []  # (worker, message)
    remaining = {}  # key -> messages in flight (the truth)
    reported: set[int] = set()
    for key in range(keys):
        n = rng.randint(1, 3)
        msgs = [msg(0, key) for _ in range(n)]
        completion.admit_key(key, msgs)
        for m in msgs:
            dst = rng.randrange(workers)
            ledgers[dst].hold(m, completion.share_of(m))
            in_flight.append((dst, m))
        remaining[key] = n
    shipped: list[tuple[dict, dict, list]] = []
    arrived_reports: set[int] = set()
    done_keys: list[int] = []
    while in_flight or shipped:
        if in_flight and (not shipped or rng.random() < 0.7):
            w, m = in_flight.pop(rng.randrange(len(in_flight)))
            ledger = ledgers[w]
            depth = m.node
            fan_out = 0 if depth >= 6 else rng.choice((0, 1, 1, 2, 3))
            outs = [msg(depth + 1, m.key, rng.choice((FWD, BWD))) for _ in range(fan_out)]
            if depth == 3 and m.key not in reported and rng.random() < 0.5:
                reports[w].append((7, {"key": m.key, "loss": 1.0, "n": 1}))
                reported.add(m.key)
            if rng.random() < 0.3:  # a local update follows: messages leave first, the bundle keeps a share
                ledger.send_on([m], outs)
                ledger.release([m], [])
            else:
                ledger.release([m], outs)
            remaining[m.key] += len(outs) - 1
            for o in outs:
                dst = rng.randrange(workers)
                if dst == w:
                    ledger.hold(o, ledger.weights.pop(id(o)))
                else:
                    ledgers[dst].hold(o, ledger.weight_of(o))
                in_flight.append((dst, o))
            if rng.random() < 0.5:
                shipped.append(ledgers[rng.randrange(workers)].take())
        else:
            returned, flushes, batch_reports = shipped.pop(rng.randrange(len(shipped)))
            arrived_reports.update(r["key"] for _, r in batch_reports)  # the driver takes reports first
            done, _ = completion.absorb(returned, flushes)
            for key in done:
                assert remaining[key] == 0, f"key {key} completed with {remaining[key]} messages in flight"
                assert key not in reported or key in arrived_reports, f"key {key} completed before its report"
                done_keys.append(key)
        if not in_flight and not shipped:
            shipped.extend(ledger.take() for ledger in ledgers)
            shipped = [s for s in shipped if s[0] or s[1] or s[2]]
    assert sorted(done_keys) == list(range(keys)), f"not every key completed: {completion.in_flight()}"
    assert not completion.returned


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**9), st.integers(1, 4), st.integers(1, 6))
def test_keys_complete_exactly_when_nothing_remains(seed, workers, keys):
    run_random_execution(seed, workers, keys)


def test_a_flush_completes_when_all_its_updates_came_back():
    completion = Completion()
    ledgers = [WeightLedger(deque()) for _ in range(2)]
    updates = [Message(i, "", UPDATE, None, State(flush=0)) for i in range(3)]
    completion.admit_flush(0, updates)
    ledgers[0].release(updates[:2], [])
    ledgers[1].release(updates[2:], [])
    assert completion.absorb(*ledgers[1].take()[:2]) == ([], [])
    assert completion.absorb(*ledgers[0].take()[:2]) == ([], [0])


def test_report_share_holds_the_key_until_the_report_arrives():
    """The loss node's worker ships its report later than another worker's final return: the key waits."""
    reports_a = deque()
    a, b = WeightLedger(reports_a), WeightLedger(deque())
    completion = Completion()
    m = msg(3, 0)
    completion.admit_key(0, [m])
    a.hold(m, completion.share_of(m))
    reports_a.append((3, {"key": 0, "loss": 0.5, "n": 10}))
    grad = msg(2, 0, BWD)
    a.release([m], [grad])
    b.hold(grad, a.weight_of(grad))
    b.release([grad], [])
    assert completion.absorb(*b.take()[:2]) == ([], []), "complete without the loss report"
    returned, flushes, reports = a.take()
    assert [r["key"] for _, r in reports] == [0]
    assert completion.absorb(returned, flushes) == ([0], [])
