"""What each worker waited for: the split of idle time by cause, on hand-built event rows (every second known)
and on real runs (the split adds up to the idle time, causes from the known set)."""

from __future__ import annotations

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.data import list_reduction_dataset
from amp_notebook.errors import SettingError
from amp_notebook.runtime.train import train
from amp_notebook.trace import PHASES, waits_summary
from amp_notebook.trace.waits import END, LOCAL, NEW_KEY, SHORT, other_worker, waits

NODES = ["tokens", "step", "out", "cat"]
FWD, BWD = PHASES.index("fwd"), PHASES.index("bwd")


def events(rows: list[tuple[int, str, int, int, float, float]]) -> dict[str, np.ndarray]:
    """Columns from (worker, node, phase, key, start, end) rows, times in microseconds."""
    w, n, p, k, s, e = zip(*rows, strict=True)
    return {
        "worker": np.array(w), "node": np.array([NODES.index(x) for x in n]), "phase": np.array(p),
        "key": np.array(k), "start": np.array(s) * 1e-6, "end": np.array(e) * 1e-6,
    }  # fmt: skip


def test_each_gap_goes_to_what_ended_it() -> None:
    # key 1 is admitted on worker 0 at 0 us, steps there, hops to worker 1 (which waits 100 us for it), and
    # back; key 2 arrives on worker 0 after a 50 us wait for admission; worker 0 waits 5 us (short) once
    rows = [
        (0, "tokens", FWD, 1, 0, 10),
        (0, "step", FWD, 1, 10, 100),
        (1, "out", FWD, 1, 100, 150),  # worker 1: idle 0..100 (waited for worker 0)
        (0, "tokens", FWD, 2, 150, 160),  # worker 0: idle 100..150, key 2 had no event before: a new key
        (0, "cat", FWD, 2, 165, 200),  # idle 160..165: short
        (0, "step", BWD, 1, 200, 260),  # no gap before it: nothing to attribute
        (1, "cat", FWD, 2, 300, 320),  # worker 1: idle 150..300, key 2's last event was on worker 0
        (0, "cat", BWD, 2, 330, 340),  # worker 0: idle 260..330, key 2's last was on worker 1
        (1, "out", BWD, 2, 345, 350),  # worker 1: idle 320..345 ended by key 2, last on worker 0
        (0, "step", FWD, 2, 380, 400),  # worker 0: idle 340..380, key 2's last was on worker 1 (350)
        (0, "step", BWD, 2, 430, 450),  # worker 0: idle 400..430, key 2's last was here: local
    ]
    w0, w1 = waits(events(rows), NODES, PHASES, 2, min_gap_s=10e-6)
    us = pytest.approx
    assert w0.span_s == us(450e-6) and w1.span_s == us(450e-6)
    assert w0.busy_s == us((10 + 90 + 10 + 35 + 60 + 10 + 20 + 20) * 1e-6)
    assert w0.by_cause == {
        NEW_KEY: us(50e-6), SHORT: us(5e-6), other_worker(1): us((70 + 40) * 1e-6), LOCAL: us(30e-6),
    }  # fmt: skip
    # worker 1 waits 100 us for worker 0 at the start, 150 and 25 us more, then 100 us after its last event
    assert w1.by_cause == {other_worker(0): us((100 + 150 + 25) * 1e-6), END: us(100e-6)}
    for ww in (w0, w1):
        assert sum(ww.by_cause.values()) == us(ww.idle_s) and ww.busy_s + ww.idle_s == us(ww.span_s)
    assert w0.top[0][:3] == (other_worker(1), "cat", "bwd") and w0.top[0][4] == 1
    assert w1.top[0][:3] == (other_worker(0), "cat", "fwd")
    line = waits_summary([w0, w1]).splitlines()
    assert line[1].startswith("worker 1: busy 17%, idle 83% (61% worker 0, 22% the end)")


def test_no_rows_no_waits_and_a_negative_threshold_is_refused() -> None:
    empty = {k: np.zeros(0) for k in ("worker", "node", "phase", "key", "start", "end")}
    assert [w.span_s for w in waits(empty, NODES, PHASES, 2)] == [0.0, 0.0]
    assert "no events" in waits_summary(waits(empty, NODES, PHASES, 1))
    with pytest.raises(SettingError, match="min_gap_s"):
        waits(empty, NODES, PHASES, 1, min_gap_s=-1.0)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_real_run_splits_all_its_idle_time(engine: str) -> None:
    from amp_notebook import engine as native_engine

    if engine == "native" and not native_engine.available():
        pytest.skip(f"the native engine is not available here: {native_engine.status().get('reason')}")
    ds = list_reduction_dataset(n_train=200, n_val=20, bucket_size=20, seed=0)
    graph = models.rnn(hidden=16, embedding_dim=8, replicas=2)
    r = train(graph, ds, workers=2, mode="amp", max_active_keys=4, epochs=1, seed=0, engine=engine,
              placement="round_robin", validate=False)  # fmt: skip
    found = r.trace.waits(top=3)
    assert [w.worker for w in found] == [0, 1]
    known = {NEW_KEY, LOCAL, SHORT, END, other_worker(0), other_worker(1)}
    for ww in found:
        assert ww.busy_s > 0 and set(ww.by_cause) <= known - {other_worker(ww.worker)}
        assert sum(ww.by_cause.values()) == pytest.approx(ww.idle_s, rel=1e-9, abs=1e-12)
        assert len(ww.top) <= 3 and all(node in graph.nodes for _, node, _, _, _ in ww.top)
        assert ww.as_dict()["by_cause"] == ww.by_cause
    # every key was admitted while the run went: some worker waited for a new key or the other worker
    assert any(NEW_KEY in ww.by_cause or other_worker(1 - ww.worker) in ww.by_cause for ww in found)


def looped(events: dict[str, np.ndarray], workers: int, min_gap_s: float) -> list[tuple[dict, list]]:
    """The split gap by gap in plain Python (the module docstring's rules read literally): each worker's
    causes in the order first seen, and its (cause, node, phase) seconds and gaps in the order first seen."""
    worker, key, start, end = events["worker"], events["key"], events["start"], events["end"]
    first, last = float(start.min()), float(end.max())
    out = []
    for w in range(workers):
        rows = sorted((i for i in range(len(start)) if worker[i] == w), key=lambda i: start[i])
        causes: dict[str, float] = {}
        where: dict[tuple, list] = {}
        ends = [first] + [float(end[i]) for i in rows]
        starts = [float(start[i]) for i in rows] + [last]
        for i, (a, b) in enumerate(zip(ends, starts, strict=True)):
            gap = b - a
            if gap <= 0:
                continue
            if gap < min_gap_s or i == len(rows):
                name = SHORT if gap < min_gap_s else END
                causes[name] = causes.get(name, 0.0) + gap
                continue
            n = rows[i]
            before = [j for j in range(len(start)) if key[j] == key[n] and end[j] <= start[n]]
            if not before:
                name = NEW_KEY
            else:  # the latest end; among equal ends the one the trace holds last
                j = max(before, key=lambda j: (end[j], j))
                name = LOCAL if worker[j] == w else other_worker(int(worker[j]))
            causes[name] = causes.get(name, 0.0) + gap
            slot = where.setdefault((name, NODES[int(events["node"][n])], PHASES[int(events["phase"][n])]), [0.0, 0])
            slot[0] += gap
            slot[1] += 1
        out.append((causes, where))
    return out


@pytest.mark.parametrize(("seed", "min_gap_s"), [(seed, 12e-6) for seed in range(6)] + [(6, 0.0), (7, 5e-6)])
def test_the_vectorized_split_is_the_gap_by_gap_one(seed: int, min_gap_s: float) -> None:
    # random rows on 3 workers, times on a coarse grid so that ends tie with starts and with each other, some
    # events of zero length, some gaps under the threshold
    rng = np.random.default_rng(seed)
    n = 300
    start = rng.integers(0, 400, n) * 5e-6
    rows = {
        "worker": rng.integers(0, 3, n), "node": rng.integers(0, len(NODES), n), "phase": rng.integers(0, 2, n),
        "key": rng.integers(0, 25, n), "start": start, "end": start + rng.integers(0, 6, n) * 5e-6,
    }  # fmt: skip
    found = waits(rows, NODES, PHASES, 4, min_gap_s=min_gap_s, top=1000)
    expected = looped(rows, 4, min_gap_s)
    for ww, (causes, where) in zip(found, expected, strict=True):
        assert list(ww.by_cause) == list(causes)
        assert ww.by_cause == pytest.approx(causes, rel=1e-12, abs=1e-15)
        assert {(c, nd, ph): k for c, nd, ph, _, k in ww.top} == {t: k for t, (_, k) in where.items()}
        assert {(c, nd, ph): s for c, nd, ph, s, _ in ww.top} == pytest.approx(
            {t: s for t, (s, _) in where.items()}, rel=1e-12, abs=1e-15
        )
        seconds = [s for *_, s, _ in ww.top]
        assert seconds == sorted(seconds, reverse=True)
    assert found[3].by_cause == pytest.approx({END: float(rows["end"].max() - start.min())})  # no rows: all END
