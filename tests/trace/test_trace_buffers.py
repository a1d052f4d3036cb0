"""Bounded trace buffers: held rows stay within capacity, totals stay exact; windows and incremental reads."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_notebook import models
from amp_notebook.runtime.train import train
from amp_notebook.trace import Trace, WorkerBuffer, staleness_histogram, staleness_summary, utilization
from amp_notebook.trace.buffers import chunk_rows_for
from amp_notebook.trace.window import Cursor
from tests.conftest import digits_dataset

ROW_COLUMNS = ("node", "phase", "key", "depth", "start", "end")
STALE_COLUMNS = ("node", "key", "value", "time")


def fill(buf: WorkerBuffer, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Write n synthetic rows (and a staleness row for every other one); return what was written."""
    rng = np.random.default_rng(seed)
    node = rng.integers(0, 5, n)
    phase = rng.integers(0, 3, n)
    dur = rng.uniform(1e-6, 1e-3, n)
    gap = rng.uniform(0, 1e-4, n)
    start = np.cumsum(dur + gap) - dur
    end = start + dur
    stale = rng.integers(0, 7, n)
    for i in range(n):
        buf.record(int(node[i]), int(phase[i]), i, float(start[i]), float(end[i]), i % 4)
        if i % 2:
            buf.record_staleness(int(node[i]), i, int(stale[i]), float(end[i]))
    return {"node": node, "phase": phase, "start": start, "end": end, "stale": stale}


# ------------------------------------------------------------------ one buffer


@pytest.mark.parametrize("capacity", [1, 7, 64, 1000])
def test_small_capacity_holds_recent_rows_and_exact_totals(capacity):
    n = 3000
    bounded, full = WorkerBuffer(capacity), WorkerBuffer(None)
    fill(bounded, n)
    fill(full, n)
    assert len(full) == full.total_rows == n
    assert bounded.total_rows == n
    assert capacity - chunk_rows_for(capacity) <= len(bounded) <= capacity
    rows, stale = bounded.snapshot()
    all_rows, all_stale = full.snapshot()
    held = len(rows["end"])
    assert held == len(bounded)
    for c in ROW_COLUMNS:  # the most recent rows, whole and in order: dropped, never decimated
        np.testing.assert_array_equal(rows[c], all_rows[c][n - held :])
    for c in STALE_COLUMNS:
        np.testing.assert_array_equal(stale[c], all_stale[c][len(all_stale["time"]) - len(stale["time"]) :])
    assert len(stale["time"]) <= capacity
    # totals over every row ever written
    t, u = bounded.event_totals(), full.event_totals()
    assert t.rows == u.rows == n
    assert t.phase_rows == u.phase_rows
    assert t.busy_s == pytest.approx(u.busy_s, rel=1e-12)
    assert t.busy_s == pytest.approx(float(np.sum(all_rows["end"] - all_rows["start"])), rel=1e-12)
    assert bounded.staleness_totals().histogram == full.staleness_totals().histogram
    if n > capacity:
        assert t.busy_s > float(np.sum(rows["end"] - rows["start"]))


def stream(buf: WorkerBuffer, steps: int) -> None:
    """A worker's rows at one row per time unit: every 10th a bundle of 2 messages (2 member rows) and one
    gradient (a staleness row) per 10 steps: the follower tables fill ten times slower than the events."""
    for i in range(steps):
        if i % 10 == 0:
            buf.record_bundle(1, 0, [i, i + 1], float(i), i + 0.5, 0)
        else:
            buf.record(1, 0, i, float(i), i + 0.5, 0)
        if i % 10 == 5:
            buf.record_staleness(1, i, i % 3, i + 0.5)


@pytest.mark.parametrize("steps", [20_000, 60_000])
def test_staleness_and_member_rows_follow_the_event_span(steps):
    capacity = 800  # chunks of 100 rows
    buf, full = WorkerBuffer(capacity), WorkerBuffer(None)
    stream(buf, steps)
    stream(full, steps)
    oldest = float(buf.snapshot()[0]["start"][0])
    # a follower drops chunks when it seals one of its own: it may hold two chunks' span before the events'
    slack = 2 * 10 * chunk_rows_for(capacity)
    stale, members = buf.snapshot()[1], buf.members()
    assert len(stale["time"]) and stale["time"][0] >= oldest - slack  # not a full capacity of old gradients
    assert len(members["time"]) and members["time"][0] >= oldest - slack
    assert len(stale["time"]) <= capacity // 10 + 2 * chunk_rows_for(capacity)  # the same however long the run
    assert len(members["time"]) <= 2 * (capacity // 10) + 2 * chunk_rows_for(capacity)
    all_stale = full.snapshot()[1]  # what is held is the most recent rows, whole
    np.testing.assert_array_equal(stale["time"], all_stale["time"][len(all_stale["time"]) - len(stale["time"]) :])
    assert buf.staleness_totals().histogram == full.staleness_totals().histogram  # exact over every row
    assert buf.member_table.totals().rows == full.member_table.totals().rows == 2 * (steps // 10)


def test_staleness_rows_without_event_rows_keep_their_capacity():
    buf = WorkerBuffer(800)  # a run with tracing off still measures staleness: nothing to follow
    for i in range(5_000):
        buf.record_staleness(1, i, 0, float(i))
    assert 800 - chunk_rows_for(800) <= len(buf.snapshot()[1]["time"]) <= 800


def test_totals_match_numpy_on_what_was_written():
    buf = WorkerBuffer(50)
    written = fill(buf, 999, seed=3)
    t = buf.event_totals()
    assert t.phase_rows == tuple(int(c) for c in np.bincount(written["phase"], minlength=3))
    st = buf.staleness_totals()
    values = written["stale"][1::2]
    nodes = written["node"][1::2]
    summary = st.summary()
    assert summary["count"] == len(values)
    assert summary["mean"] == pytest.approx(float(values.mean()))
    assert summary["p95"] == pytest.approx(float(np.percentile(values, 95)))
    assert summary["max"] == float(values.max())
    for node in range(5):
        assert st.summary(node)["p95"] == pytest.approx(float(np.percentile(values[nodes == node], 95)))


def test_sealed_columns_are_read_only_views():
    buf = WorkerBuffer(16)
    fill(buf, 40)
    sealed = buf.event_table.view.sealed
    assert sealed
    with pytest.raises(ValueError, match="read-only"):
        sealed[-1].columns["start"][0] = 0.0


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_invalid_capacity_is_refused(bad):
    with pytest.raises(ValueError, match=r"trace_capacity: expected an int >= 1 .* or None"):
        WorkerBuffer(bad)


# ------------------------------------------------------------------ a real run: sync mode is deterministic


@pytest.fixture(scope="module")
def digits():
    return digits_dataset(batch_size=50)


def sync_run(digits, capacity):
    return train(models.mlp(input_width=64, hidden=16), digits, workers=2, mode="sync", epochs=3, seed=0,
                 validate=False, trace_capacity=capacity)  # fmt: skip


def test_long_run_with_small_capacity_is_bounded_and_exact(digits):
    capacity = 100
    small, full = sync_run(digits, capacity), sync_run(digits, None)
    for buf in small.trace.buffers:
        assert len(buf) <= capacity
        assert len(buf.snapshot()[1]["time"]) <= capacity
    assert small.trace.dropped_rows() > 0 and full.trace.dropped_rows() == 0
    # rows and phases per worker, and every gradient's staleness, equal the unbounded run's
    for a, b in zip(small.trace.event_totals(), full.trace.event_totals(), strict=True):
        assert a.rows == b.rows and a.phase_rows == b.phase_rows
    assert small.trace.staleness_totals() == full.trace.staleness_totals()
    assert staleness_histogram(small.trace) == staleness_histogram(full.trace)
    assert staleness_summary(small.trace) == staleness_summary(full.trace)
    assert small.summary()["staleness"] == full.summary()["staleness"]
    assert staleness_summary(full.trace)["count"] == 4 * 3 * len(digits.train)
    # the rows held are the unbounded run's latest rows of the same worker (sync mode fixes each worker's
    # sequence of keys; within a key, the two Input nodes' messages may race, so nodes can swap places)
    for w in range(2):
        held, _ = small.trace.buffers[w].snapshot()
        every, _ = full.trace.buffers[w].snapshot()
        n = len(held["end"])
        np.testing.assert_array_equal(held["key"], every["key"][-n:])
        last = held["key"] == held["key"][-1]  # the last key is held whole
        assert sorted(zip(held["node"][last].tolist(), held["phase"][last].tolist(), strict=True)) == sorted(
            zip(every["node"][-n:][last].tolist(), every["phase"][-n:][last].tolist(), strict=True)
        )
    # utilization counts the dropped rows' busy time too
    held_busy = [float(np.sum(b.snapshot()[0]["end"] - b.snapshot()[0]["start"])) for b in small.trace.buffers]
    u = utilization(small.trace, small.wall_s)
    assert u == [b / small.wall_s for b in small.trace.busy_s()]
    assert all(x * small.wall_s > h for x, h in zip(u, held_busy, strict=True))
    assert all(0 < x <= 1 for x in u)


def test_node_seconds_sums_each_nodes_rows_over_every_worker(digits):
    full = sync_run(digits, None)
    seconds = full.trace.node_seconds()
    cols = full.trace.events()
    assert list(seconds) == full.trace.node_names
    for i, name in enumerate(full.trace.node_names):
        mine = cols["node"] == i
        assert seconds[name] == pytest.approx(float(np.sum(cols["end"][mine] - cols["start"][mine])), rel=1e-12)
    assert sum(seconds.values()) == pytest.approx(sum(full.trace.busy_s()), rel=1e-9)
    assert seconds["linear1"] > 0


# ------------------------------------------------------------------ windows and incremental reads


def test_window_equals_filtering_the_held_rows(digits):
    # each worker writes about 375 event rows here: a capacity well under that drops rows whenever the
    # driver folds (at 400 whether any were dropped hung on the fold's timing)
    result = train(models.mlp(input_width=64, hidden=16), digits, workers=2, mode="amp", max_active_keys=4,
                   epochs=2, seed=0, trace_capacity=160)  # fmt: skip
    ev = result.trace.events()
    assert result.trace.dropped_rows() > 0
    lo_all, hi_all = float(ev["start"].min()), float(ev["end"].max())
    for q0, q1 in [(0.0, 1.0), (0.3, 0.6), (0.9, 0.95), (0.5, 0.5)]:
        lo, hi = lo_all + q0 * (hi_all - lo_all), lo_all + q1 * (hi_all - lo_all)
        win = result.trace.window(lo, hi)
        keep = (ev["end"] >= lo) & (ev["start"] < hi)
        assert len(win["start"]) == int(keep.sum())
        for c in ev:
            np.testing.assert_array_equal(np.sort(win[c]), np.sort(ev[c][keep]))
        assert np.all(np.diff(win["start"]) >= 0)
    assert len(result.trace.window(hi_all + 1.0, hi_all + 2.0)["start"]) == 0
    with pytest.raises(ValueError, match="start_s <= end_s"):
        result.trace.window(2.0, 1.0)


def per_worker(increments, workers, columns):
    out = []
    for w in range(workers):
        parts = [{c: inc[c][inc["worker"] == w] for c in columns} for inc in increments]
        out.append({c: np.concatenate([p[c] for p in parts]) for c in columns})
    return out


def test_since_increments_concatenate_to_the_snapshot():
    bufs = [WorkerBuffer(None), WorkerBuffer(None)]
    trace = Trace(bufs, [f"n{i}" for i in range(5)], origin=0.0)
    cursor, events, stale = None, [], []
    for step in range(7):
        for w, buf in enumerate(bufs):
            fill(buf, 50 + 13 * step + w, seed=10 * step + w)
        inc = trace.since(cursor)
        assert inc.missed_events == 0 and inc.missed_staleness == 0
        events.append(inc.events)
        stale.append(inc.staleness)
        cursor = inc.cursor
    assert len(trace.since(cursor)) == 0  # nothing new
    assert cursor == Cursor(
        tuple(b.total_rows for b in bufs), tuple(b.staleness_table.written() for b in bufs), (0,) * len(bufs)
    )
    for w, got in enumerate(per_worker(events, 2, ROW_COLUMNS)):
        rows, _ = bufs[w].snapshot()
        for c in ROW_COLUMNS:
            np.testing.assert_array_equal(got[c], rows[c])
    for w, got in enumerate(per_worker(stale, 2, STALE_COLUMNS)):
        _, st = bufs[w].snapshot()
        for c in STALE_COLUMNS:
            np.testing.assert_array_equal(got[c], st[c])
    # merged over workers, all increments together hold every row of the full read
    total = {c: np.concatenate([e[c] for e in events]) for c in events[0]}
    ev = trace.events()
    assert sorted(zip(total["worker"].tolist(), total["start"].tolist(), strict=True)) == sorted(
        zip(ev["worker"].tolist(), ev["start"].tolist(), strict=True)
    )


def test_since_counts_rows_dropped_before_they_were_read():
    buf = WorkerBuffer(64)
    trace = Trace([buf], ["a", "b", "c", "d", "e"])
    fill(buf, 10)
    first = trace.since()
    assert len(first) == 10 and first.missed_events == 0
    fill(buf, 1000, seed=1)  # far more than the capacity before the next read
    second = trace.since(first.cursor)
    assert second.missed_events == buf.total_rows - 10 - len(second)
    assert len(second) == len(buf)
    assert second.cursor.events == (buf.total_rows,)
    with pytest.raises(ValueError, match="cursor is for 1 workers but the trace has 2"):
        Trace([buf, WorkerBuffer()], ["a"]).since(second.cursor)


def test_live_since_while_a_background_run_writes(digits):
    """A reader polling a running run: its increments add up to exactly what the workers wrote."""
    run = train(models.mlp(input_width=64, hidden=16), digits, workers=2, mode="amp", max_active_keys=4, epochs=6,
                seed=0, validate=False, background=True)  # fmt: skip
    with run:
        increments, cursor, reads = [], None, 0
        while not run.done or reads == 0:
            inc = run.trace.since(cursor)
            increments.append(inc.events)
            cursor = inc.cursor
            reads += 1
            time.sleep(0.005)
        increments.append(run.trace.since(cursor).events)  # whatever came after the last read
    result = run.wait()
    assert sum(len(e["start"]) for e in increments) == sum(len(b) for b in result.trace.buffers)
    for w, got in enumerate(per_worker(increments, 2, ROW_COLUMNS)):
        rows, _ = result.trace.buffers[w].snapshot()
        np.testing.assert_array_equal(got["key"], rows["key"])
        np.testing.assert_allclose(got["start"], rows["start"] - result.trace.origin, rtol=0, atol=1e-9)


@given(
    st.lists(st.tuples(st.integers(0, 300), st.integers(-5, 10**6)), max_size=200),
    st.sampled_from([np.int32, np.int64]),
)
@settings(max_examples=200, deadline=None)
def test_staleness_totals_count_every_node_and_value_pair(pairs: list[tuple[int, int]], dtype: type) -> None:
    """A sealed chunk's staleness histogram is the plain count of its (node, value) pairs, in sorted order,
    whatever the range of the values (negative ones too, as a worker's clock never gives but a file may)."""
    from collections import Counter

    from amp_notebook.trace.totals import StalenessTotals

    nodes, values = [n for n, _ in pairs], [v for _, v in pairs]
    columns = {"node": np.array(nodes, dtype=dtype), "value": np.array(values, dtype=dtype)}
    expected: dict[int, dict[int, int]] = {}
    for (node, value), count in sorted(Counter(pairs).items()):
        expected.setdefault(node, {})[value] = count
    hist = StalenessTotals.of(columns).histogram
    assert hist == expected
    assert [list(h) for h in hist.values()] == [list(h) for h in expected.values()] and list(hist) == list(expected)


def test_staleness_totals_of_a_range_too_wide_to_pack_take_the_general_way() -> None:
    from amp_notebook.trace.totals import StalenessTotals

    columns = {"node": np.array([2**40, 1, 1]), "value": np.array([-(2**40), 2**40, 2**40])}
    assert StalenessTotals.of(columns).histogram == {1: {2**40: 2}, 2**40: {-(2**40): 1}}
