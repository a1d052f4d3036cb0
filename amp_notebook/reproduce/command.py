"""``amp-notebook reproduce {table2,fig5,fig6,appendix-c,all} [--quick] [--out DIR] [--json]``.

Runs the experiments, writes ``DIR/NAME.json`` (every figure, JSON) and ``DIR/NAME.html`` (a
self-contained report: plotly embedded, opens offline), and with ``--json`` prints the result as one JSON
object on the last stdout line (``all``: one object with a key per experiment). Progress, and anything
the PyTorch peers print, goes to stderr. ``--quick`` runs a small version of each (CI's smoke test: its
figures mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

EXPERIMENTS: dict[str, str] = {
    "table2": "amp_notebook.reproduce.table2",
    "fig5": "amp_notebook.reproduce.fig5",
    "fig6": "amp_notebook.reproduce.fig6",
    "appendix-c": "amp_notebook.reproduce.appendix_c",
}


def add_arguments(r: argparse.ArgumentParser) -> None:
    """The options of ``amp-notebook reproduce`` (the CLI names the command and its help)."""
    r.add_argument("experiment", choices=(*EXPERIMENTS, "all"), help="which experiment, or all: %(choices)s")
    r.add_argument("--quick", action="store_true", help="a small, fast version (smoke test; figures not meaningful)")
    r.add_argument("--out", type=Path, default=Path("amp_reproduce"), help="directory for NAME.html and NAME.json")
    r.add_argument("--json", action="store_true", help="print the result as one JSON object on the last stdout line")


def machine() -> dict[str, Any]:
    """What the figures were measured on (a shared machine's load included)."""
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "cpus": os.cpu_count(),
        "python": platform.python_version(), "platform": platform.platform(),
        "load_average_1min": os.getloadavg()[0],
    }  # fmt: skip


def run_experiments(names: list[str], quick: bool = False) -> dict[str, dict[str, Any]]:
    """Each experiment's ``run(quick)`` in turn, its wall time added as ``elapsed_s``."""
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        began = time.perf_counter()
        print(f"reproduce: {name}{' (quick)' if quick else ''}", file=sys.stderr, flush=True)
        with contextlib.redirect_stdout(sys.stderr):  # the peers print progress; stdout is for --json
            results[name] = importlib.import_module(EXPERIMENTS[name]).run(quick=quick)
        results[name]["elapsed_s"] = time.perf_counter() - began
    return results


def command(args: argparse.Namespace) -> int:
    from amp_notebook.reproduce.report import json_ready, write_report

    names = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    where = machine()
    results = json_ready(run_experiments(names, quick=args.quick))
    where["load_average_1min_after"] = os.getloadavg()[0]
    document = {**(results[args.experiment] if args.experiment != "all" else results), "machine": where}
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"{args.experiment}.json"
    json_path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    html_path = write_report(results, args.out / f"{args.experiment}.html", where)
    print(f"reproduce: wrote {html_path} and {json_path}", file=sys.stderr)
    if args.json:
        print(json.dumps(document))
    return 0


__all__ = ["EXPERIMENTS", "add_arguments", "command", "run_experiments"]
