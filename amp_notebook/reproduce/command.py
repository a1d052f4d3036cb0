"""``amp-notebook reproduce {table1,table2,fig5,fig6,appendix-c,all} [--quick] [--data DIR] [--out DIR] [--json]``.

Runs the experiments, writes ``DIR/NAME.json`` (every figure, JSON) and ``DIR/NAME.html`` (a
self-contained report: plotly embedded, opens offline), and with ``--json`` prints the result as one JSON
object on the last stdout line (``all``: one object with a key per experiment). Progress, and anything
the PyTorch peers print, goes to stderr. ``--quick`` runs a small version of each (CI's smoke test: its
figures mean nothing, and the report says so on every table). ``--data ROOT`` trains each model on the
real data in its folder of ROOT (:mod:`amp_notebook.data.real` lists them) instead of the generated default;
``--engine`` picks the engine that runs the workers; ``--processes N`` trains Fig. 5's grid points N at a
time.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any

from amp_notebook.reproduce.machine import load_1min, machine
from amp_notebook.reproduce.workloads import DEFAULT_ENGINE, ENGINES, MODELS

EXPERIMENTS: dict[str, str] = {
    "table1": "amp_notebook.reproduce.table1",
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
    r.add_argument(
        "--data", type=Path, default=None, metavar="DIR",
        help="real data: each model reads its folder of DIR (mnist/: MNIST's IDX files; sst/: the Sentiment "
        "Treebank's train.txt and dev.txt; qm9/: QM9's .xyz files; conll/: CoNLL train.txt and dev.txt); a model "
        "without one keeps its generated data",
    )  # fmt: skip
    r.add_argument(
        "--engine", choices=ENGINES, default=DEFAULT_ENGINE,
        help="what runs the threaded workers: native loops without the interpreter lock, the Python engine, or "
        "auto (native wherever it is built and runs the graph; the report says which ran) (default: %(default)s)",
    )  # fmt: skip
    r.add_argument(
        "--processes", type=int, default=1, metavar="N",
        help="fig5: train N grid points at once in N processes (the same results as one process)",
    )  # fmt: skip
    r.add_argument(
        "--scale", type=float, default=1.0, metavar="S",
        help="fig5: train this fraction of the paper's 100,000 lists (and validate on as much of its 10,000); "
        "default 1, the paper's size",
    )  # fmt: skip
    r.add_argument("--max-epochs", type=int, default=None, metavar="N", help="fig5: at most N epochs per grid point")
    r.add_argument(
        "--models", nargs="+", choices=MODELS, default=None, metavar="M",
        help=f"table1, table2, fig6: only these of the paper's models ({', '.join(MODELS)}; default: all)",
    )  # fmt: skip


def run_experiments(
    names: list[str],
    quick: bool = False,
    data_root: Path | None = None,
    engine: str = DEFAULT_ENGINE,
    processes: int = 1,
    scale: float = 1.0,
    max_epochs: int | None = None,
    models: list[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Each experiment's ``run`` in turn (with the data and engine where it takes them), ``elapsed_s`` added."""
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        began = time.perf_counter()
        print(f"reproduce: {name}{' (quick)' if quick else ''}", file=sys.stderr, flush=True)
        experiment = importlib.import_module(EXPERIMENTS[name]).run
        accepted = inspect.signature(experiment).parameters
        given = {"data_root": data_root, "engine": engine, "processes": processes, "scale": scale}
        if max_epochs is not None:
            given["max_epochs"] = max_epochs
        if models is not None:
            given["models"] = tuple(models)
        options = {k: v for k, v in given.items() if k in accepted}
        with contextlib.redirect_stdout(sys.stderr):  # the peers print progress; stdout is for --json
            results[name] = experiment(quick=quick, **options)
        results[name]["elapsed_s"] = time.perf_counter() - began
    return results


def engines_ran(value: Any) -> list[str]:
    """Every engine that ran this machine's threads in ``value`` (rows and curves say which; the simulator's
    rows do not count: their figures are virtual time, the same whichever engine stepped the workers)."""
    found: set[str] = set()
    if isinstance(value, dict):
        is_run = "backend" in value or "mode" in value  # a table's row or a figure's curve
        if is_run and isinstance(value.get("engine"), str) and value.get("backend") != "simulated":
            found.add(value["engine"])
        for v in value.values():
            found.update(engines_ran(v))
    elif isinstance(value, list):
        for v in value:
            found.update(engines_ran(v))
    return sorted(found)


def command(args: argparse.Namespace) -> int:
    from amp_notebook.reproduce.report import json_ready, write_report

    names = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    engine, root = getattr(args, "engine", DEFAULT_ENGINE), getattr(args, "data", None)
    if root is not None:
        from amp_notebook.data.real import check_root

        check_root(root)
    where = machine(engine)
    results = json_ready(run_experiments(names, quick=args.quick, data_root=root, engine=engine,
                                         processes=max(1, getattr(args, "processes", 1)),
                                         scale=getattr(args, "scale", 1.0),
                                         max_epochs=getattr(args, "max_epochs", None),
                                         models=getattr(args, "models", None)))  # fmt: skip
    where["load_1min_after"] = load_1min()
    where["engines_ran"] = engines_ran(results)
    document = {**(results[args.experiment] if args.experiment != "all" else results), "machine": where}
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"{args.experiment}.json"
    json_path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    html_path = write_report(results, args.out / f"{args.experiment}.html", where, quick=args.quick)
    print(f"reproduce: wrote {html_path} and {json_path}", file=sys.stderr)
    if args.json:
        print(json.dumps(document))
    return 0


__all__ = ["EXPERIMENTS", "add_arguments", "command", "run_experiments"]
