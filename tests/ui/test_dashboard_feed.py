"""The dashboard's Python side: the data feed (frames of binary columns), trace files, and the widget's
handling of requests from the browser, all without a browser (frames are captured instead of sent)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.data import Dataset
from amp_notebook.runtime.run import Run
from amp_notebook.runtime.train import TrainResult, train
from amp_notebook.trace.io import from_columns, load_trace, save_trace
from amp_notebook.trace.metrics import staleness_histogram
from amp_notebook.ui.dashboard import Dashboard
from amp_notebook.ui.feed import (
    EVENT_WIRE,
    MEMBER_WIRE,
    STALENESS_WIRE,
    Frame,
    LiveFeed,
    keys_in_flight_series,
    pack,
    static_frames,
)
from tests.conftest import digits_dataset

DEADLINE_S = 20.0


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return digits_dataset(batch_size=20)


@pytest.fixture(scope="module")
def finished(digits: Dataset) -> TrainResult:
    return train(models.mlp(input_width=64, hidden=16), digits, workers=2, mode="amp", max_active_keys=4, epochs=2,
                 seed=0)  # fmt: skip


def background(digits: Dataset, epochs: int = 10_000, **options: Any) -> Run:
    kwargs = {"workers": 2, "mode": "amp", "max_active_keys": 2, "epochs": epochs, "seed": 0, "validate": False,
              **options}  # fmt: skip
    run = train(models.mlp(input_width=64, hidden=16), digits, background=True, **kwargs)
    assert isinstance(run, Run)
    return run


def until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def unpack(frame: Frame) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """What the browser does with a frame: each buffer viewed as its column's dtype."""
    tables: dict[str, dict[str, np.ndarray]] = {"events": {}, "staleness": {}, "members": {}}
    for spec, buf in zip(frame.content["columns"], frame.buffers, strict=True):
        dtype = np.dtype(spec["dtype"]).newbyteorder("<")
        col = np.frombuffer(buf, dtype=dtype)
        assert len(col) == spec["n"]
        tables[spec["table"]][spec["name"]] = col
    return tables["events"], tables["staleness"]


class Captured(Dashboard):
    """A dashboard whose frames and messages are kept for the test instead of sent to a browser."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.frames: list[Frame] = []
        self.messages: list[dict[str, Any]] = []
        super().__init__(*args, **kwargs)

    def _emit(self, frame: Frame) -> None:
        self.frames.append(frame)

    def send(self, content: Any, buffers: Any = None) -> None:
        self.messages.append(content)


# ---------------------------------------------------------------------------- packing
def test_pack_round_trips_every_column_with_its_wire_dtype() -> None:
    rng = np.random.default_rng(0)
    n = 50
    events = {"start": rng.random(n), "end": rng.random(n) + 1, "worker": rng.integers(0, 3, n),
              "phase": rng.integers(0, 3, n), "node": rng.integers(0, 9, n), "key": rng.integers(0, 1000, n),
              "depth": rng.integers(0, 7, n)}  # fmt: skip
    stale = {"time": rng.random(7), "worker": rng.integers(0, 3, 7), "node": rng.integers(0, 9, 7),
             "value": rng.integers(0, 5, 7)}  # fmt: skip
    content, buffers = pack(events, stale, run=1)
    assert content["run"] == 1
    wire = [*EVENT_WIRE, *STALENESS_WIRE, *MEMBER_WIRE]
    assert [c["name"] for c in content["columns"]] == [n for n, _ in wire]
    ev, st = unpack(Frame(content, buffers))
    for name, col in events.items():
        np.testing.assert_array_equal(ev[name], col)
    for name, col in stale.items():
        np.testing.assert_array_equal(st[name], col)


def test_pack_of_nothing_sends_empty_columns() -> None:
    content, buffers = pack(None, None)
    assert all(c["n"] == 0 for c in content["columns"]) and all(b == b"" for b in buffers)


# ---------------------------------------------------------------------------- live feed
def test_live_feed_sends_every_row_exactly_once(digits: Dataset) -> None:
    run = background(digits, epochs=3)
    feed = LiveFeed(run)
    frames = []
    while not feed.finished:
        frames.append(feed.poll())
        time.sleep(0.01)
    run.wait()
    got = [unpack(f)[0] for f in frames]
    events = {name: np.concatenate([g[name] for g in got]) for name in got[0]}
    want = run.trace.events()
    assert len(events["start"]) == len(want["start"]) == feed.rows_sent
    order = np.lexsort((events["start"], events["worker"]))
    order_want = np.lexsort((want["start"], want["worker"]))
    for name in ("start", "end", "worker", "phase", "node", "key", "depth"):
        np.testing.assert_array_equal(events[name][order], want[name][order_want].astype(events[name].dtype))
    stale = np.concatenate([unpack(f)[1]["value"] for f in frames])
    assert len(stale) == len(run.trace.staleness()["value"])
    meta = frames[-1].content["meta"]
    assert meta["finished"] and meta["status"]["state"] == "finished"
    hist = {node: dict(pairs) for node, pairs in meta["staleness_hist"].items()}
    assert hist == {node: dict(h) for node, h in staleness_histogram(run.trace).items()}
    assert len(meta["utilization"]) == 2 and all(0 < u <= 1 for u in meta["utilization"])
    assert meta["sample"]["loss"] is not None and meta["sample"]["keys_in_flight"] == 0
    assert sum(len(f.content["meta"]["epochs"]) for f in frames) == 3  # each epoch sent once


def test_live_feed_that_falls_behind_sends_the_newest_rows_and_counts_the_rest(digits: Dataset) -> None:
    run = background(digits, epochs=2)
    run.wait()
    feed = LiveFeed(run, max_rows=100)
    frame = feed.poll()
    ev, _ = unpack(frame)
    total = run.trace.event_totals()
    rows = sum(t.rows for t in total)
    assert len(ev["start"]) == 100 and feed.rows_skipped == rows - 100
    assert ev["start"].max() == pytest.approx(run.trace.events()["start"].max())
    assert frame.content["meta"]["rows_skipped"] == rows - 100


@pytest.mark.slow
def test_bounded_trace_keeps_memory_flat_in_a_long_run_and_the_feed_reports_what_it_missed(digits: Dataset) -> None:
    run = background(digits, trace_capacity=2_000)
    try:
        feed = LiveFeed(run)
        until(lambda: sum(b.total_rows for b in run.trace.buffers) > 30_000, "a long run (30k rows)")
        feed.poll()  # this reader fell behind: it gets what is held and learns how much it missed
        held = [len(b) for b in run.trace.buffers]
        assert all(h <= 2_000 for h in held), held
        written = sum(b.total_rows for b in run.trace.buffers)
        assert feed.rows_sent + feed.rows_skipped <= written
        assert feed.rows_skipped > 0
        totals = run.trace.event_totals()  # exact over the whole run despite the drops
        assert sum(t.rows for t in totals) >= written
    finally:
        run.stop()


def test_snapshot_holds_the_recent_window_and_moves_the_cursor(digits: Dataset) -> None:
    run = background(digits)
    try:
        until(lambda: run.status["keys_done"] > 50, "50 keys")
        feed = LiveFeed(run)
        snap = feed.snapshot(history_s=0.5)
        assert snap.content["type"] == "reset"
        ev, _ = unpack(snap)
        now = snap.content["meta"]["status"]["elapsed_s"]
        assert len(ev["end"]) > 0 and ev["end"].min() >= now - 0.5 - 1e-9
        nxt = unpack(feed.poll())[0]  # only rows written after the snapshot
        if len(nxt["start"]):
            assert nxt["end"].min() >= ev["end"].max() - 0.5
    finally:
        run.stop()


def test_a_view_of_a_short_run_shows_keys_in_flight_as_a_replay_does(digits: Dataset) -> None:
    """Samples a few times a second miss a run of a second; a view opened after it ended once showed 0 keys
    in flight throughout, while the replay of the same run showed up to max_active_keys. The last frame
    and a late view's first frame carry the series rebuilt from the rows, as the replay has it."""
    run = background(digits, epochs=2, max_active_keys=4)
    feed = LiveFeed(run)
    while not feed.finished:
        last = feed.poll()
        time.sleep(0.05)
    replayed = static_frames(run.trace)[-1].content["meta"]["keys_in_flight"]
    assert max(v for _, v in replayed) == 4
    assert last.content["meta"]["keys_in_flight"] == replayed
    assert last.content["meta"]["status"]["keys_in_flight"] == 0  # none in flight at the end, truly
    late = LiveFeed(run).snapshot(history_s=60.0)  # a view that opens after the run ended
    assert late.content["meta"]["keys_in_flight"] == replayed


def test_a_finished_run_reports_its_rate_over_the_whole_run(digits: Dataset) -> None:
    run = background(digits, epochs=2)
    result = run.wait()
    meta = LiveFeed(run).poll().content["meta"]
    status = meta["status"]
    assert meta["run_throughput"] == pytest.approx(status["train_instances_done"] / status["elapsed_s"])
    assert meta["run_throughput"] == pytest.approx(result.train_instances_per_s, rel=0.05)
    assert meta["run_throughput"] > 0


def test_the_live_rate_is_taken_over_the_last_seconds_not_one_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    """Instances complete a key at a time: a frame in which no key ended once read "0 instances/s"."""
    import amp_notebook.ui.feed as feed_module

    clock = [0.0]
    monkeypatch.setattr(feed_module.time, "perf_counter", lambda: clock[0])
    trace = SimpleNamespace(workers=1, node_names=[])
    quiet = {"keys_in_flight": 1, "recent_loss": None, "recent_accuracy": None}
    run = SimpleNamespace(trace=trace, history=[], status={})
    feed = LiveFeed(run)  # type: ignore[arg-type]
    rates = []
    for t, done in ((1.0, 100), (2.0, 100), (3.5, 100), (4.0, 300)):
        clock[0] = t
        run.status = {"train_instances_done": done, "elapsed_s": t, **quiet}
        rates.append(feed.meta()["sample"]["throughput"])
    assert rates[0] == pytest.approx(100.0)  # 100 in the first second
    assert rates[1] == pytest.approx(50.0)  # none in the last frame, 100 in the last 2 s
    assert rates[2] == pytest.approx(0.0)  # none since t = 1: a run that truly stalls reads 0
    assert rates[3] == pytest.approx(200 / 2.0)  # since t = 2.0, the newest point at least 2 s old


# ---------------------------------------------------------------------------- static traces
def test_static_frames_carry_every_row_in_chunks_then_the_metrics(finished: TrainResult) -> None:
    frames = static_frames(finished.trace, run=1, history=[e.as_dict() for e in finished.history], chunk_rows=500)
    rows = [unpack(f)[0] for f in frames if f.content["type"] == "rows"]
    assert len(rows) > 2
    starts = np.concatenate([r["start"] for r in rows])
    np.testing.assert_array_equal(starts, finished.trace.events()["start"])
    meta = frames[-1].content
    assert meta["type"] == "meta" and meta["run"] == 1
    assert meta["meta"]["rows"] == len(starts) and len(meta["meta"]["epochs"]) == 2
    assert sum(meta["meta"]["phase_rows"].values()) == len(starts)


def test_keys_in_flight_rebuilt_from_rows() -> None:
    # key 0 spans [0, 3], key 1 spans [1, 2], key 2 spans [3, 4]: 1, 2, 1, (0 then 1 at t=3), 0
    events = {"key": np.array([0, 1, 0, 2, 1]), "start": np.array([0.0, 1.0, 2.5, 3.0, 1.5]),
              "end": np.array([0.5, 1.2, 3.0, 4.0, 2.0])}  # fmt: skip
    series = keys_in_flight_series(events)
    assert series == [[0.0, 1.0], [1.0, 2.0], [2.0, 1.0], [3.0, 0.0], [3.0, 1.0], [4.0, 0.0]]


# ---------------------------------------------------------------------------- trace files
def test_save_and_load_npz_is_exact(finished: TrainResult, tmp_path: Path) -> None:
    path = save_trace(finished.trace, tmp_path / "run.npz")
    loaded = load_trace(path)
    a, b = finished.trace.events(), loaded.events()
    for name in ("worker", "node", "phase", "key", "depth", "start", "end"):
        np.testing.assert_array_equal(a[name], b[name])
    assert loaded.node_names == finished.trace.node_names
    assert loaded.staleness_totals().histogram == finished.trace.staleness_totals().histogram


def test_load_chrome_json_gives_back_the_slices(finished: TrainResult, tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    finished.trace.to_chrome(path)
    loaded = load_trace(path)
    a, b = finished.trace.events(), loaded.events()
    assert len(a["start"]) == len(b["start"])
    np.testing.assert_allclose(np.sort(b["start"]), np.sort(a["start"]), atol=2e-6)
    names = np.array(loaded.node_names)[b["node"]]
    assert sorted(names) == sorted(np.array(finished.trace.node_names)[a["node"]])
    assert sum(sum(h.values()) for h in staleness_histogram(loaded).values()) == len(finished.trace.staleness()["time"])
    # the counters carry no worker: each gradient goes back to the worker whose backward slice spans it
    want = np.bincount(finished.trace.staleness()["worker"], minlength=2)
    np.testing.assert_array_equal(np.bincount(loaded.staleness()["worker"], minlength=2), want)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("t.txt", "x", "expected a .npz"),
        ("t.json", "{not json", "not valid JSON"),
        ("t.json", '{"traceEvents": [{"ph": "X", "name": "a", "tid": 1, "ts": 0, "dur": 1}]}', "lacks args.node"),
        ("t.json", '{"events": []}', "traceEvents"),
    ],
)
def test_bad_trace_files_are_refused_with_the_reason(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_trace(path)


def test_npz_that_is_not_a_trace_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="not a trace saved by save_trace"):
        load_trace(tmp_path / "other.npz")
    with pytest.raises(FileNotFoundError, match="no file"):
        load_trace(tmp_path / "missing.npz")


# ---------------------------------------------------------------------------- the widget's Python side
def test_dashboard_streams_until_the_run_ends(digits: Dataset) -> None:
    run = background(digits, epochs=2)
    dash = Captured(run, rate_hz=20)
    run.wait()
    assert dash.wait_feed(DEADLINE_S)
    assert dash.frames[-1].content["meta"]["finished"]
    assert sum(len(unpack(f)[0]["start"]) for f in dash.frames) == sum(t.rows for t in run.trace.event_totals())
    assert dash.runs[0]["workers"] == 2 and "linear1" in dash.runs[0]["node_names"]
    dash.close()


def test_browser_requests_reach_the_run(digits: Dataset) -> None:
    run = background(digits)
    dash = Captured(run, rate_hz=2)
    try:
        on_msg = dash._on_msg
        on_msg(dash, {"type": "control", "action": "max_active_keys", "value": 6}, [])
        assert run.status["max_active_keys"] == 6
        assert dash.frames[-1].content["meta"]["status"]["max_active_keys"] == 6  # echoed at once
        on_msg(dash, {"type": "control", "action": "min_update_frequency", "value": 3}, [])
        assert set(run.status["min_update_frequency"].values()) == {3}
        on_msg(dash, {"type": "control", "action": "pause"}, [])
        assert run.state == "paused"
        on_msg(dash, {"type": "control", "action": "resume"}, [])
        assert run.state == "running"
        # bad requests: an error message to the widget, the run goes on
        on_msg(dash, {"type": "control", "action": "max_active_keys", "value": 0}, [])
        on_msg(dash, {"type": "control", "action": "min_update_frequency", "value": "x"}, [])
        on_msg(dash, {"type": "control", "action": "explode"}, [])
        errors = [m["message"] for m in dash.messages if m.get("type") == "error"]
        assert len(errors) == 3 and "max_active_keys" in errors[0] and "explode" in errors[2]
        assert run.state == "running"
        on_msg(dash, {"type": "control", "action": "stop"}, [])
        until(lambda: bool(run.done), "the run to stop")
    finally:
        run.stop()
        dash.close()


def test_view_opening_gets_a_snapshot_and_export_writes_a_chrome_trace(digits: Dataset, tmp_path: Path) -> None:
    run = background(digits)
    dash = Captured(run, rate_hz=2, export_path=tmp_path / "out.json")
    try:
        until(lambda: run.status["keys_done"] > 20, "20 keys")
        dash._on_msg(dash, {"type": "ready"}, [])
        assert dash.frames[-1].content["type"] == "reset"
        dash._on_msg(dash, {"type": "export", "download": True}, [])
        exported = next(m for m in dash.messages if m.get("type") == "exported")
        assert Path(exported["path"]) == (tmp_path / "out.json").resolve() and exported["download"]
        doc = json.loads((tmp_path / "out.json").read_text())
        assert any(e["ph"] == "X" for e in doc["traceEvents"])
    finally:
        run.stop()
        dash.close()


def test_replay_and_compare_send_all_rows_when_a_view_opens(finished: TrainResult, tmp_path: Path) -> None:
    path = save_trace(finished.trace, tmp_path / "amp.npz")
    for dash in (Captured.replay(finished), Captured.replay(path), Captured.compare(finished, path, labels=("a", "b"))):
        dash._on_msg(dash, {"type": "ready"}, [])
        metas = [f for f in dash.frames if f.content["type"] == "meta"]
        assert len(metas) == len(dash.runs)
        rows = sum(len(unpack(f)[0]["start"]) for f in dash.frames if f.content["type"] == "rows")
        assert rows == len(finished.trace.events()["start"]) * len(dash.runs)
    assert dash.mode == "compare" and [r["label"] for r in dash.runs] == ["a", "b"]
    dash._on_msg(dash, {"type": "control", "action": "pause"}, [])
    assert "no run" in dash.messages[-1]["message"]


def test_dashboard_refuses_what_it_cannot_show(digits: Dataset, finished: TrainResult) -> None:
    with pytest.raises(TypeError, match=r"Dashboard\.replay"):
        Dashboard(finished)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a TrainResult"):
        Dashboard.replay(42)
    with pytest.raises(ValueError, match="rate_hz"):
        Dashboard(rate_hz=100)
    run = background(digits)
    try:
        with pytest.raises(ValueError, match="still going"):
            Dashboard.replay(run)
    finally:
        run.stop()


def test_from_columns_builds_a_trace_every_reader_understands() -> None:
    n = 10
    events = {"worker": np.arange(n) % 2, "node": np.zeros(n, int), "phase": np.arange(n) % 3, "key": np.arange(n),
              "depth": np.zeros(n, int), "start": np.arange(n) * 0.1, "end": np.arange(n) * 0.1 + 0.05}  # fmt: skip
    stale = {k: np.zeros(0) for k in ("worker", "node", "key", "value", "time")}
    trace = from_columns(events, stale, ["a"], workers=2)
    assert trace.workers == 2 and len(trace.events()["start"]) == n
    assert trace.busy_s() == pytest.approx([0.25, 0.25])
    assert len(trace.window(0.0, 0.3)["start"]) == 3


def test_dashboard_benchmark_reports_both_sides_of_the_same_run() -> None:
    from amp_notebook.bench.dashboard import run as bench

    out = bench(repeats=1, n_train=2000)
    assert out["with_dashboard_per_s"] > 0 and out["without_per_s"] > 0
    assert out["ratio"] == pytest.approx(out["with_dashboard_per_s"] / out["without_per_s"])
    assert out["frames"] >= 1


def test_replay_of_a_simulated_run_shows_its_virtual_time(digits: Dataset) -> None:
    from amp_notebook.runtime.costs import CostModel

    sim = train(models.mlp(input_width=64, hidden=16), digits, workers=4, mode="pipeline", max_active_keys=4,
                epochs=1, seed=0, validate=False, backend="simulated", costs=CostModel.tflops_device())  # fmt: skip
    dash = Captured.replay(sim)
    dash._on_msg(dash, {"type": "ready"}, [])
    meta = dash.frames[-1].content["meta"]
    assert dash.runs[0]["workers"] == 4
    assert meta["duration_s"] == pytest.approx(float(sim.trace.events()["end"].max()))
    assert max(meta["utilization"]) <= 1.0 + 1e-9 and meta["keys_in_flight"]


def test_a_failing_feed_says_so_in_the_widget_and_the_run_goes_on(digits: Dataset) -> None:
    class Broken(Captured):
        def _emit(self, frame: Frame) -> None:
            raise RuntimeError("wire cut")

    run = background(digits)
    dash = Broken(run, rate_hz=20)
    try:
        assert dash.wait_feed(DEADLINE_S)
        assert dash.errors and "wire cut" in dash.errors[0]
        assert dash.messages[-1]["type"] == "error"
        assert run.state == "running"
    finally:
        run.stop()
        dash.close()


def test_interleaved_medians_swap_who_runs_first_by_default() -> None:
    from amp_notebook.bench.common import interleaved_medians

    calls: list[str] = []

    def contender(name: str) -> Any:
        return lambda: calls.append(name) or 1.0

    interleaved_medians(4, {"a": contender("a"), "b": contender("b")})
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    calls.clear()
    interleaved_medians(2, {"a": contender("a"), "b": contender("b")}, swap=False)
    assert calls == ["a", "b", "a", "b"]
