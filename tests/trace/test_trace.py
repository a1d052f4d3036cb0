"""Trace columns, metrics and the Chrome trace export of real (small) runs."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.data import list_reduction_dataset, load_digits_dataset
from amp_notebook.runtime.train import train
from amp_notebook.trace import (
    PHASES,
    Trace,
    WorkerBuffer,
    chrome_trace,
    staleness_histogram,
    staleness_summary,
    utilization,
)  # fmt: skip

EVENT_COLUMNS = ("worker", "row", "node", "phase", "key", "start", "end", "depth", "messages")


@pytest.fixture(scope="module")
def mlp_run():
    ds = load_digits_dataset(batch_size=100, seed=0)
    return train(models.mlp(input_width=64, hidden=32), ds, workers=2, mode="amp", max_active_keys=4, epochs=2,
                 seed=0)  # fmt: skip


@pytest.fixture(scope="module")
def rnn_run():
    ds = list_reduction_dataset(n_train=400, n_val=100, bucket_size=50, seed=0)
    return train(models.rnn(hidden=16, embedding_dim=8, replicas=2), ds, workers=3, mode="pipeline",
                 max_active_keys=3, epochs=1, seed=0)  # fmt: skip


@pytest.fixture(params=["mlp", "rnn"])
def run(request, mlp_run, rnn_run):
    return mlp_run if request.param == "mlp" else rnn_run


# ------------------------------------------------------------------ events and staleness columns


def test_events_columns_equal_length_and_sorted(run):
    ev = run.trace.events()
    assert set(ev) == set(EVENT_COLUMNS)
    n = len(ev["start"])
    assert n > 0
    assert all(len(ev[c]) == n for c in EVENT_COLUMNS)
    assert np.all(np.diff(ev["start"]) >= 0)
    assert np.all(ev["end"] >= ev["start"])
    # times are seconds since the run started, within the run's wall time
    assert ev["start"].min() >= 0 and ev["end"].max() <= run.wall_s
    assert set(ev["worker"].tolist()) <= set(range(run.trace.workers))
    assert set(ev["phase"].tolist()) <= set(range(len(PHASES)))
    assert ev["node"].min() >= 0 and ev["node"].max() < len(run.trace.node_names)


def test_events_run_on_the_worker_their_node_is_placed_on(run):
    ev = run.trace.events()
    names = run.trace.node_names
    for w, n in zip(ev["worker"].tolist(), ev["node"].tolist(), strict=True):
        assert run.placement[names[n]] == w


def test_one_worker_handles_one_message_at_a_time(run):
    ev = run.trace.events()
    for w in range(run.trace.workers):
        mine = ev["worker"] == w
        start, end = ev["start"][mine], ev["end"][mine]
        assert np.all(end[:-1] <= start[1:]), f"worker {w} has overlapping rows"


def test_staleness_columns_and_times(run):
    st = run.trace.staleness()
    assert set(st) == {"worker", "node", "key", "value", "time"}
    n = len(st["time"])
    assert n > 0 and all(len(st[c]) == n for c in st)
    assert np.all(np.diff(st["time"]) >= 0)
    assert np.all(st["value"] >= 0)
    # measured on the run's clock: within the run, inside the backward row of the same node and key
    assert st["time"].min() >= 0 and st["time"].max() <= run.wall_s
    ev = run.trace.events()
    rows = defaultdict(list)
    columns = ("worker", "node", "phase", "key", "start", "end")
    for worker, node, phase, key, s, e in zip(*(ev[c].tolist() for c in columns), strict=True):
        if phase == 1:
            rows[(worker, node, key)].append((s, e))
    for worker, node, key, t in zip(*(st[c].tolist() for c in ("worker", "node", "key", "time")), strict=True):
        assert any(s <= t <= e for s, e in rows[(worker, node, key)]), f"staleness row of node {node} key {key} at {t}"


# ------------------------------------------------------------------ metrics


def test_utilization_in_unit_interval(run):
    u = run.utilization()
    assert len(u) == run.trace.workers
    assert all(0.0 <= x <= 1.0 for x in u)
    assert max(u) > 0
    assert utilization(run.trace, run.wall_s) == u
    assert utilization(run.trace, 0.0) == [0.0] * run.trace.workers


def test_staleness_summary_keys(run):
    s = run.staleness()
    assert set(s) == {"mean", "p95", "max", "count"}
    st = run.trace.staleness()
    assert s["count"] == len(st["value"])
    assert s["max"] == float(st["value"].max())
    assert s["mean"] == pytest.approx(float(st["value"].mean()))
    assert 0 <= s["mean"] <= s["max"] and s["p95"] <= s["max"]
    # per node
    names = run.trace.node_names
    per_node = sum(staleness_summary(run.trace, node=names.index(n))["count"] for n in staleness_histogram(run.trace))
    assert per_node == s["count"]
    hist = staleness_histogram(run.trace)
    assert sum(sum(h.values()) for h in hist.values()) == s["count"]
    assert set(run.summary()["staleness"]) == {"mean", "p95", "max"}


def test_empty_trace_metrics():
    trace = Trace([WorkerBuffer(), WorkerBuffer()], ["a", "b"], origin=0.0)
    assert staleness_summary(trace) == {"mean": 0.0, "p95": 0.0, "max": 0.0, "count": 0}
    assert staleness_histogram(trace) == {}
    assert utilization(trace, 1.0) == [0.0, 0.0]
    ev = trace.events()
    assert all(len(ev[c]) == 0 for c in EVENT_COLUMNS)
    doc = chrome_trace(trace)
    assert [e["ph"] for e in doc["traceEvents"]].count("X") == 0
    json.dumps(doc)


def test_buffer_snapshot_has_whole_rows_only():
    buf = WorkerBuffer()
    buf.record(1, 0, 7, 0.5, 0.75, 3)
    # the bytes of part of a next row (a writer appends whole rows at once; a reader must not rely on it)
    buf.event_table.view.current.extend(buf.event_table.packer.pack(2, 1, 8, 0, 1, 0.9, 1.0)[:-8])
    rows, stale = buf.snapshot()
    assert {k: v.tolist() for k, v in rows.items()} == {
        "row": [0], "node": [1], "phase": [0], "key": [7], "depth": [3], "messages": [1], "start": [0.5], "end": [0.75]
    }  # fmt: skip
    assert all(len(v) == 0 for v in stale.values())
    assert len(buf) == 1


# ------------------------------------------------------------------ Chrome trace export


def load_chrome(run, tmp_path, **kwargs):
    path = tmp_path / "trace.json"
    doc = run.trace.to_chrome(path, **kwargs)
    with open(path) as f:
        loaded = json.load(f)
    assert loaded == json.loads(json.dumps(doc))
    return loaded


def test_chrome_trace_is_valid_json_with_thread_names(run, tmp_path):
    doc = load_chrome(run, tmp_path)
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    meta = [e for e in events if e["ph"] == "M"]
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert names == {w + 1: f"worker {w}" for w in range(run.trace.workers)}
    assert any(e["name"] == "process_name" for e in meta)
    assert {e["ph"] for e in events} <= {"M", "X", "C"}


def test_chrome_trace_slices(run, tmp_path):
    doc = load_chrome(run, tmp_path)
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    ev = run.trace.events()
    assert len(slices) == len(ev["start"])
    by_tid = defaultdict(list)
    wall_us = run.wall_s * 1e6
    for e in slices:
        assert isinstance(e["tid"], int) and not isinstance(e["tid"], bool)
        assert 1 <= e["tid"] <= run.trace.workers
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float))
        assert e["ts"] >= 0 and e["dur"] >= 0
        assert e["ts"] + e["dur"] <= wall_us + 1e-3
        assert e["args"]["phase"] in PHASES and e["cat"] == e["args"]["phase"]
        assert e["name"] == f"{e['args']['node']} {e['args']['phase']}"
        assert run.placement[e["args"]["node"]] == e["tid"] - 1
        by_tid[e["tid"]].append(e)
    for tid, mine in by_tid.items():
        mine.sort(key=lambda e: e["ts"])
        for a, b in itertools.pairwise(mine):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-6, f"tid {tid}: {a} overlaps {b}"
    # microseconds: the slices add up to the busy time of the events (clipping only trims rounding)
    busy_us = float(np.sum(ev["end"] - ev["start"])) * 1e6
    total = sum(e["dur"] for e in slices)
    assert total == pytest.approx(busy_us, rel=1e-3, abs=len(slices) * 1e-3)
    # keys: every (node, phase, key) of the trace appears
    names = run.trace.node_names
    expected = sorted(
        (names[n], PHASES[p], k)
        for n, p, k in zip(ev["node"].tolist(), ev["phase"].tolist(), ev["key"].tolist(), strict=True)
    )
    assert sorted((e["args"]["node"], e["args"]["phase"], e["args"]["key"]) for e in slices) == expected


def test_chrome_trace_counters(run, tmp_path):
    doc = load_chrome(run, tmp_path)
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    depth = [e for e in counters if e["name"].startswith("queue depth")]
    stale = [e for e in counters if e["name"].startswith("staleness")]
    # each worker's queue depth: a counter holds its value, so one counter event at every change
    ev = run.trace.events()
    for w in range(run.trace.workers):
        depths = ev["depth"][ev["worker"] == w].tolist()
        changes = [d for j, d in enumerate(depths) if j == 0 or d != depths[j - 1]]
        mine = [e for e in depth if e["tid"] == w + 1]
        assert [e["args"]["depth"] for e in sorted(mine, key=lambda e: e["ts"])] == changes
        assert all(e["name"] == f"queue depth worker {w}" for e in mine)
    assert len(depth) > 0
    assert len(stale) == run.staleness()["count"] > 0
    wall_us = run.wall_s * 1e6
    for e in counters:
        assert e["ts"] >= 0 and e["ts"] <= wall_us + 1e-3
        (value,) = e["args"].values()
        assert isinstance(value, int) and value >= 0


def test_chrome_trace_without_counters(run, tmp_path):
    doc = load_chrome(run, tmp_path, counters=False)
    assert not [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert [e["ph"] for e in doc["traceEvents"]].count("X") == len(run.trace.events()["start"])


def test_write_trace_via_result(mlp_run, tmp_path):
    path = tmp_path / "run.json"
    mlp_run.write_trace(path)
    with open(path) as f:
        doc = json.load(f)
    assert doc["displayTimeUnit"] in ("ms", "ns")
    assert any(e["ph"] == "X" for e in doc["traceEvents"])


def test_untraced_run_has_empty_trace():
    ds = load_digits_dataset(batch_size=200, seed=0)
    result = train(models.mlp(input_width=64, hidden=16), ds, workers=2, epochs=1, trace=False)
    assert len(result.trace.events()["start"]) == 0
    assert result.utilization() == [0.0, 0.0]
    # staleness is still recorded (it does not depend on the event trace)
    assert result.staleness()["count"] == 4 * len(ds.train)


def test_chrome_trace_window_keeps_slices_starting_in_it(mlp_run):
    ev = mlp_run.trace.events()
    lo, hi = float(np.quantile(ev["start"], 0.25)), float(np.quantile(ev["start"], 0.75))
    doc = mlp_run.trace.to_chrome(window=(lo, hi))
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    expected = int(np.sum((ev["start"] >= lo) & (ev["start"] < hi)))
    assert len(slices) == expected > 0
    # the slices' starts, like the window, are microseconds since the run began (rounded to 1 ns)
    assert all(lo * 1e6 - 1e-3 <= e["ts"] <= hi * 1e6 + 1e-3 for e in slices)
    for e in doc["traceEvents"]:
        if e["ph"] == "C" and e["name"].startswith("staleness"):
            assert lo * 1e6 - 1e-3 <= e["ts"] <= hi * 1e6 + 1e-3
