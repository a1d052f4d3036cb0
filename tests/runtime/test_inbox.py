"""The worker's inbox: priority across directions, order within one, and which messages form a bundle."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amp_notebook.ir.message import BWD, FWD, UPDATE, Message, State
from amp_notebook.runtime.inbox import Inbox


def m(node: int, direction: int, key: int, port: str = "in") -> Message:
    state = State(flush=0) if direction == UPDATE else State(key=key)
    return Message(node, port, direction, None, state)


def drain(inbox: Inbox, allow_forward: bool = True) -> list[list[Message]]:
    out = []
    while (b := inbox.take(allow_forward)) is not None:
        out.append(b)
    return out


def test_backward_and_updates_before_forward_then_oldest_key_first():
    inbox = Inbox([1] * 4)
    for msg in (m(0, FWD, 5), m(1, FWD, 2), m(2, BWD, 7), m(3, UPDATE, 0), m(2, BWD, 3)):
        inbox.push(msg)
    order = [(b[0].direction, b[0].key) for b in drain(inbox)]
    assert order == [(UPDATE, -1), (BWD, 3), (BWD, 7), (FWD, 2), (FWD, 5)]


def test_arrival_order_and_fifo():
    arrivals = [m(0, FWD, 5), m(1, BWD, 9), m(1, FWD, 2), m(2, BWD, 1)]
    inbox = Inbox([1] * 3, order="arrival")
    for msg in arrivals:
        inbox.push(msg)
    assert [b[0].key for b in drain(inbox)] == [9, 1, 5, 2]
    inbox = Inbox([1] * 3, priority="fifo", order="arrival")
    for msg in arrivals:
        inbox.push(msg)
    assert [b[0].key for b in drain(inbox)] == [5, 9, 2, 1]


def test_paused_inbox_gives_only_backward_work():
    inbox = Inbox([1] * 2)
    inbox.push(m(0, FWD, 0))
    inbox.push(m(1, BWD, 1))
    assert inbox.has_work(allow_forward=False)
    assert [b[0].key for b in drain(inbox, allow_forward=False)] == [1]
    assert not inbox.has_work(allow_forward=False) and inbox.has_work() and inbox.forward_waiting() == 1


def test_bundles_take_waiting_messages_of_the_same_node_direction_and_port_up_to_the_cap():
    inbox = Inbox([3, 1])
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


def test_a_changed_cap_applies_at_the_next_take():
    caps = [1]
    inbox = Inbox(caps)
    for k in range(4):
        inbox.push(m(0, FWD, k))
    assert len(inbox.take()) == 1
    caps[0] = 8
    assert [x.key for x in inbox.take()] == [1, 2, 3]


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
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(events, st.lists(st.integers(1, 4), min_size=3, max_size=3), st.sampled_from(["oldest_key", "arrival"]))
def test_every_message_is_taken_once_in_homogeneous_bundles(script, caps, order):
    inbox = Inbox(caps, order=order)
    pushed: list[Message] = []
    taken: list[Message] = []
    for event in script:
        if event[0] == "push":
            msg = m(event[1], event[2], event[3], event[4])
            pushed.append(msg)
            inbox.push(msg)
        else:
            bundle = inbox.take(event[1])
            if bundle is None:
                assert not inbox.has_work(event[1])
                continue
            first = bundle[0]
            assert 1 <= len(bundle) <= caps[first.node]
            assert {(x.node, x.direction, x.port) for x in bundle} == {(first.node, first.direction, first.port)}
            assert event[1] or first.direction != FWD
            if first.direction == FWD:  # forward only when no backward work waits
                assert not [x for x in pushed if x.direction == BWD and x not in taken]
            taken.extend(bundle)
        assert len(inbox) == len(pushed) - len(taken)
    taken.extend(x for b in drain(inbox) for x in b)
    assert sorted(map(id, taken)) == sorted(map(id, pushed))
