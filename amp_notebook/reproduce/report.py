"""One self-contained HTML file for the reproduction's results: tables and plotly figures, opens offline.

plotly.js is embedded once, inline, in the first figure; the other figures reuse it. The page opens with
what ran where: this machine (cores, engine, load) beside the paper's (16 cores, its C++ runtime), and,
for a ``--quick`` run, that its figures are smoke-test sizes, which every table repeats. Each experiment
that ran gets a section: Table 1 (epochs and time to the target, ours on threads and simulated beside the
paper's, and the minibatched peers beside the paper's TensorFlow), Table 2 (throughput and its ratio to
max_active_keys 1, ours beside the paper's), Fig. 5 (heatmaps of epochs and simulated time to the target
over the grid, and the curves), Fig. 6 (validation accuracy against time, sync and AMP, per model) and
appendix C (the estimate beside the paper's). A PyTorch peer measured while the machine was loaded is
marked, with the load.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from amp_notebook.bench.link import NEAR_FACTOR
from amp_notebook.reproduce import paper
from amp_notebook.reproduce.machine import load_words
from amp_notebook.ui.report import _plotly

TITLES = {
    "table1": "Table 1: epochs and time to the target",
    "table2": "Table 2: throughput against max_active_keys",
    "fig5": "Fig. 5: the 8-replica RNN grid",
    "fig6": "Fig. 6: validation accuracy against time, sync vs AMP",
    "appendix-c": "Appendix C: a GGSNN on 1 TFLOPS devices",
}
STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;
margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}.note{color:#555;font-size:90%}.quick{background:#fff3cd;padding:4px 8px}"""
QUICK = "quick run: smoke-test sizes, a few keys and epochs; these figures mean nothing"
LOADED = "\u26a0"  # the mark of a peer measured on a loaded machine


def write_report(
    results: dict[str, dict[str, Any]], path: str | Path, machine: dict[str, Any], quick: bool = False
) -> Path:
    """Write ``results`` (experiment name -> its result) as one HTML page; returns the path."""
    embedded = {"done": False}

    def figure(fig: Any) -> str:
        text = fig.to_html(full_html=False, include_plotlyjs=not embedded["done"])
        embedded["done"] = True
        return text

    title = "amp_notebook and the AMPNet paper, side by side" + (" (quick run)" if quick else "")
    parts = [f"<h1>{html.escape(title)}</h1>", _machine_note(machine)]
    if quick:
        parts.append(f"<p class='quick'>{html.escape(QUICK)}.</p>")
    for name, result in results.items():
        parts.append(f"<h2>{TITLES.get(name, name)}{' (quick run)' if quick else ''}</h2>")
        if quick:
            parts.append(f"<p class='quick'>{html.escape(QUICK)}.</p>")
        parts.append(SECTIONS[name](result, figure))
    page = f"<!doctype html><html><head><meta charset='utf-8'><title>amp_notebook reproduce</title>" \
           f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>"  # fmt: skip
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def _machine_note(machine: dict[str, Any]) -> str:
    """This machine beside the paper's, in words, with the load rounded."""
    load = [v for v in (machine.get("load_1min"), machine.get("load_1min_after")) if v is not None]
    ran = machine.get("engines_ran") or []
    engine = " and ".join(ran) if ran else machine.get("engine", "auto")
    ours = (f"This machine: {machine.get('cores', '?')} cores, {engine} engine"
            + (f", {load_words(load)} (1-minute load average at the start and end)" if load else "")
            + (f", {str(machine['date']).replace('T', ' ')}" if machine.get("date") else "") + ".")  # fmt: skip
    theirs = f"The paper: {paper.MACHINE['cores']} cores, {paper.MACHINE['engine']}."
    return f"<p class='note'>{html.escape(ours)} {html.escape(theirs)}</p>"


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


def _data_note(result: dict[str, Any]) -> str:
    data = result.get("data") or {}
    lines = "".join(f"<li>{html.escape(model)}: {html.escape(source)}</li>" for model, source in data.items())
    return f"<p class='note'>Data:</p><ul class='note'>{lines}</ul>" if lines else ""


def _peer_cell(value: float | None, load: list[float] | None, is_loaded: bool | None, digits: int = 0) -> str:
    """A peer's figure, marked when it was measured on a loaded machine."""
    return _num(value, digits) + (f" {LOADED}" if is_loaded else "") if value is not None else "n/a"


def _near_cell(t: dict[str, Any]) -> str:
    """A threads row's paired ratio over its near-link rounds, with how many of its rounds those were."""
    runs = len(t.get("runs_per_s") or [])
    if t.get("ours_ratio_near_link") is None:
        return f"none of {runs}" if "near_link_rounds" in t else ""
    return f"{_num(t['ours_ratio_near_link'], 2)} ({t['near_link_rounds']} of {runs})"


def _config_cell(t: dict[str, Any]) -> str:
    """A threads row's inbox order and whether its messages ran bundled (``max_bundle`` None: the default)."""
    if not t.get("priority"):
        return ""
    return f"{t['priority']}, {'unbundled' if t.get('max_bundle') == 1 else 'bundled'}"


def _loaded_note(rows: list[dict[str, Any]], field: str) -> str:
    loads = [v for r in rows if r.get(field.replace("_load_1min", "_loaded")) for v in r[field]]
    if not loads:
        return ""
    return (f"<p class='note'>{LOADED} measured while the machine was loaded ({html.escape(load_words(loads))}, "
            "1-minute load average): other processes competed for the cores, and PyTorch's intra-op threads "
            "suffer most from that, so the figure reads low.</p>")  # fmt: skip


def table2_section(result: dict[str, Any], figure: Any) -> str:
    go = _plotly()
    rows = result["rows"]
    by = {(r["model"], r["backend"], r["mak"]): r for r in rows}
    keys = [(r["model"], r["mak"]) for r in rows if r["backend"] == "threads"]
    fig = go.Figure()
    ratio_rows = [k for k in keys if k[1] != 1 or k[0] in paper.FAMILY_BASE]
    labels = [f"{m} K={k}" for m, k in ratio_rows]
    for backend, colour, name in (("threads", "#4e79a7", "ours, threads here"),
                                  ("simulated", "#59a14f", "ours, 16 simulated cores")):  # fmt: skip
        fig.add_bar(x=labels, y=[by[(m, backend, k)]["ours_ratio"] if (m, backend, k) in by else None
                                 for m, k in ratio_rows], name=name, marker_color=colour)  # fmt: skip
    fig.add_bar(x=labels, y=[paper.ratio(m, k) for m, k in ratio_rows], name="paper, 16 cores", marker_color="#e15759")
    fig.update_layout(barmode="group", yaxis_title="throughput / throughput at max_active_keys 1", height=420,
                      margin={"t": 30})  # fmt: skip
    header = ["model", "max_active_keys", "paper train (inst/s)", "paper valid (inst/s)", "paper ratio",
              "ours, threads (inst/s)", "ratio", "ratio, paired rounds", "ratio, near-link rounds",
              "ratio the graph allows on 2 workers", "threads: inbox order, bundles",
              "ours, 16 simulated cores (inst/s)", "ratio",
              "PyTorch peer, threads (inst/s)", "rounds, threads (inst/s)"]  # fmt: skip

    def line(model: str, mak: int) -> list[Any]:
        t, sim = by[(model, "threads", mak)], by.get((model, "simulated", mak), {})
        rounds = ", ".join(_num(v) for v in t.get("runs_per_s") or [])
        return [model, mak, _num(t["paper_train_per_s"]), _num(t["paper_valid_per_s"]), _num(t["paper_ratio"], 2),
                _num(t["ours_per_s"]), _num(t["ours_ratio"], 2), _num(t.get("ours_ratio_paired"), 2),
                _near_cell(t), _num(t.get("bound_ratio"), 2), _config_cell(t), _num(sim.get("ours_per_s")),
                _num(sim.get("ours_ratio"), 2), _peer_cell(t.get("peer_per_s"), t.get("peer_load_1min"),
                                                           t.get("peer_loaded")), rounds]  # fmt: skip

    table = _table(header, [line(m, k) for m, k in keys])
    loads = sorted({tuple(r["load_1min"]) for r in rows if r.get("load_1min")})
    settings = (f"<p class='note'>Ratios are to max_active_keys 1 of the same model; the replicated RNNs' to the "
                f"one-replica RNN, as in the paper. 'ratio' divides the medians; 'ratio, paired rounds' is the "
                f"median of each round's ratio to the max_active_keys 1 run of the same round (the rounds "
                f"interleave), which the machine's drift between rounds leaves alone; 'ratio, near-link rounds' "
                f"is that median over the rounds whose two runs found the CPUs' cache-line round trip within "
                f"{NEAR_FACTOR:g}x of the fastest measured (a virtual machine's host can move its CPUs apart at any "
                f"time), with how many rounds those were; 'ratio the graph allows on 2 workers' is the same ratio "
                f"on 2 simulated devices as fast as one core here, with the row's placement, inbox order and keys, "
                f"free hand-offs and no driver: what the graph's structure leaves for 2 cores. "
                f"Threads: {_esc(result['threads'])}; while they ran, "
                f"{html.escape(load_words([v for pair in loads for v in pair]))} (1-minute load average). Simulated: "
                f"{_esc(result['simulated'])}, each device as fast as one core here. Paper: "
                f"{html.escape(paper.PAPER)}; "
                f"DyNet on the tagger, same machine: {paper.DYNET_TAGGER['without_autobatching']} sentences/s "
                f"without autobatching, {paper.DYNET_TAGGER['with_autobatching']} with.</p>")  # fmt: skip
    return (figure(fig) + table + _loaded_note(rows, "peer_load_1min") + _diverged_note(rows) + settings
            + _data_note(result) + _notes(result))  # fmt: skip


def _diverged_note(rows: list[dict[str, Any]]) -> str:
    """Which rows' runs diverged (NaN/inf) and ran again from the next seed; empty when none did."""
    hit = [f"{r['model']} ({r['backend']}, max_active_keys {r['mak']}): seeds {r['diverged_runs']}"
           for r in rows if r.get("diverged_runs")]  # fmt: skip
    if not hit:
        return ""
    return (
        f"<p class='note'>Training diverged (a NaN or infinity) in some timed runs, which then ran again from "
        f"the next seed; the figures are the runs that finished: {html.escape('; '.join(hit))}.</p>"
    )


def table1_section(result: dict[str, Any], figure: Any) -> str:
    rows = result["rows"]
    by = {(r["model"], r["backend"], r["mak"]): r for r in rows}
    keys = [(r["model"], r["mak"]) for r in rows if r["backend"] == "threads"]
    header = ["model", "max_active_keys", "paper epochs", "paper time (s)", "paper inst/s",
              "ours, threads: epochs", "time (s)", "inst/s", "reached", "ours, 16 simulated cores: epochs",
              "time (virtual s)", "inst/s", "reached"]  # fmt: skip

    def reached(r: dict[str, Any]) -> str:
        if not r:
            return ""
        diverged = r.get("diverged") or 0
        return f"{r['reached']}/{r['repeats']}" + (f" ({diverged} diverged)" if diverged else "")

    def line(model: str, mak: int) -> list[Any]:
        t, sim = by[(model, "threads", mak)], by.get((model, "simulated", mak), {})
        return [model, mak, _num(t["paper_epochs"], 1), _num(t["paper_time_s"], 1), _num(t["paper_train_per_s"]),
                _num(t["epochs_to_target"], 1), _num(t["time_to_target_s"], 1), _num(t["train_per_s"]), reached(t),
                _num(sim.get("epochs_to_target"), 1), _num(sim.get("time_to_target_s"), 2),
                _num(sim.get("train_per_s")), reached(sim)]  # fmt: skip

    amp = _table(header, [line(m, k) for m, k in keys])
    peers = [r for r in rows if r.get("peer")]
    peer_table = _table(
        ["model", "paper's TensorFlow: epochs", "time (s)", "inst/s", "ours' peer", "epochs", "time (s)", "inst/s",
         "reached"],
        [[r["model"], *(_num(v, 1) for v in paper.TABLE1_TENSORFLOW.get(r["model"], (None, None, None))[1::-1]),
          _num(paper.TABLE1_TENSORFLOW.get(r["model"], (None, None, None))[2]), r["peer"],
          _num(r["peer_epochs_to_target"], 1), _num(r["peer_time_to_target_s"], 1),
          _peer_cell(r["peer_train_per_s"], r.get("peer_load_1min"), r.get("peer_loaded")),
          f"{sum(p['epochs_to_target'] is not None for p in r['peer_runs'])}/{len(r['peer_runs'])}"] for r in peers],
    ) if peers else ""  # fmt: skip
    targets = "".join(
        f"<li>{html.escape(m)}: {html.escape(t['text'])} (the paper: "
        f"{html.escape(paper.TARGETS.get(paper.FAMILY_BASE.get(m, m), 'none'))}); {html.escape(t['note'])}</li>"
        for m, t in result["targets"].items()
    )  # fmt: skip
    loads = [v for r in rows for v in r.get("load_1min") or []]
    runs = f"{result['repeats']} run" + ("s" if result["repeats"] != 1 else "")
    note = (f"<p class='note'>Median over {runs} (seeds in turn); a run that misses the target "
            "counts as slower than any that reaches it, so a median needs more than half of the runs to reach it. "
            f"At most {_esc(result['max_epochs'])} epochs. Time includes validation after each epoch. Threads: "
            f"{_esc(result['threads'])}; {html.escape(load_words(loads))} while they ran. Simulated: "
            f"{_esc(result['simulated'])}.</p>")  # fmt: skip
    return (amp + peer_table + _loaded_note(peers, "peer_load_1min") + f"<p class='note'>Targets:</p><ul class='note'>"
            f"{targets}</ul>" + note + _data_note(result) + _notes(result))  # fmt: skip


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
    return (figure(fig) + note + figure(curves) + table + _fig5_averaging(result) + _fig5_findings(result)
            + f"<p class='note'>{_esc(result['settings'])}</p>")  # fmt: skip


def _fig5_averaging(result: dict[str, Any]) -> str:
    """The averaging column beside the same points averaged only at each epoch's end."""
    cell = {(p["max_active_keys"], p["min_update_frequency"]): p for p in result["grid"]}
    rows = []
    for p in result.get("averaging", []):
        base = cell[(p["max_active_keys"], p["min_update_frequency"])]
        rows.append([p["max_active_keys"], p["min_update_frequency"], _num(base["epochs_to_target"]),
                     _num(base["time_to_target_s"], 3), _num(p["epochs_to_target"]), _num(p["time_to_target_s"], 3),
                     _num(base["final_val_accuracy"], 3), _num(p["final_val_accuracy"], 3)])  # fmt: skip
    if not rows:
        return ""
    every = result.get("average_every")
    head = ["max_active_keys", "min_update_frequency", "epochs (epoch ends)", "time s (epoch ends)",
            f"epochs (every {every} keys)", f"time s (every {every} keys)", "final acc (epoch ends)",
            f"final acc (every {every} keys)"]  # fmt: skip
    return (f"<p class='note'>Replicas averaged at each epoch's end only, and also after every {every} training "
            f"keys (the paper: synchronizing more often did not help); to {result['target']:.0%}:</p>"
            + _table(head, rows))  # fmt: skip


def _fig5_findings(result: dict[str, Any]) -> str:
    """The paper's findings, read off the grid, in words."""
    f = result.get("findings")
    if not f or f.get("accuracy_compared") is None:
        return ""
    at = f"{f['accuracy_compared']:.0%}"
    best = ", ".join(f"{k} keys: {m}" for k, m in f["best_min_update_frequency"].items())
    inner = [k for k, yes in f["inner_best"].items() if yes]
    rates = "; ".join(f"min_update_frequency {m}: " + ", ".join(f"{_num(v)}" for v in per_k.values())
                      for m, per_k in f["throughput_per_s"].items())  # fmt: skip
    helps = [k for k, yes in f["averaging_helps"].items() if yes]
    lines = [
        f"{f['points_reaching_target']} of {len(result['grid'])} grid points reached {result['target']:.0%}; "
        f"every point reached {at}, the accuracy compared below.",
        f"Least time to {at} per max_active_keys at min_update_frequency {best}: neither the smallest nor the "
        f"largest for {len(inner)} of {len(f['inner_best'])} rows.",
        f"Throughput (instances per virtual second) at max_active_keys {', '.join(map(str, result['max_active_keys']))}"
        f": {rates}.",
        f"Averaging every {result.get('average_every')} keys reached {at} sooner for "
        + (f"{len(helps)} of {len(f['averaging_helps'])} rows ({', '.join(map(str, helps))} keys)." if helps
           else f"none of the {len(f['averaging_helps'])} rows."),
    ]  # fmt: skip
    return (
        "<p class='note'>Findings:</p><ul class='note'>"
        + "".join(f"<li>{html.escape(x)}</li>" for x in lines)
        + "</ul>"
    )


def fig6_section(result: dict[str, Any], figure: Any) -> str:
    go = _plotly()
    out = []
    for name, c in result["curves"].items():
        fig = go.Figure()
        metric = c.get("metric", "val_accuracy")
        for mode, colour in (("sync", "#4e79a7"), ("amp", "#f28e2b")):
            curve = c[mode]
            label = f"{mode} (max_active_keys {curve['max_active_keys']})"
            fig.add_scatter(x=curve["time_s"], y=curve[metric], mode="lines+markers", name=label,
                            line_color=colour)  # fmt: skip
        if c["target"] is not None:
            shown = f"{c['target']:.0%}" if metric == "val_accuracy" else f"{c['target']:.3g}"
            fig.add_hline(y=c["target"], line_dash="dot", annotation_text=f"target {shown}")
        fig.update_layout(title=f"{name}: {c['layout']}", xaxis_title="seconds (this machine, 2 workers)",
                          yaxis_title=metric.replace("val_", "validation "), height=360, margin={"t": 50})  # fmt: skip
        out.append(figure(fig))

    def line(name: str, metric: str, curve: dict[str, Any]) -> list[Any]:
        final = curve[metric][-1] if curve[metric] else None
        return [name, curve["mode"], curve["max_active_keys"], _num(curve["time_to_target_s"], 1),
                _num(curve["epochs_to_target"]), f"{_num(final, 3)} ({metric.replace('val_', 'validation ')})",
                _num(curve["train_instances_per_s"]), _num(curve["staleness"]["mean"], 2)]  # fmt: skip

    rows = [line(name, c.get("metric", "val_accuracy"), c[mode]) for name, c in result["curves"].items()
            for mode in ("sync", "amp")]  # fmt: skip
    out.append(_table(["model", "mode", "max_active_keys", "time to target (s)", "epochs to target", "final",
                       "instances/s", "staleness mean"], rows))  # fmt: skip
    return "".join(out) + _data_note(result) + _notes(result)


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


SECTIONS = {
    "table1": table1_section,
    "table2": table2_section,
    "fig5": fig5_section,
    "fig6": fig6_section,
    "appendix-c": appendix_c_section,
}

__all__ = ["json_ready", "write_report"]
