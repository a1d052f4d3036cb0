"""One self-contained HTML file for the reproduction's results: tables and plotly figures, opens offline.

plotly.js is embedded once, inline, in the first figure; the other figures reuse it. Each experiment
that ran gets a section: Table 2 (our ratio and the paper's per model and max_active_keys, both
backends, and the throughput table with the PyTorch peer), Fig. 5 (heatmaps of epochs and simulated
time to the target over the grid, and the curves), Fig. 6 (validation accuracy against time, sync and
AMP, per model) and appendix C (the estimate beside the paper's).
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from amp_notebook.ui.report import _plotly

TITLES = {
    "table2": "Table 2: throughput against max_active_keys",
    "fig5": "Fig. 5: the 8-replica RNN grid",
    "fig6": "Fig. 6: validation accuracy against time, sync vs AMP",
    "appendix-c": "Appendix C: a GGSNN on 1 TFLOPS devices",
}
STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;
margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}.note{color:#555;font-size:90%}"""


def write_report(results: dict[str, dict[str, Any]], path: str | Path, machine: dict[str, Any]) -> Path:
    """Write ``results`` (experiment name -> its result) as one HTML page; returns the path."""
    embedded = {"done": False}

    def figure(fig: Any) -> str:
        text = fig.to_html(full_html=False, include_plotlyjs=not embedded["done"])
        embedded["done"] = True
        return text

    where = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in machine.items())
    parts = [f"<h1>amp_notebook: the AMPNet paper reproduced</h1><p class='note'>{html.escape(where)}</p>"]
    for name, result in results.items():
        parts.append(f"<h2>{TITLES.get(name, name)}</h2>")
        parts.append(SECTIONS[name](result, figure))
    page = f"<!doctype html><html><head><meta charset='utf-8'><title>amp_notebook reproduce</title>" \
           f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>"  # fmt: skip
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def json_ready(value: Any) -> Any:
    """``value`` with NaN and infinities as None (JSON has neither) and tuples as lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def _esc(value: Any) -> str:
    return html.escape(value if isinstance(value, str) else json.dumps(value, default=str))


def _num(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th class='{'l' if i == 0 else ''}'>{html.escape(h)}</th>" for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f"<td class='{'l' if i == 0 else ''}'>{html.escape(str(c))}</td>" for i, c in enumerate(r))
        + "</tr>" for r in rows
    )  # fmt: skip
    return f"<table><tr>{head}</tr>{body}</table>"


def _notes(result: dict[str, Any]) -> str:
    notes = result.get("notes") or {}
    return "".join(f"<p class='note'>{html.escape(str(n))}</p>" for n in notes.values())


def table2_section(result: dict[str, Any], figure: Any) -> str:
    go = _plotly()
    rows = result["rows"]
    fig = go.Figure()
    for backend, colour in (("threads", "#4e79a7"), ("simulated", "#59a14f")):
        mine = [r for r in rows if r["backend"] == backend and r["mak"] != 1 and r["ours_ratio"] is not None]
        fig.add_bar(x=[f"{r['model']} K={r['mak']}" for r in mine], y=[r["ours_ratio"] for r in mine],
                    name=f"ours, {backend}", marker_color=colour)  # fmt: skip
    paper = [r for r in rows if r["backend"] == "threads" and r["mak"] != 1 and r["paper_ratio"] is not None]
    if paper:
        fig.add_bar(x=[f"{r['model']} K={r['mak']}" for r in paper], y=[r["paper_ratio"] for r in paper],
                    name="paper (16 cores)", marker_color="#e15759")  # fmt: skip
    fig.update_layout(barmode="group", yaxis_title="throughput / throughput at max_active_keys 1", height=420,
                      margin={"t": 30})  # fmt: skip
    header = ["model", "backend", "max_active_keys", "ours (instances/s)", "ours ratio", "paper ratio",
              "PyTorch peer (inst/s)", "rounds (instances/s)"]  # fmt: skip

    def line(r: dict[str, Any]) -> list[Any]:
        rounds = ", ".join(_num(v) for v in r.get("runs_per_s") or [])
        ratios = [_num(r["ours_ratio"], 2), _num(r["paper_ratio"], 2)]
        return [r["model"], r["backend"], r["mak"], _num(r["ours_per_s"]), *ratios, _num(r["peer_per_s"]), rounds]

    table = _table(header, [line(r) for r in rows])
    settings = f"<p class='note'>threads: {_esc(result['threads'])}; simulated: {_esc(result['simulated'])}. " \
               f"{html.escape(result['paper_source'])}</p>"  # fmt: skip
    return figure(fig) + table + settings + _notes(result)


def fig5_section(result: dict[str, Any], figure: Any) -> str:
    go = _plotly()
    from plotly.subplots import make_subplots

    ks, ms = result["max_active_keys"], result["min_update_frequency"]
    cell = {(p["max_active_keys"], p["min_update_frequency"]): p for p in result["grid"]}

    def matrix(threshold: str, field: str) -> list[list[Any]]:
        return [[cell[(k, m)]["to_threshold"][threshold][field] for m in ms] for k in ks]

    every = [f"{t:g}" for t in result.get("thresholds", [result["target"]])]
    thresholds = [t for t in every if any(v is not None for line in matrix(t, "epochs") for v in line)]
    missed = [f"{float(t):.0%}" for t in every if t not in thresholds]
    note = (f"<p class='note'>No grid point reached {', '.join(missed)} validation accuracy within "
            f"{result['max_epochs']} epochs.</p>" if missed else "")  # fmt: skip
    if not thresholds:
        return note + f"<p class='note'>{_esc(result['settings'])}</p>"

    titles = [f"{what} to {float(t):.0%}" for t in thresholds for what in ("epochs", "simulated seconds")]
    fig = make_subplots(
        rows=len(thresholds), cols=2, subplot_titles=titles, vertical_spacing=0.5 / (1 + len(thresholds))
    )
    for row, threshold in enumerate(thresholds, start=1):
        for col, field in ((1, "epochs"), (2, "time_s")):
            z = matrix(threshold, field)
            text = [[_num(v, 0 if col == 1 else 3) for v in line] for line in z]
            fig.add_trace(go.Heatmap(z=z, x=[str(m) for m in ms], y=[str(k) for k in ks], colorscale="Viridis",
                                     text=text, texttemplate="%{text}", showscale=False), row=row, col=col)  # fmt: skip
            fig.update_xaxes(title_text="min_update_frequency", type="category", row=row, col=col)
            fig.update_yaxes(title_text="max_active_keys", type="category", row=row, col=col)
    fig.update_layout(height=340 * len(thresholds), margin={"t": 40})
    curves = go.Figure()
    for p in result["grid"]:
        curves.add_scatter(x=p["curve"]["time_s"], y=p["curve"]["val_accuracy"], mode="lines+markers",
                           name=f"K={p['max_active_keys']}, M={p['min_update_frequency']}")  # fmt: skip
    curves.add_hline(y=result["target"], line_dash="dot")
    curves.update_layout(xaxis_title="simulated seconds", yaxis_title="validation accuracy", height=420,
                         margin={"t": 30})  # fmt: skip
    table = _table(
        ["max_active_keys", "min_update_frequency", "epochs to target", "time to target (s)", "final val acc",
         "staleness mean", "staleness p95", "instances/s (virtual)"],
        [[p["max_active_keys"], p["min_update_frequency"], _num(p["epochs_to_target"]), _num(p["time_to_target_s"], 3),
          _num(p["final_val_accuracy"], 3), _num(p["staleness"]["mean"], 2), _num(p["staleness"]["p95"]),
          _num(p["train_instances_per_s"])] for p in result["grid"]],
    )  # fmt: skip
    return figure(fig) + note + figure(curves) + table + f"<p class='note'>{_esc(result['settings'])}</p>"


def fig6_section(result: dict[str, Any], figure: Any) -> str:
    go = _plotly()
    out = []
    for name, c in result["curves"].items():
        fig = go.Figure()
        for mode, colour in (("sync", "#4e79a7"), ("amp", "#f28e2b")):
            curve = c[mode]
            label = f"{mode} (max_active_keys {curve['max_active_keys']})"
            fig.add_scatter(x=curve["time_s"], y=curve["val_accuracy"], mode="lines+markers", name=label,
                            line_color=colour)  # fmt: skip
        if c["target"] is not None:
            fig.add_hline(y=c["target"], line_dash="dot", annotation_text=f"target {c['target']:.0%}")
        fig.update_layout(title=f"{name}: {c['layout']}", xaxis_title="seconds (this machine, 2 workers)",
                          yaxis_title="validation accuracy", height=360, margin={"t": 50})  # fmt: skip
        out.append(figure(fig))

    def line(name: str, curve: dict[str, Any]) -> list[Any]:
        final = curve["val_accuracy"][-1] if curve["val_accuracy"] else None
        return [name, curve["mode"], curve["max_active_keys"], _num(curve["time_to_target_s"], 1),
                _num(curve["epochs_to_target"]), _num(final, 3), _num(curve["train_instances_per_s"]),
                _num(curve["staleness"]["mean"], 2)]  # fmt: skip

    rows = [line(name, c[mode]) for name, c in result["curves"].items() for mode in ("sync", "amp")]
    out.append(_table(["model", "mode", "max_active_keys", "time to target (s)", "epochs to target", "final val acc",
                       "instances/s", "staleness mean"], rows))  # fmt: skip
    return "".join(out) + _notes(result)


def appendix_c_section(result: dict[str, Any], figure: Any) -> str:
    paper = result["paper"]
    link = _num(result["busiest_link_bits_per_s"] / 1e9, 2)
    rows = [
        ["throughput (graphs/s)", _num(result["throughput_per_s"]), _num(paper["throughput_per_s"]),
         _num(result["analytic_throughput_per_s"])],
        ["busiest link (Gb/s)", link, _num(paper["bandwidth_bits_per_s"] / 1e9, 2), ""],
        ["node-state crossings per link per graph", _num(result["node_state_crossings_per_link"], 1), "1", ""],
    ]  # fmt: skip
    return (
        _table(["", "simulated", "paper", "analytic bound"], rows) + f"<p class='note'>{_esc(result['settings'])}</p>"
    )


SECTIONS = {"table2": table2_section, "fig5": fig5_section, "fig6": fig6_section, "appendix-c": appendix_c_section}

__all__ = ["json_ready", "write_report"]
