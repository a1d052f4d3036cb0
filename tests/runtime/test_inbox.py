"""The worker's inbox: priority across directions, order within one, and which messages form a bundle."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amp_notebook.ir.message import BWD, FWD, UPDATE, Message, State
from amp_notebook.runtime.inbox import Inbox
from amp_notebook.runtime.knobs import Knobs


def caps(*values: int) -> Knobs:
    """Knobs for as many nodes as ``values``, with those max_bundle caps."""
    return Knobs(1, [1] * len(values), list(values))


def m(node: int, direction: int, key: int, port: str = "in") -> Message:
    state = State(flush=0) if direction == UPDATE else State(key=key)
    return Message(node, port, direction, None, state)


def drain(inbox: Inbox, allow_forward: bool = True) -> list[list[Message]]:
    out = []
    while (b := inbox.take(allow_forward)) is not None:
        out.append(b)
    return out


def test_backward_and_updates_before_forward_then_oldest_key_first():
    inbox = Inbox(caps(1, 1, 1, 1))
    for msg in (m(0, FWD, 5), m(1, FWD, 2), m(2, BWD, 7), m(3, UPDATE, 0), m(2, BWD, 3)):
        inbox.push(msg)
    order = [(b[0].direction, b[0].key) for b in drain(inbox)]
    assert order == [(UPDATE, -1), (BWD, 3), (BWD, 7), (FWD, 2), (FWD, 5)]


def test_arrival_order_and_fifo():
    arrivals = [m(0, FWD, 5), m(1, BWD, 9), m(1, FWD, 2), m(2, BWD, 1)]
    inbox = Inbox(caps(1, 1, 1), order="arrival")
    for msg in arrivals:
        inbox.push(msg)
    assert [b[0].key for b in drain(inbox)] == [9, 1, 5, 2]
    inbox = Inbox(caps(1, 1, 1), priority="fifo", order="arrival")
    for msg in arrivals:
        inbox.push(msg)
    assert [b[0].key for b in drain(inbox)] == [5, 9, 2, 1]


def test_paused_inbox_gives_only_backward_work():
    inbox = Inbox(caps(1, 1))
    inbox.push(m(0, FWD, 0))
    inbox.push(m(1, BWD, 1))
    assert inbox.has_work(allow_forward=False)
    assert [b[0].key for b in drain(inbox, allow_forward=False)] == [1]
    assert not inbox.has_work(allow_forward=False) and inbox.has_work() and inbox.forward_waiting() == 1


def test_bundles_take_waiting_messages_of_the_same_node_direction_and_port_up_to_the_cap():
    inbox = Inbox(caps(3, 1))
    msgs = [m(0, FWD, k) for k in range(5)] + [m(0, FWD, 9, port="other"), m(0, BWD, 8), m(1, FWD, 0)]
    for msg in msgs:
        inbox.push(msg)
    bundles = drain(inbox)
    shapes = [[(x.node, x.direction, x.port, x.key) for x in b] for b in bundles]
    assert shapes[0] == [(0, BWD, "in", 8)]
    assert shapes[1] == [(0, FWD, "in", 0), (0, FWD, "in", 1), (0, FWD, "in", 2)]
    assert shapes[2] == [(1, FWD, "in", 0)]  # node 1 does not bundle (cap 1), and key 0 is older than 3
    assert shapes[3] == [(0, FWD, "in", 3), (0, FWD, "in", 4)]
    assert shapes[4] == [(0, FWD, "other", 9)]
    assert len(inbox) == 0


def test_a_changed_cap_applies_at_the_next_take_to_the_messages_already_waiting():
    knobs = caps(1)
    inbox = Inbox(knobs)
    for k in range(4):
        inbox.push(m(0, FWD, k))
    assert len(inbox.take()) == 1
    knobs.set_max_bundle([0], 8)
    assert [x.key for x in inbox.take()] == [1, 2, 3]
    for k in (7, 5, 6):
        inbox.push(m(0, FWD, k))
    knobs.set_max_bundle([0], 1)  # and back: they wait alone again, still oldest key first
    assert [[x.key for x in inbox.take()] for _ in range(3)] == [[5], [6], [7]]
    assert inbox.take() is None and len(inbox) == 0


events = st.lists(
    st.one_of(
        st.tuples(
            st.just("push"),
            st.integers(0, 2),
            st.sampled_from([FWD, BWD]),
            st.integers(0, 6),
            st.sampled_from(["in", "x"]),
        ),
        st.tuples(st.just("take"), st.booleans()),
        st.tuples(st.just("cap"), st.integers(0, 2), st.integers(1, 4)),  # a live max_bundle change
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(events, st.lists(st.integers(1, 4), min_size=3, max_size=3), st.sampled_from(["oldest_key", "arrival"]))
def test_every_message_is_taken_once_in_homogeneous_bundles(script, caps_, order):
    knobs = caps(*caps_)
    inbox = Inbox(knobs, order=order)
    pushed: list[Message] = []
    taken: list[Message] = []
    for event in script:
        if event[0] == "push":
            msg = m(event[1], event[2], event[3], event[4])
            pushed.append(msg)
            inbox.push(msg)
        elif event[0] == "cap":
            knobs.set_max_bundle([event[1]], event[2])
        else:
            bundle = inbox.take(event[1])
            if bundle is None:
                assert not inbox.has_work(event[1])
                continue
            first = bundle[0]
            waiting = [x for x in pushed if x not in taken and (x.direction == FWD) == (first.direction == FWD)]
            if order == "oldest_key":  # the oldest key of its direction, and the bundle in key order
                assert first.key == min(x.key for x in waiting)
                assert [x.key for x in bundle] == sorted(x.key for x in bundle)
            else:  # the earliest arrival of its direction
                assert first is waiting[0]
            assert 1 <= len(bundle) <= knobs.max_bundle[first.node]
            assert {(x.node, x.direction, x.port) for x in bundle} == {(first.node, first.direction, first.port)}
            assert event[1] or first.direction != FWD
            if first.direction == FWD:  # forward only when no backward work waits
                assert not [x for x in pushed if x.direction == BWD and x not in taken]
            taken.extend(bundle)
        assert len(inbox) == len(pushed) - len(taken)
    taken.extend(x for b in drain(inbox) for x in b)
    assert sorted(map(id, taken)) == sorted(map(id, pushed))
