"""Plotly report figures and the self-contained HTML report."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

from amp_notebook import engine as native_engine
from amp_notebook import models
from amp_notebook.data import load_digits_dataset
from amp_notebook.runtime.train import train
from amp_notebook.trace import PHASES
from amp_notebook.ui import report as R


@pytest.fixture(scope="module")
def result():
    ds = load_digits_dataset(batch_size=100, seed=0)
    return train(models.mlp(input_width=64, hidden=16), ds, workers=2, mode="amp", max_active_keys=4, epochs=3,
                 seed=0)  # fmt: skip


def test_gantt_has_one_box_per_row_coloured_by_phase(result):
    fig = R.gantt_figure(result.trace)
    ev = result.trace.events()
    assert [t.name for t in fig.data] == list(PHASES)  # amp mode: forward, backward and update rows
    for p, trace in enumerate(fig.data):
        mine = ev["phase"] == p
        assert len(trace.x) == int(mine.sum())
        assert trace.marker.color == R.PHASE_COLORS[PHASES[p]]
        np.testing.assert_allclose(sorted(trace.base), sorted(ev["start"][mine]))
        np.testing.assert_allclose(sorted(np.asarray(trace.base) + np.asarray(trace.x)), sorted(ev["end"][mine]))
        assert set(trace.y) <= {"worker 0", "worker 1"}
        node, _key, ms = trace.customdata[0]
        assert node in result.trace.node_names and ms >= 0
        assert "node %{customdata[0]}" in trace.hovertemplate and PHASES[p] in trace.hovertemplate
    assert list(fig.layout.yaxis.categoryarray) == ["worker 1", "worker 0"]
    assert sum(len(t.x) for t in fig.data) == len(ev["start"])


def test_gantt_window_and_row_limit(result):
    ev = result.trace.events()
    lo, hi = float(np.quantile(ev["start"], 0.4)), float(np.quantile(ev["start"], 0.6))
    fig = R.gantt_figure(result.trace, window=(lo, hi))
    assert sum(len(t.x) for t in fig.data) == len(result.trace.window(lo, hi)["start"]) > 0
    small = R.gantt_figure(result.trace, max_rows=10)
    assert sum(len(t.x) for t in small.data) == 10
    assert f"latest 10 of {len(ev['start'])} rows" in small.layout.title.text


def test_staleness_figure_one_histogram_per_parameterized_node(result):
    fig = R.staleness_figure(result.trace)
    expected = result.trace.staleness_totals().histogram
    assert [t.name for t in fig.data] == ["linear1", "linear2", "linear3", "linear4"]
    assert len(fig.data) == len(expected)
    assert sum(sum(t.y) for t in fig.data) == result.staleness()["count"]
    for t in fig.data:
        node = result.trace.node_names.index(t.name)
        assert dict(zip(t.x, t.y, strict=True)) == expected[node]


def test_learning_curves_against_epoch_and_time(result):
    fig = R.learning_curves(result)
    names = [t.name for t in fig.data]
    assert names == ["train loss"] * 2 + ["val loss"] * 2 + ["train accuracy"] * 2 + ["val accuracy"] * 2
    assert all(len(t.x) == 3 for t in fig.data)
    assert list(fig.data[0].x) == [1, 2, 3]  # epochs counted from 1, for people
    assert list(fig.data[1].x) == [e.end_s for e in result.history]
    assert list(fig.data[2].y) == [e.val_loss for e in result.history]


def test_utilization_figure_one_bar_per_worker(result):
    if result.worker_time is None:  # the Python engine: each worker's busy share of the wall time
        fig = R.utilization_figure(result)
        assert len(fig.data) == 1
        (bars,) = fig.data
        assert list(bars.x) == ["worker 0", "worker 1"]
        np.testing.assert_allclose(bars.y, [100 * u for u in result.utilization()])


def test_utilization_figure_splits_a_native_workers_life():
    ds = load_digits_dataset(batch_size=100, seed=0)
    r = train(models.mlp(input_width=64, hidden=16), ds, workers=2, mode="amp", max_active_keys=4, epochs=2, seed=0,
              engine="python")  # fmt: skip
    (bars,) = R.utilization_figure(r).data  # the Python engine counts no loop time: one busy bar
    np.testing.assert_allclose(bars.y, [100 * u for u in r.utilization()])
    if not native_engine.available() and os.environ.get("AMP_NATIVE", "1") == "0":
        pytest.skip("AMP_NATIVE=0: the native engine was not built on purpose")
    r = train(models.mlp(input_width=64, hidden=16), ds, workers=2, mode="amp", max_active_keys=4, epochs=2, seed=0,
              engine="native")  # fmt: skip
    fig = R.utilization_figure(r)
    assert [t.name for t in fig.data] == ["in ops", "engine", "waiting, spinning", "waiting, asleep"]
    assert fig.layout.barmode == "stack"
    total = np.sum([np.asarray(t.y) for t in fig.data], axis=0)
    np.testing.assert_allclose(total, [100.0, 100.0], rtol=1e-6)  # the parts fill each worker's life
    ops = fig.data[0]
    np.testing.assert_allclose(ops.customdata, [t["ops_s"] for t in r.worker_time])
    rows = dict(r.report().summary_rows())  # the summary table: the worker time as its one-line text
    assert rows["worker_time"].startswith("w0 ops ") and "; w1 ops " in rows["worker_time"]


def test_write_html_is_self_contained_with_the_summary(result, tmp_path):
    path = result.report().write_html(tmp_path / "run.html")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"<script[^>]*\bsrc\s*=", text)  # plotly.js is inline: the file opens offline
    assert "Plotly" in text and text.count("plotly-graph-div") >= 4
    s = result.summary()
    table = text.split("<h2>Summary</h2>", 1)[1].split("</table>", 1)[0]
    expected = {
        "wall_s": f"{s['wall_s']:.4g}",
        "train_instances_per_s": f"{s['train_instances_per_s']:.4g}",
        "train_instances": str(s["train_instances"]),
        "staleness": f"mean: {s['staleness']['mean']:.4g}",
        "val_accuracy": f"{s['val_accuracy'][-1]:.4g}",
    }
    for name, value in expected.items():
        row = re.search(rf"<tr><th>{name}</th><td>([^<]*)</td></tr>", table)
        assert row is not None and value in row.group(1), (name, value)
    for title in ("Learning curves", "Worker activity", "Gradient staleness", "Worker utilization", "Summary"):
        assert f"<h2>{title}</h2>" in text
    assert "<th>linear1</th><td>worker" in text  # the placement table


def test_report_summary_rows(result):
    rows = dict(result.report().summary_rows())
    assert rows["mode"] == "amp" and rows["workers"] == "2" and rows["epochs"] == "3"
    assert rows["train_instances"] == str(result.train_instances)


def test_missing_plotly_says_what_to_install(result, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)
    with pytest.raises(ImportError, match=r"pip install amp-notebook\[notebook\]"):
        R.gantt_figure(result.trace)
    with pytest.raises(ImportError, match=r"pip install amp-notebook\[notebook\]"):
        result.report().write_html(tmp_path / "unused.html")
