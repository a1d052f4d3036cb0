"""The worker's native parts against the Python ones, on the same sequences (hypothesis):

* the inbox gives the same bundles as ``runtime/inbox.py`` for every priority, order, max_bundle, cap and
  set of parameterized nodes (light_first's tiers);
* the ledger completes the same keys and flushes as ``runtime/credits.py``;
* the trace buffer's rows, read in place as numpy columns, equal what ``trace/buffers.py`` holds for the
  same records, across chunk boundaries;
* states cross the boundary unchanged, and equality and hash mean what they mean in Python.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_notebook import engine
from amp_notebook.ir.message import Message, State
from amp_notebook.runtime.credits import Credits
from amp_notebook.runtime.inbox import ORDERS, PRIORITIES, Inbox
from amp_notebook.runtime.knobs import Knobs
from amp_notebook.trace.buffers import WorkerBuffer, chunk_rows_for

push = st.tuples(st.just("push"), st.integers(0, 2), st.integers(0, 2), st.integers(0, 1), st.integers(0, 6))
take = st.tuples(st.just("take"), st.booleans(), st.integers(0, 0), st.integers(0, 0), st.integers(0, 0))


@settings(max_examples=300, deadline=None)
@given(
    priority=st.sampled_from(PRIORITIES),
    order=st.sampled_from(ORDERS),
    max_bundle=st.lists(st.integers(1, 3), min_size=3, max_size=3),
    caps=st.none() | st.dictionaries(st.tuples(st.integers(0, 2), st.integers(0, 2)), st.integers(1, 3)),
    parameterized=st.lists(st.booleans(), min_size=0, max_size=3),
    steps=st.lists(st.one_of(push, take), max_size=60),
)
def test_the_native_inbox_gives_the_python_inboxs_bundles(
    priority, order, max_bundle, caps, parameterized, steps
) -> None:
    limit = None if caps is None else (lambda node, direction: caps.get((node, direction), 2))
    python = Inbox(Knobs(1, [1] * len(max_bundle), max_bundle), priority, order, limit, parameterized)
    native = engine.native().Inbox(priority, order, parameterized)
    messages: list[Message] = []
    for op, a, b, c, d in steps:
        if op == "push":
            node, direction, port, key = a, b, c, d
            state = State(flush=key) if direction == 2 else State(key=key)
            msg = Message(node, f"p{port}", direction, len(messages), state)
            messages.append(msg)
            python.push(msg)
            native.push(len(messages) - 1, node, direction, port, msg.key)
        else:
            got = python.take(allow_forward=a)
            expected = None if got is None else [m.payload for m in got]
            assert native.take(a, max_bundle, limit) == expected
        assert len(native) == len(python)
        assert native.has_work(True) == python.has_work(True)


def test_a_partly_taken_group_keeps_its_place_among_equal_keys() -> None:
    """Messages of one key for two nodes: the node whose messages arrived first gives all of them (one per take)
    before the other node's, which arrived later: a partly taken group re-enters under its next message's
    arrival number, in both inboxes."""
    max_bundle = [1, 1]
    python = Inbox(Knobs(1, [1, 1], max_bundle), "backward_first", "oldest_key")
    native = engine.native().Inbox("backward_first", "oldest_key")
    for i, node in enumerate([0, 0, 0, 1]):
        python.push(Message(node, "x", 0, i, State(key=1)))
        native.push(i, node, 0, 0, 1)
    taken = [python.take()[0].payload for _ in range(4)]
    assert taken == [0, 1, 2, 3]
    assert [native.take(True, max_bundle, None) for _ in range(4)] == [[0], [1], [2], [3]]


def test_groups_on_ports_inside_and_past_the_direct_table_stay_apart() -> None:
    """The native inbox finds a group by direct indexing for ports under 256 and through a map beyond: ports
    on both sides of that edge, pushed in any order, form their own groups and bundle as Python's do."""
    max_bundle = [4]
    python = Inbox(Knobs(1, [1], max_bundle), "backward_first", "oldest_key")
    native = engine.native().Inbox("backward_first", "oldest_key")
    ports = [255, 256, 0, 10**6, 256, 255, 10**6, 0]
    for i, port in enumerate(ports):
        python.push(Message(0, f"p{port}", 0, i, State(key=1)))
        native.push(i, 0, 0, port, 1)
    taken = []
    while (got := python.take()) is not None:
        taken.append([m.payload for m in got])
    assert taken == [[0, 5], [1, 4], [2, 7], [3, 6]]
    assert [native.take(True, max_bundle, None) for _ in range(4)] == taken
    assert native.take(True, max_bundle, None) is None


@pytest.mark.parametrize("priority", ["light_first", "backward_first"])
def test_light_first_takes_every_light_message_before_a_heavy_one(priority: str) -> None:
    """Node 0 has parameters, node 1 has none: light_first takes node 1's forward message before node 0's
    backward one (and keeps backward first within each tier); backward_first takes node 0's backward first."""
    max_bundle = [1, 1]
    python = Inbox(Knobs(1, [1, 1], max_bundle), priority, "oldest_key", None, [True, False])
    native = engine.native().Inbox(priority, "oldest_key", [True, False])
    pushed = [(0, 0, 1), (0, 1, 2), (1, 0, 3), (1, 1, 4)]  # (node, direction, key): heavy fwd, heavy bwd, ...
    for i, (node, direction, key) in enumerate(pushed):
        python.push(Message(node, "x", direction, i, State(key=key)))
        native.push(i, node, direction, 0, key)
    expected = [3, 2, 1, 0] if priority == "light_first" else [1, 3, 0, 2]
    assert [python.take()[0].payload for _ in range(4)] == expected
    assert [native.take(True, max_bundle, None)[0] for _ in range(4)] == expected


credit_step = st.one_of(
    st.tuples(st.just("inject"), st.integers(0, 4), st.integers(1, 3)),
    st.tuples(st.just("flush"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("handle"), st.integers(0, 4), st.integers(0, 2)),
)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(credit_step, max_size=60))
def test_the_native_ledger_completes_what_credits_complete(steps) -> None:
    python, native = Credits(), engine.native().Ledger()
    held: list[tuple[int, int]] = []  # (key, flush) of messages in flight: (k, -1) or (-1 - f, f)
    completed: tuple[list[int], list[int]] = ([], [])
    for op, a, b in steps:
        if op == "inject":
            python.admit_key(a, [Message(0, "in", 0, None, State(key=a))] * b)
            native.inject_key(a, b)
            held += [(a, -1)] * b
        elif op == "flush":
            python.admit_flush(a, [Message(0, "in", 2, None, State(flush=a))] * b)
            native.inject_flush(a, b)
            held += [(-1 - a, a)] * b
        elif held:
            key, flush = held.pop(a % len(held))
            outs = [] if flush >= 0 else [key] * b
            state = State(flush=flush) if flush >= 0 else State(key=key)
            msg = Message(0, "in", 2 if flush >= 0 else 0, None, state)
            out_msgs = [Message(0, "in", 0, None, State(key=k)) for k in outs]
            expected = python.release([msg], out_msgs) or ([], [])  # None: nothing completed
            assert native.release([(key, flush)], outs) == expected
            completed[0].extend(expected[0])
            completed[1].extend(expected[1])
            held += [(k, -1) for k in outs]
    assert native.outstanding() == python.in_flight()[0]
    assert native.drain() == completed  # the controller hears of each completion once, in order
    assert native.drain() == ([], [])


@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.tuples(st.integers(-(2**62), 2**62), st.integers(1, 3)), max_size=400, unique_by=lambda t: t[0]),
    order=st.randoms(use_true_random=False),
)
def test_the_ledger_counts_hundreds_of_keys_of_any_ids_released_in_any_order(keys, order) -> None:
    """Its count table grows past its first 64 slots, and ids of any size and sign (consecutive ones too, which
    the hash spreads) collide and are removed in any order: each key completes once, when its last message is
    released, and the table holds exactly the keys still in flight."""
    native = engine.native().Ledger()
    counts = dict(keys)
    for key, n in keys:
        native.inject_key(key, n)
    messages = [key for key, n in keys for _ in range(n)]
    order.shuffle(messages)
    for i, key in enumerate(messages):
        counts[key] -= 1
        done = [key] if counts[key] == 0 else []
        assert native.release([(key, -1)], []) == (done, [])
        if counts[key] == 0:
            del counts[key]
        if i % 50 == 0:
            assert native.outstanding() == counts
    assert native.outstanding() == {}
    assert sorted(native.drain()[0]) == sorted(key for key, _ in keys)


def test_the_ledger_counts_consecutive_keys_as_a_run_admits_them() -> None:
    native = engine.native().Ledger()
    for key in range(1000):
        native.inject_key(key, 2)
    for key in range(0, 1000, 2):  # every other key completes: the survivors' probe runs must stay intact
        assert native.release([(key, -1)], []) == ([], [])
        assert native.release([(key, -1)], []) == ([key], [])
    assert native.outstanding() == {key: 2 for key in range(1, 1000, 2)}
    with pytest.raises(KeyError, match="holds none"):
        native.release([(0, -1)], [])


@settings(max_examples=200, deadline=None)
@given(
    admitted=st.lists(st.integers(1, 3), min_size=1, max_size=5),
    bundles=st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["same", "reversed", "dropped", "extra", "other"])),
                     max_size=30),
)  # fmt: skip
def test_a_bundle_that_hands_its_credits_on_in_any_order_completes_as_credits_do(admitted, bundles) -> None:
    """Bundles of several keys' messages whose outputs carry the same keys (in order or not: the ledger changes
    no count and takes no lock), one message fewer or more, or another key's (it counts). Checked against
    counting by hand: outputs add their credits, then each handled message gives up its own."""
    native = engine.native().Ledger()
    counts: Counter[int] = Counter()
    held: list[int] = []
    for key, n in enumerate(admitted):
        native.inject_key(key, n)
        counts[key] += n
        held += [key] * n
    for size, how in bundles:
        if not held:
            break
        bundle, held = held[:size], held[size:]
        alive = [k for k in held if k != bundle[0]]  # keys still in flight after this bundle
        other = alive[:1] + bundle[1:] if alive else bundle  # as many messages, another key's among them
        outs = {"same": bundle, "reversed": bundle[::-1], "dropped": bundle[1:], "extra": bundle + bundle[:1],
                "other": other}[how]  # fmt: skip
        counts.update(outs)
        done = []
        for k in bundle:
            counts[k] -= 1
            if not counts[k]:
                del counts[k]
                done.append(k)
        assert native.release([(k, -1) for k in bundle], list(outs)) == (done, [])
        held += list(outs)
    assert native.outstanding() == dict(counts)


def test_the_ledger_wakes_the_driver_once_a_batch_of_keys_completed_or_none_is_left() -> None:
    """The driver names how many completed keys are worth a wake; fewer do once nothing else is in flight, and
    a completed flush always does (``set_wake_batch`` answers whether what is queued is worth a wake now)."""
    ledger = engine.native().Ledger()
    for key in range(4):
        ledger.inject_key(key, 1)
    assert not ledger.set_wake_batch(2)  # nothing completed
    assert ledger.release([(0, -1)], []) == ([0], [])
    assert not ledger.set_wake_batch(2)  # one of two
    assert ledger.set_wake_batch(1)  # a smaller batch makes the queued key worth it at once
    assert not ledger.set_wake_batch(3)
    ledger.release([(1, -1)], [])
    assert not ledger.set_wake_batch(3)
    ledger.release([(2, -1)], [])
    assert ledger.set_wake_batch(3)
    assert ledger.drain() == ([0, 1, 2], [])
    assert not ledger.set_wake_batch(3)
    ledger.release([(3, -1)], [])
    assert ledger.set_wake_batch(3)  # one key of three, but none is left in flight
    assert ledger.drain() == ([3], [])
    ledger.inject_key(4, 1)
    ledger.inject_flush(0, 1)
    assert not ledger.set_wake_batch(8)
    assert ledger.release([(-1, 0)], []) == ([], [0])
    assert ledger.set_wake_batch(8)  # a completed flush


# states of 9 to 10 slots, the first 8 (the inline ones) zero: they differ only past them
HIGH_STATES = st.lists(st.integers(-1, 1), min_size=1, max_size=2).map(lambda tail: [0] * 8 + tail)


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 40),
    steps=st.lists(
        st.tuples(st.sampled_from(["put", "take", "get"]), st.lists(st.integers(-1, 1), max_size=2) | HIGH_STATES,
                  st.integers(-5, 5)),
        max_size=120,
    ),
)  # fmt: skip
def test_the_native_state_map_holds_what_a_dict_holds(capacity, steps) -> None:
    """Inserts, lookups and removals in any order (few distinct states, so probe runs collide and removals
    shift them), from a small table that grows: the same answers and contents as a dict. Some states fill
    more slots than a State holds inline and differ only in the slots it keeps in its own block."""
    native, python = engine.native().StateMap(capacity), {}
    for op, state, value in steps:
        key = tuple(state)
        if op == "put":
            assert native.put(state, value) == (key not in python)
            python[key] = value
        elif op == "take":
            assert native.take(state) == python.pop(key, None)
        else:
            assert native.get(state) == python.get(key)
        assert len(native) == len(python)
    assert {tuple(s): v for s, v in native.items()} == python
    native.clear()
    assert len(native) == 0 and native.items() == [] and native.get([0]) is None


def test_the_ledger_refuses_a_credit_it_never_gave() -> None:
    with pytest.raises(KeyError):
        engine.native().Ledger().release([(3, -1)], [])


def read(native_buffer, kind: str) -> dict[str, np.ndarray]:
    parts = [cols for _, _, cols in native_buffer.chunks(kind)]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


@settings(max_examples=50, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 2), st.lists(st.integers(-3, 50), min_size=1, max_size=4)),
        max_size=40,
    )
)
def test_native_trace_rows_read_in_place_equal_the_python_buffers(rows) -> None:
    python = WorkerBuffer(capacity=None)
    native = engine.native().TraceBuffer(chunk_rows=7)  # small chunks: rows cross chunk boundaries
    for i, (node, phase, keys) in enumerate(rows):
        start, end = float(i), i + 0.5
        if len(keys) == 1:
            python.record(node, phase, keys[0], start, end, depth=i % 3)
            native.record(node, phase, keys[0], start, end, i % 3)
        else:
            python.record_bundle(node, phase, keys, start, end, depth=i % 3)
            native.record_bundle(node, phase, keys, start, end, i % 3)
        python.record_staleness(node, keys[0], len(keys), end)
        native.record_staleness(node, keys[0], len(keys), end)
    events, staleness = python.snapshot()
    for kind, expected in (("events", events), ("staleness", staleness), ("members", python.members())):
        got = read(native, kind)
        for name, column in expected.items():
            if name == "row" and kind == "events":
                continue  # the reader numbers rows itself
            assert got[name].dtype == column.dtype, (kind, name)
            np.testing.assert_array_equal(got[name], column, err_msg=f"{kind}.{name}")
        assert all(not col.flags.writeable for _, _, cols in native.chunks(kind) for col in cols.values())


def test_a_column_view_keeps_its_chunk_alive_after_the_writer_forgets_it() -> None:
    native = engine.native().TraceBuffer(chunk_rows=2)
    for i in range(5):
        native.record(1, 0, i, float(i), i + 1.0, 0)
    first_chunk = native.chunks("events")[0][2]
    native.forget_before("events", 4)
    assert [first for first, _, _ in native.chunks("events")] == [4]
    del native
    np.testing.assert_array_equal(first_chunk["key"], [0, 1])


def test_forgotten_chunks_are_reused_so_a_long_run_maps_a_bounded_number_of_them() -> None:
    """A run writes chunks for as long as it runs; the reader forgets the old ones. Once no one holds a
    forgotten chunk, the writer's next chunk reuses it: 500 chunks written, at most 4 mapped."""
    native = engine.native().TraceBuffer(chunk_rows=4)
    for i in range(2000):
        native.record(i % 5, 0, i, float(i), i + 0.5, 0)
        native.record_staleness(1, i, i % 3, float(i))
        if i % 4 == 3:  # a chunk is full: the reader keeps the last one only
            native.forget_before("events", i - 3)
            native.forget_before("staleness", i - 3)
    for kind in ("events", "staleness"):
        made, reused = native.chunks_made(kind)
        assert made <= 4 and made + reused == 500, (kind, made, reused)
        (first, rows, columns), *_ = native.chunks(kind)
        assert (first, rows) == (1996, 4)
        np.testing.assert_array_equal(columns["key"], [1996, 1997, 1998, 1999])  # a reused chunk holds its own rows
    assert native.chunks_made("members") == (1, 0)  # never written past its first chunk


def test_a_chunk_a_reader_holds_is_never_reused_for_new_rows() -> None:
    native = engine.native().TraceBuffer(chunk_rows=2)
    native.record(1, 0, 0, 0.0, 1.0, 0)
    native.record(1, 0, 1, 1.0, 2.0, 0)
    held = native.chunks("events")[0][2]  # the arrays over chunk 0 keep it
    for i in range(2, 40):
        native.record(1, 0, i, float(i), i + 1.0, 0)
        native.forget_before("events", i - i % 2)
    np.testing.assert_array_equal(held["key"], [0, 1])
    np.testing.assert_array_equal(held["end"], [1.0, 2.0])
    made, reused = native.chunks_made("events")
    assert made >= 3 and made + reused == 20
    with pytest.raises(ValueError, match="kind: expected 'events', 'members' or 'staleness', got 'event'"):
        native.forget_before("event", 0)


def test_states_of_many_fields_cross_the_boundary_unchanged() -> None:
    """A layout of 12 fields: the ones past the first 8 slots (kept in a State's own block) round-trip,
    compare and hash as Python's states do, present or absent."""
    names = ["key", "flush", *(f"f{i}" for i in range(10))]
    codec = engine.native().StateCodec(names, State)
    states = (State(key=1, f9=5), State(key=1, f9=6), State(key=1, f0=2, f7=3, f8=True, f9=-(2**62)),
              State(key=1, f0=2, f7=3), State(flush=2, f8=0))  # fmt: skip
    for state in states:
        back = codec.roundtrip(state)
        assert back == state and repr(back) == repr(state)
    for a in states:
        for b in states:
            assert codec.same(a, b) == (a == b)
    assert codec.same(State(key=1, f8=True), State(key=1, f8=1))
    assert codec.hash(State(key=1, f8=True)) == codec.hash(State(key=1, f8=1))
    assert not codec.same(State(key=1), State(key=1, f8=0))


def test_states_cross_the_boundary_unchanged_with_pythons_equality() -> None:
    codec = engine.native().StateCodec(["key", "flush", "t", "done"], State)
    for state in (State(key=3), State(key=-2, t=2**62, done=True), State(flush=1), State(key=0, done=False)):
        back = codec.roundtrip(state)
        assert back == state and repr(back) == repr(state) and codec.describe(state) == repr(state)
    assert codec.same(State(key=1, done=True), State(key=1, done=1))  # True == 1 in Python too
    assert codec.hash(State(key=1, done=True)) == codec.hash(State(key=1, done=1))
    assert not codec.same(State(key=1), State(key=1, t=0))
    for bad, why in ((State(key=1, t=0.5), "float"), (State(key=1, zz=1), "not in this graph's state layout"),
                     (State(key=2**63), "beyond int64")):  # fmt: skip
        with pytest.raises(ValueError, match=why):
            codec.roundtrip(bad)


@settings(max_examples=40, deadline=None)
@given(capacity=st.sampled_from([None, 8, 16, 24]), n=st.integers(0, 60), since=st.integers(0, 70))
def test_the_native_trace_reader_equals_the_python_buffer(capacity, n, since) -> None:
    """Same rows into a Python WorkerBuffer and a native one: the same reads, windows and exact totals, also
    once old chunks were dropped for the capacity. The staleness and member tables follow the event span:
    the native reader applies that rule when it reads, the Python writer when a chunk of theirs seals, so
    the native one may hold fewer of their oldest rows (a suffix of the Python rows), never other rows."""
    from amp_notebook.engine.trace import NativeWorkerBuffer

    python, native = WorkerBuffer(capacity), NativeWorkerBuffer(capacity)
    for i in range(n):
        keys = [i, i + 1] if i % 4 == 0 else [i]
        for buffer in (python, native.native):
            if len(keys) == 1:
                buffer.record(i % 3, i % 2, i, float(i), i + 0.75, i % 5)
            else:
                buffer.record_bundle(i % 3, i % 2, keys, float(i), i + 0.75, i % 5)
            buffer.record_staleness(i % 3, i, i % 4, i + 0.75)
    for table in ("event_table", "staleness_table", "member_table"):
        expected, got = getattr(python, table), getattr(native, table)
        (cols_p, next_p, missed_p), (cols_n, next_n, missed_n) = expected.read(since), got.read(since)
        fewer = expected.held() - got.held()  # follower rows the native reader dropped sooner
        assert fewer == 0 if table == "event_table" else fewer >= 0, table
        assert next_n == next_p and missed_n - missed_p == len(cols_p[got.last]) - len(cols_n[got.last]), table
        assert cols_n.keys() == cols_p.keys()
        for name in cols_p:
            tail = cols_p[name][len(cols_p[name]) - len(cols_n[name]) :]
            np.testing.assert_array_equal(cols_n[name], tail, err_msg=f"{table}.{name}")
        assert got.totals() == expected.totals(), table
        assert got.written() == expected.written()
        window_p, window_n = expected.window(5.0, 20.0), got.window(5.0, 20.0)
        for name in window_p:
            np.testing.assert_array_equal(window_n[name], window_p[name][len(window_p[name]) - len(window_n[name]) :])
    assert native.total_rows == python.total_rows and len(native) == len(python)


def test_native_staleness_and_member_rows_follow_the_event_span() -> None:
    """As the Python buffer's: after many more event rows than the capacity, the follower tables hold no
    row older than the oldest event row (their chunk that straddles it aside), their totals exact."""
    from amp_notebook.engine.trace import NativeWorkerBuffer

    capacity, steps = 800, 30_000  # chunks of 100 rows; a gradient and a bundle every 10 events
    native, python = NativeWorkerBuffer(capacity), WorkerBuffer(capacity)
    for i in range(steps):
        for buffer in (native.native, python):
            if i % 10 == 0:
                buffer.record_bundle(1, 0, [i, i + 1], float(i), i + 0.5, 0)
            else:
                buffer.record(1, 0, i, float(i), i + 0.5, 0)
            if i % 10 == 5:
                buffer.record_staleness(1, i, i % 3, i + 0.5)
        if i % 1000 == 999:
            native.fold()  # as the native driver does while its workers write
    oldest = float(native.snapshot()[0]["start"][0])
    chunk = chunk_rows_for(capacity)
    stale, members = native.snapshot()[1], native.members()
    assert len(stale["time"]) and stale["time"][0] >= oldest - 10 * chunk
    assert len(members["time"]) and members["time"][0] >= oldest - 5 * chunk
    assert native.staleness_totals() == python.staleness_totals()
    assert native.member_table.totals() == python.member_table.totals()
    held = {kind: sum(rows for _, rows, _ in native.native.chunks(kind)) for kind in ("events", "members", "staleness")}
    assert held["events"] <= capacity, held  # what the engine still holds, not only what the reader shows
    assert held["members"] <= 2 * (capacity // 10) + 2 * chunk and held["staleness"] <= capacity // 10 + 2 * chunk


def test_a_reader_sees_only_complete_rows_while_a_native_thread_writes() -> None:
    # the reader must overlap the writer at least once: on a loaded machine one attempt may not interleave
    attempts = [engine.native().trace_publish_check(200_000, 4096) for _ in range(5)]
    assert all(bad == 0 and checked > 0 for _, checked, bad in attempts)
    assert any(reads > 1 for reads, _, _ in attempts), attempts


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_tensor_memory_handed_between_threads_keeps_every_item(threads: int) -> None:
    """Tensors made on one thread and dropped on another (as payloads between workers) reuse their memory
    (src/blocks.cc): waves of 150 (more than a thread keeps of one size) over sizes from 8 bytes to past the
    largest kept size, every item checked by the receiving thread."""
    checked, bad = engine.native().blocks_exchange_check(threads, 6, 150)
    assert bad == 0 and checked == threads * 6 * sum((1 << (i % 17)) + i % 5 for i in range(150))


def test_a_child_forked_while_threads_pass_tensors_can_make_tensors() -> None:
    """fork() while two threads pass tensors around: without the allocator's fork handler, a child forked while
    a thread held the shared stacks' lock hung on its first spill or refill (a few in 300 here). Each child
    spills and refills every size class, then exits; one that has not exited in 10 s counts as hung.

    Not in the sanitizer build: there the allocator keeps no blocks (every block goes to and from ASan's
    allocator, so there is no lock of ours to test), and ASan's allocator is not safe to fork while other
    threads allocate: a child forked while a thread held one of its locks hangs in it (seen with gdb, in
    ``GetFromAllocator`` and ``QuarantineChunk``), in about 1 fork of 200 here."""
    if not engine.native().blocks_kept():
        pytest.skip("the sanitizer build keeps no blocks, and ASan's own allocator is not fork-safe")
    forks, clean = engine.native().blocks_fork_check(2, 200, 10.0)
    assert (forks, clean) == (200, 200)


# ------------------------------------------------------------------ strided views, copied and stacked

DTYPES = (np.float32, np.float64, np.int64, np.bool_)


@st.composite
def view_of_array(draw):
    """An array of rank 1-4 and a view of it as the kernels make one: rows [r0, r1), last-axis items [c0, c1)."""
    dtype = draw(st.sampled_from(DTYPES))
    rank = draw(st.integers(1, 4))
    shape = [draw(st.integers(0, 5))] + [draw(st.integers(1, 6)) for _ in range(rank - 1)]
    x = (np.arange(int(np.prod(shape)), dtype=np.float64) * 1.25 - 3).reshape(shape).astype(dtype)
    r0 = draw(st.integers(0, shape[0]))
    r1 = draw(st.integers(r0, shape[0]))
    last = r1 - r0 if rank == 1 else shape[-1]  # a vector's rows are its last axis
    c0 = draw(st.integers(0, last))
    c1 = draw(st.integers(c0, last))
    return x, r0, r1, c0, c1


def numpy_view(x, r0, r1, c0, c1):
    return x[r0:r1][..., c0:c1]


@settings(max_examples=300, deadline=None)
@given(view=view_of_array())
def test_a_strided_view_copies_as_numpy_slices_it(view) -> None:
    got = np.asarray(engine.native().stacked_views([view]))
    expected = numpy_view(*view)
    assert got.shape == expected.shape and got.dtype == (np.int64 if expected.dtype == np.int64 else expected.dtype)
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), dtype=st.sampled_from((np.float32, np.float64)), n=st.integers(2, 4))
def test_views_stack_as_numpy_concatenates_them(data, dtype, n) -> None:
    """Columns sliced off wider arrays (the views a concat's backward hands on), stacked as one bundle; the
    parts may mix float widths, which promote to float64 as numpy's concatenate does."""
    width = data.draw(st.integers(1, 5))
    views = []
    for _ in range(n):
        extra = data.draw(st.integers(0, 3))  # columns on either side of the slice
        left = data.draw(st.integers(0, extra))
        rows = data.draw(st.integers(0, 4))
        part_dtype = data.draw(st.sampled_from((dtype, np.float32, np.float64)))
        x = (np.arange(rows * (width + extra), dtype=np.float64) / 7).reshape(rows, width + extra).astype(part_dtype)
        views.append((x, 0, rows, left, left + width))
    got = np.asarray(engine.native().stacked_views(views))
    expected = np.concatenate([numpy_view(*v) for v in views])
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
