"""Post-run plotly figures and a one-file HTML report of a training run.

* :func:`gantt_figure`: one lane per worker, one box per handled message from its start to its end,
  coloured by phase (forward orange, backward blue, update yellow); hovering a box names the node, key,
  phase and duration. A box is a horizontal bar whose ``base`` is its start, one bar trace per phase. For
  a long run draw a ``window=(start_s, end_s)``; at most ``max_rows`` boxes are drawn (the latest).
* :func:`staleness_figure`: per parameterized node, how many gradients had each staleness (from the
  trace's exact totals, so it covers the whole run even when old trace rows were dropped).
* :func:`learning_curves`: training and validation loss and accuracy against epoch and against time.
* :func:`utilization_figure`: each worker's busy fraction of the wall time.
* :class:`Report`: all of them plus the summary table, as one self-contained HTML file (plotly.js inline,
  no external script), from ``TrainResult.report().write_html(path)``.

plotly is an optional dependency (the ``notebook`` extra); it is imported when a figure is made, and a
missing plotly raises an ImportError that says what to install.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.trace.buffers import PHASES

if TYPE_CHECKING:
    from amp_notebook.runtime.train import TrainResult
    from amp_notebook.trace.trace import Trace

PHASE_COLORS = {"fwd": "#f28e2b", "bwd": "#4e79a7", "update": "#edc948"}  # orange, blue, yellow
MAX_GANTT_ROWS = 20_000
FIGURE_HEIGHT = "420px"


def _plotly() -> Any:
    """``plotly.graph_objects``, or an ImportError saying how to get it."""
    try:
        import plotly.graph_objects as go
    except ImportError as exc:
        raise ImportError(
            "amp_notebook's report figures need plotly, which is not installed; "
            "install it with `pip install amp-notebook[notebook]` (or `pip install plotly`)"
        ) from exc
    return go


def gantt_figure(trace: Trace, window: tuple[float, float] | None = None, max_rows: int = MAX_GANTT_ROWS) -> Any:
    """Worker activity: one lane per worker, a box per message or update, coloured by phase."""
    go = _plotly()
    ev = trace.events() if window is None else trace.window(*window)
    shown = len(ev["start"])
    if shown > max_rows:  # the latest rows: what a user looks at after a run
        ev = {name: col[-max_rows:] for name, col in ev.items()}
    lanes = [f"worker {w}" for w in range(trace.workers)]
    names = np.array(trace.node_names, dtype=object)
    fig = go.Figure()
    for p, phase in enumerate(PHASES):
        mine = ev["phase"] == p
        if not mine.any():
            continue
        start, end = ev["start"][mine], ev["end"][mine]
        fig.add_trace(
            go.Bar(
                name=phase, orientation="h", base=start, x=end - start,
                y=[lanes[w] for w in ev["worker"][mine].tolist()],
                marker_color=PHASE_COLORS[phase], marker_line_width=0,
                customdata=np.stack([names[ev["node"][mine]], ev["key"][mine], (end - start) * 1e3], axis=1),
                hovertemplate="node %{customdata[0]}<br>key %{customdata[1]}<br>" + phase
                + "<br>%{customdata[2]:.3f} ms<extra></extra>",
            )
        )  # fmt: skip
    title = "Worker activity"
    if len(ev["start"]) < shown:
        title += f" (latest {len(ev['start'])} of {shown} rows)"
    fig.update_layout(
        title=title, barmode="overlay", bargap=0.2, xaxis_title="seconds since start",
        yaxis={"categoryorder": "array", "categoryarray": lanes[::-1]}, legend_title="phase",
    )  # fmt: skip
    return fig


def staleness_figure(trace: Trace) -> Any:
    """Per parameterized node: number of gradients with each staleness, over the whole run."""
    go = _plotly()
    hist = trace.staleness_totals().histogram
    fig = go.Figure()
    for node in sorted(hist):
        values = sorted(hist[node])
        fig.add_trace(go.Bar(name=trace.node_names[node], x=values, y=[hist[node][v] for v in values]))
    fig.update_layout(
        title="Gradient staleness per node", barmode="group", xaxis_title="staleness (updates since forward)",
        yaxis_title="gradients", legend_title="node",
    )  # fmt: skip
    return fig


def learning_curves(result: TrainResult) -> Any:
    """Loss and accuracy per epoch, against epoch (top) and against seconds since start (bottom)."""
    go = _plotly()
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=2, subplot_titles=("loss", "accuracy", "loss", "accuracy"))
    epochs = [e.epoch + 1 for e in result.history]  # counted from 1, as the dashboard and the builder count
    times = [e.end_s for e in result.history]
    series = [
        ("train loss", [e.train_loss for e in result.history], 1, "#4e79a7"),
        ("val loss", [e.val_loss for e in result.history], 1, "#f28e2b"),
        ("train accuracy", [e.train_accuracy for e in result.history], 2, "#59a14f"),
        ("val accuracy", [e.val_accuracy for e in result.history], 2, "#e15759"),
    ]
    for name, values, col, color in series:
        if not values or all(v is None for v in values):
            continue
        for row, x in ((1, epochs), (2, times)):
            fig.add_trace(
                go.Scatter(x=x, y=values, name=name, mode="lines+markers", line_color=color, legendgroup=name,
                           showlegend=row == 1),
                row=row, col=col,
            )  # fmt: skip
    for col in (1, 2):
        fig.update_xaxes(title_text="epoch", row=1, col=col)
        fig.update_xaxes(title_text="seconds since start", row=2, col=col)
    fig.update_layout(title="Learning curves", height=600)
    return fig


def utilization_figure(result: TrainResult) -> Any:
    """Each worker's busy fraction of the wall time (exact over the whole run). On the native engine, where
    the worker loops count their own time (``TrainResult.worker_time``), each bar is that loop's life split
    into its time inside ops, the engine's own work between steps, and waiting for messages (spinning, then
    asleep)."""
    go = _plotly()
    times = result.worker_time
    if times:
        return _worker_time_figure(go, times)
    u = result.utilization()
    busy = result.trace.busy_s()
    fig = go.Figure(
        go.Bar(
            x=[f"worker {w}" for w in range(len(u))], y=[100 * x for x in u], text=[f"{100 * x:.1f}%" for x in u],
            customdata=busy, hovertemplate="%{x}<br>busy %{customdata:.3f} s (%{y:.1f}%)<extra></extra>",
        )
    )  # fmt: skip
    fig.update_layout(title="Worker utilization", yaxis_title="busy % of wall time", yaxis_range=[0, 100])
    return fig


WORKER_TIME_PARTS = (  # (label, seconds of a TrainResult.worker_time row, colour)
    ("in ops", lambda t: t["ops_s"], "#1f77b4"),
    ("engine", lambda t: t["engine_s"], "#ff7f0e"),
    ("waiting, spinning", lambda t: t["waiting_s"] - t["asleep_s"], "#c7c7c7"),
    ("waiting, asleep", lambda t: t["asleep_s"], "#7f7f7f"),
)


def _worker_time_figure(go: Any, times: list[dict[str, Any]]) -> Any:
    names = [f"worker {t['worker']}" for t in times]
    fig = go.Figure()
    for label, seconds_of, colour in WORKER_TIME_PARTS:
        seconds = [max(0.0, seconds_of(t)) for t in times]
        shares = [100 * s / t["loop_s"] if t["loop_s"] > 0 else 0.0 for s, t in zip(seconds, times, strict=True)]
        fig.add_trace(go.Bar(
            name=label, x=names, y=shares, marker_color=colour, customdata=seconds,
            hovertemplate=f"%{{x}}<br>{label} %{{customdata:.3f}} s (%{{y:.1f}}%)<extra></extra>",
        ))  # fmt: skip
    fig.update_layout(title="Worker utilization", barmode="stack", yaxis_title="% of the worker loop's life",
                      yaxis_range=[0, 100])  # fmt: skip
    return fig


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join("-" if v is None else _text(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_text(v)}" for k, v in value.items())
    return str(value)


class Report:
    """A run's figures and summary; ``write_html(path)`` writes them as one self-contained file."""

    def __init__(self, result: TrainResult, window: tuple[float, float] | None = None) -> None:
        self.result = result
        self.window = window

    def summary_rows(self) -> list[tuple[str, str]]:
        """The summary table: (name, value as shown)."""
        from amp_notebook.runtime.result import worker_time_text

        s = self.result.summary()
        s.pop("placement", None)  # one row per node: shown in its own table
        return [(name, worker_time_text(value) if name == "worker_time" and value else _text(value))
                for name, value in s.items()]  # fmt: skip

    def figures(self) -> dict[str, Any]:
        r = self.result
        return {
            "Learning curves": learning_curves(r),
            "Worker activity": gantt_figure(r.trace, self.window),
            "Gradient staleness": staleness_figure(r.trace),
            "Worker utilization": utilization_figure(r),
        }

    def to_html(self) -> str:
        _plotly()
        import plotly.offline

        rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in self.summary_rows())
        placement = "".join(
            f"<tr><th>{html.escape(n)}</th><td>worker {w}</td></tr>" for n, w in self.result.placement.items()
        )
        parts = [
            f"<h2>{html.escape(title)}</h2>"
            + fig.to_html(full_html=False, include_plotlyjs=False, default_height=FIGURE_HEIGHT)
            for title, fig in self.figures().items()
        ]
        c = self.result.config
        title = f"amp_notebook run: {c.mode}, {c.workers} workers, {c.epochs} epochs"
        return (
            '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title>"
            f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>'
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "th,td{border:1px solid #ccc;padding:2px 8px;text-align:left}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><h2>Summary</h2><table>{rows}</table>"
            f"<h2>Placement</h2><table>{placement}</table>{''.join(parts)}</body></html>\n"
        )

    def write_html(self, path: str | Path) -> Path:
        """Write the report as one HTML file (plotly.js inline: it opens offline) and return its path."""
        path = Path(path)
        path.write_text(self.to_html(), encoding="utf-8")
        return path

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in self.summary_rows())
        return f"<table>{rows}</table><p>Report: <code>.figures()</code>, <code>.write_html(path)</code></p>"


__all__ = [
    "PHASE_COLORS", "Report", "gantt_figure", "learning_curves", "staleness_figure", "utilization_figure",
]  # fmt: skip
