"""Fuzzers for untrusted input: random mutations of graph JSON and random builder intents.

The promise under test: bad input gets an :class:`~amp_notebook.errors.AmpError` subclass, a
message, and nothing else. Anything else escaping (a ``TypeError`` from deep inside, ``RecursionError``,
``MemoryError``) is a bug, as is a refused builder intent that changed the graph, its positions, the undo
history or the revision, and as is a code payload that ran.

**Graph JSON.** Each case starts from a model-zoo graph's JSON, applies one to four random mutations
(replace a value with a nasty one, drop or add a field, duplicate or drop a list item, change a node's
kind, rewrite an expression as a code payload, or corrupt the text itself: truncate, flip a byte, nest
deeply, prepend a pickle header) and loads the result as a file would be loaded:
:func:`~amp_notebook.ir.serialize.parse_graph_json`, :func:`~amp_notebook.ir.serialize.graph_from_dict`,
then :func:`~amp_notebook.ir.validate.check`, Python code generation and a JSON round trip for graphs that
load. Every payload that would run code touches a sentinel file; the file must never appear.

**Builder intents.** Each case sends one intent to a :class:`~amp_notebook.ui.builder_model.BuilderModel`
holding a zoo graph (or an empty one): mostly well-formed intents with plausible values (node names and
ports of the graph, op kinds and their default configs) and sometimes a nasty value, a missing field, a
junk field, an unknown type or a non-dict. An intent either applies or raises an ``AmpError``; a refused
one must leave the model exactly as it was.

Run it::

    python -m amp_notebook.testing.fuzz --graphs 10000 --intents 10000 --seed 0 --json

It prints the outcome counts (by exception class) and exits 1 when any case broke the promise, printing
those cases (the seed reproduces them).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import reprlib
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amp_notebook.errors import AmpError
from amp_notebook.testing.mutations import code_payloads, corrupt_text, mutate_document, nasty_values, zoo_graphs

MAX_FAILURES_KEPT = 20


@dataclass
class FuzzReport:
    """Outcome counts of one fuzz run; ``failures`` are the cases that broke the promise (at most 20 kept)."""

    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    broken: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def only_amp_errors(self) -> bool:
        return self.broken == 0

    def fail(self, what: str) -> None:
        self.broken += 1
        if len(self.failures) < MAX_FAILURES_KEPT:
            self.failures.append(what)

    def undocumented(self, exc: BaseException, case: str) -> None:
        """An exception that is not an AmpError escaped: count it by class and keep where it came from."""
        self.outcomes[f"UNDOCUMENTED {type(exc).__name__}"] += 1
        self.fail(f"{case}: {_where(exc)}")

    def check_sentinel(self, sentinel: Path, case: str) -> None:
        """A code payload ran if the sentinel file exists: a failure (and the file goes, for the next case)."""
        if sentinel.exists():
            self.fail(f"{case}: a code payload ran (the sentinel file exists)")
            sentinel.unlink()

    def as_dict(self) -> dict[str, Any]:
        return {"cases": self.cases, "only_amp_errors": self.only_amp_errors, "broken": self.broken,
                "outcomes": dict(self.outcomes.most_common()), "seconds": round(self.seconds, 2),
                "failures": self.failures}  # fmt: skip


def fuzz_graph_json(cases: int, seed: int = 0) -> FuzzReport:
    """``cases`` mutated graph documents loaded as files are; see the module docstring."""
    from amp_notebook.ir.codegen import graph_to_python
    from amp_notebook.ir.serialize import graph_from_dict, graph_to_dict, parse_graph_json
    from amp_notebook.ir.validate import check

    rng = random.Random(seed)
    seeds = zoo_graphs()
    report = FuzzReport()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        sentinel = Path(tmp) / "code_ran"
        payloads = code_payloads(sentinel)
        for case in range(cases):
            doc = copy.deepcopy(rng.choice(seeds))
            for _ in range(rng.randint(1, 4)):
                doc = mutate_document(doc, rng, payloads)
            try:
                text = json.dumps(doc)
            except (ValueError, RecursionError):  # a mutation json.dumps cannot write: corrupt the seed instead
                text = json.dumps(rng.choice(seeds))
            raw = corrupt_text(text, rng) if rng.random() < 0.15 else text.encode("utf-8", "surrogatepass")
            report.cases += 1
            try:
                graph = graph_from_dict(parse_graph_json(raw, f"case {case}"), f"case {case}")
                problems = check(graph, require_loss=True)
                graph_to_python(graph)
                again = graph_from_dict(json.loads(json.dumps(graph_to_dict(graph))))
                if graph_to_dict(again) != graph_to_dict(graph):
                    report.fail(f"case {case} (seed {seed}): the JSON round trip changed the graph")
                report.outcomes["loaded, valid" if not problems else "loaded, validation problems"] += 1
            except AmpError as exc:
                report.outcomes[type(exc).__name__] += 1
            except Exception as exc:
                report.undocumented(exc, f"case {case} (seed {seed})")
            report.check_sentinel(sentinel, f"case {case} (seed {seed})")
    report.seconds = time.perf_counter() - began
    return report


# ------------------------------------------------------------------------------------------ builder intents
def random_intent(model: Any, rng: random.Random, payloads: list[str]) -> Any:
    """A random intent for ``model``: usually plausible, sometimes broken in one of several ways."""
    from amp_notebook.ir import ops as O
    from amp_notebook.ui import builder_schema as S
    from amp_notebook.ui.messages import INTENTS

    graph = model.graph
    names = list(graph.nodes) or ["x"]
    roll = rng.random()
    if roll < 0.03:
        return nasty_values(rng, payloads)  # not even a dict
    if roll < 0.06:
        return {"type": rng.choice(["exec", "eval", "__class__", "", "ADD_NODE", 7]), "code": rng.choice(payloads)}

    def name() -> str:
        return rng.choice(names)

    def out_port(node: str) -> str:
        ports = graph.nodes[node].op.output_ports() if node in graph.nodes else ()
        return rng.choice([*ports, "out", "nope"]) if ports else "out"

    def in_port(node: str) -> str:
        ports = graph.nodes[node].op.input_ports() if node in graph.nodes else ()
        return rng.choice([*ports, "in", "nope"]) if ports else "in"

    def position() -> Any:
        return rng.choice([[rng.uniform(-1e3, 1e3), rng.uniform(-1e3, 1e3)], {"x": 1, "y": 2}, None])

    kind = rng.choice(sorted(INTENTS))
    src, dst = name(), name()
    plausible: dict[str, dict[str, Callable[[], Any]]] = {
        "add_node": {"kind": lambda: rng.choice([*O.OPS, *(S.CELL_PREFIX + c for c in S.CELLS), "conv2d"]),
                     "name": lambda: rng.choice([None, f"n{rng.randrange(1000)}", name()]),
                     "position": position,
                     "config": lambda: rng.choice([None, {}, S.default_config(rng.choice(sorted(O.OPS)))]),
                     "worker": lambda: rng.choice([None, 0, 1, "1"])},
        "add_cell": {"kind": lambda: rng.choice([*S.CELLS, "lstm", "cell:gru_cell"]),
                     "name": lambda: rng.choice([None, f"c{rng.randrange(1000)}"]),
                     "hidden": lambda: rng.choice([4, "8", 0])},
        "move": {"positions": lambda: {name(): position() for _ in range(rng.randint(1, 3))}},
        "layout": {"positions": lambda: {name(): position() for _ in range(rng.randint(1, 3))},
                   "direction": lambda: rng.choice(["TB", "LR", None, "up"])},
        "connect": {"src": lambda: src, "src_port": lambda: out_port(src), "dst": lambda: dst,
                    "dst_port": lambda: in_port(dst)},
        "disconnect": {"dst": lambda: dst, "dst_port": lambda: in_port(dst)},
        "delete": {"nodes": lambda: [name() for _ in range(rng.randint(0, 2))],
                   "edges": lambda: [[dst, in_port(dst)]]},
        "set_property": {"node": lambda: src,
                         "field": lambda: rng.choice([*(f["name"] for f in S.fields(graph.nodes[src].kind)),
                                                      "name", "worker", "optimizer", "replicas",
                                                      "min_update_frequency", "nonsense"])
                         if src in graph.nodes else "name",
                         "value": lambda: rng.choice(["3", 3, "t < length", "t = t + 1", "adam", "", None, True,
                                                      f"r{rng.randrange(100)}", rng.choice(payloads)])},
        "undo": {}, "redo": {}, "auto_layout": {"direction": lambda: rng.choice(["TB", "LR", None, "diagonal"])},
        "load_model": {"model": lambda: rng.choice(["mlp", "rnn", "tree_lstm", "ggsnn", "resnet"])},
        "auto_place": {"strategy": lambda: rng.choice(["round_robin", "balanced"])},
        "pin": {"nodes": lambda: [name()], "worker": lambda: rng.choice([0, 1, None, "", 5])},
        "set_workers": {"workers": lambda: rng.choice([1, 2, 3, "4", 0, 300])},
    }  # fmt: skip
    fields = plausible[kind]
    intent: dict[str, Any] = {"type": kind}
    for key, make in fields.items():
        if rng.random() < 0.8:
            intent[key] = make()
    if fields and rng.random() < 0.15:
        intent[rng.choice(list(fields))] = nasty_values(rng, payloads)
    if rng.random() < 0.05:
        intent[rng.choice(["junk", "code", "__class__", "kind"])] = nasty_values(rng, payloads)
    return intent


def _state(model: Any) -> tuple[Any, ...]:
    from amp_notebook.ir.serialize import graph_to_dict

    return (graph_to_dict(model.graph), dict(model.positions), len(model._undo), len(model._redo), model.revision,
            model.workers)  # fmt: skip


def fuzz_builder_intents(cases: int, seed: int = 0, view_every: int = 25) -> FuzzReport:
    """``cases`` random intents sent to a builder model; every ``view_every``-th case also draws its view."""
    from amp_notebook.ui.builder_model import ZOO_MODELS, BuilderModel

    rng = random.Random(seed)
    report = FuzzReport()
    began = time.perf_counter()
    model = BuilderModel()
    with tempfile.TemporaryDirectory() as tmp:
        sentinel = Path(tmp) / "code_ran"
        payloads = code_payloads(sentinel)
        for case in range(cases):
            if case % 200 == 0:  # a fresh model now and then, so graphs do not only grow or only shrink
                model = BuilderModel()
                if rng.random() < 0.8:
                    model.load_model(rng.choice(ZOO_MODELS))
            intent = random_intent(model, rng, payloads)
            before = _state(model)
            report.cases += 1
            try:
                model.apply(intent)
                report.outcomes["applied"] += 1
                if case % view_every == 0:
                    json.dumps(model.view())
            except AmpError as exc:
                report.outcomes[type(exc).__name__] += 1
                if _state(model) != before:
                    report.fail(f"case {case} (seed {seed}): refused but changed the model: {_short(intent)}")
            except Exception as exc:
                report.undocumented(exc, f"case {case} (seed {seed}), {_short(intent)}")
            report.check_sentinel(sentinel, f"case {case} (seed {seed})")
    report.seconds = time.perf_counter() - began
    return report


def _where(exc: BaseException) -> str:
    """The exception and the line that raised it (enough to find the bug)."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {str(exc)[:200]}{at}"


def _short(value: Any) -> str:
    return reprlib.repr(value)


# -------------------------------------------------------------------------------------------------- command
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amp_notebook.testing.fuzz", description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", type=int, default=10_000, help="fuzzed graph JSON documents")
    parser.add_argument("--intents", type=int, default=10_000, help="fuzzed builder intents")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    results = {}
    for what, run, n in (("graph_json", fuzz_graph_json, args.graphs), ("builder_intents", fuzz_builder_intents,
                                                                         args.intents)):  # fmt: skip
        if n <= 0:
            continue
        report = run(n, args.seed)
        results[what] = report.as_dict()
        print(f"{what}: {report.cases} cases in {report.seconds:.1f} s, "
              f"{'only AmpError subclasses' if report.only_amp_errors else f'{report.broken} BROKEN'}: "
              + ", ".join(f"{k} {v}" for k, v in report.outcomes.most_common()), file=sys.stderr)  # fmt: skip
        for failure in report.failures:
            print(f"  - {failure}", file=sys.stderr)
    ok = all(r["only_amp_errors"] for r in results.values())
    if args.json:
        print(json.dumps({"seed": args.seed, "ok": ok, **results}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
