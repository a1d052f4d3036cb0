"""``amp-notebook validate GRAPH.json [...]``: every problem of graph files, before anything runs.

For each file it runs the checks that loading a graph runs (amp_notebook/ir/serialize.py), and stops at
the first step that finds problems, printing all of that step's problems:

0. can it be read (does it exist)?
1. is it JSON at all (not a pickle, a zip, binary, NaN, overflowing numbers, nesting 64 levels deep)?
2. does it fit the published JSON Schema (amp_notebook/ir/graph.schema.json)?
3. can every op be built from its config (expressions in the safe language) and every edge connected?
4. is the graph trainable: ports connected, loops through a Phi and an Isu, widths agreeing, a loss
   (``--inference`` drops the loss requirement)?

Exit status: 0 when every file is a valid graph, 2 when any is not (or is missing, or unreadable), 1 on
an internal error (a bug: the message says so). Bad input never prints a traceback. With ``--json`` stdout
holds one JSON object (the text goes to stderr): ``{"valid": bool, "files": [{"path", "valid", "step", "problems",
"nodes", "edges"}]}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from amp_notebook.errors import AmpError

INVALID, INTERNAL = 2, 1
STEP_NAMES = {
    "read": "cannot be read",
    "json": "not graph JSON",
    "schema": "does not fit the graph schema",
    "build": "ops or edges cannot be built",
    "validate": "not a trainable graph",
}


def add_validate_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument(
        "graphs", nargs="+", type=Path, metavar="GRAPH.json", help="graph files (what amp.save_graph writes)"
    )
    v.add_argument("--inference", action="store_true", help="the graph need not have a loss (not for training)")
    v.add_argument("--json", action="store_true", help="print one JSON object on stdout (the text goes to stderr)")


def cmd_validate(args: argparse.Namespace) -> int:
    reports = []
    for path in args.graphs:
        try:
            reports.append(check_file(path, require_loss=not args.inference))
        except Exception as exc:  # a bug in amp_notebook, not bad input: say so without a traceback
            print(
                f"{path}: internal error while checking it: {type(exc).__name__}: {exc}; this is a bug in "
                "amp_notebook, please report it with the file",
                file=sys.stderr,
            )
            return INTERNAL
    text = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the JSON object alone
    for report in reports:
        if report["valid"]:
            print(f"{report['path']}: valid graph ({report['nodes']} nodes, {report['edges']} edges)", file=text)
        else:
            n = len(report["problems"])
            print(
                f"{report['path']}: invalid ({STEP_NAMES[report['step']]}), {n} problem{'s' if n != 1 else ''}:",
                file=text,
            )
            for problem in report["problems"]:
                print(f"  - {problem}", file=text)
    valid = all(r["valid"] for r in reports)
    if args.json:
        print(json.dumps({"valid": valid, "files": reports}))
    return 0 if valid else INVALID


def check_file(path: Path, require_loss: bool = True) -> dict[str, Any]:
    """The problems of one graph file, from the first of the four steps that finds any."""
    from amp_notebook.ir.schema import graph_schema_problems
    from amp_notebook.ir.serialize import check_envelope, parse_graph_json, rebuild_graph
    from amp_notebook.ir.validate import check

    report: dict[str, Any] = {"path": str(path), "valid": False, "step": None, "problems": [], "nodes": None,
                              "edges": None}  # fmt: skip
    try:
        raw = path.read_bytes()
    except OSError as exc:
        found = "no such file" if isinstance(exc, FileNotFoundError) else f"cannot read it: {exc.strerror or exc}"
        return {**report, "step": "read", "problems": [f"{found}; check the path"]}
    try:
        data = parse_graph_json(raw, str(path))
    except AmpError as exc:
        return {**report, "step": "json", "problems": _problems(exc)}
    try:
        check_envelope(data, str(path))
    except AmpError as exc:
        return {**report, "step": "schema", "problems": _problems(exc)}
    problems = graph_schema_problems(data)
    if problems:
        return {**report, "step": "schema", "problems": problems}
    report.update(nodes=len(data["nodes"]), edges=len(data["edges"]))
    try:
        graph = rebuild_graph(data, str(path))
    except AmpError as exc:
        return {**report, "step": "build", "problems": _problems(exc)}
    problems = [p.message for p in check(graph, require_loss=require_loss)]
    if problems:
        return {**report, "step": "validate", "problems": problems}
    return {**report, "valid": True}


def _problems(exc: AmpError) -> list[str]:
    return list(getattr(exc, "problems", None) or [str(exc)])
