"""Fuzzers for untrusted input: random mutations of graph JSON and random builder intents.

The promise under test (issue 11): bad input gets an :class:`~amp_notebook.errors.AmpError` subclass, a
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


# ---------------------------------------------------------------------------------------- seeds and values
def zoo_graphs() -> list[dict[str, Any]]:
    """The JSON of every model-zoo graph (small sizes): the starting points of the graph mutations."""
    from amp_notebook import models
    from amp_notebook.ir.serialize import graph_to_dict

    graphs = [
        models.mlp(input_width=8, hidden=6),
        models.rnn(vocab_size=14, hidden=5, embedding_dim=3),
        models.rnn(vocab_size=14, hidden=5, embedding_dim=3, replicas=2),
        models.tree_lstm(vocab_size=20, hidden=4),
        models.ggsnn(n_edge_types=2, feature_width=4, classes=3),
        models.ggsnn(n_edge_types=2, feature_width=4, task="node_selection"),
        models.ggsnn(n_edge_types=2, feature_width=4, task="regression"),
    ]
    return [graph_to_dict(g) for g in graphs]


def code_payloads(sentinel: Path) -> list[str]:
    """Expressions that would create ``sentinel`` if anything evaluated them as Python."""
    path = str(sentinel)
    return [
        f"__import__('os').system('touch {path}')",
        f"__import__('pathlib').Path({path!r}).touch()",
        f"open({path!r}, 'w')",
        f"().__class__.__base__.__subclasses__()[0]({path!r})",
        f"t.__class__.__init__.__globals__['__builtins__']['open']({path!r}, 'w')",
        f"[open({path!r}, 'w') for t in (1,)]",
        f"(lambda: open({path!r}, 'w'))()",
        f"exec(\"open({path!r}, 'w')\")",
        f"eval(\"open({path!r}, 'w')\")",
        f"t if open({path!r}, 'w') else t",
        "__builtins__",
        "t.__class__",
        "t ** t ** t ** t",
    ]


def nasty_values(rng: random.Random, payloads: list[str]) -> Any:
    """One value chosen to break loaders: wrong types, extremes, huge or deep structures, code."""
    choices: list[Callable[[], Any]] = [
        lambda: None, lambda: True, lambda: False, lambda: 0, lambda: -1, lambda: 1, lambda: 2,
        lambda: 2**31, lambda: 2**63, lambda: 2**64 + 1, lambda: 10**40, lambda: -(10**40), lambda: 1.5,
        lambda: -0.0, lambda: 1e308, lambda: 1e-320, lambda: "", lambda: " ",
        lambda: "x" * rng.choice([65, 257, 1001, 5000]),
        lambda: "key", lambda: "t", lambda: "in", lambda: "out", lambda: "linear", lambda: "phi", lambda: "__class__",
        lambda: "_t", lambda: "t < length", lambda: "t + 1", lambda: "\x00", lambda: "\ud800", lambda: "é",
        lambda: "-" * rng.choice([60, 999, 100_000]) + "1", lambda: "+".join(["t"] * rng.choice([60, 400, 200_000])),
        lambda: "(" * 200 + "t" + ")" * 200, lambda: "not " * 300 + "t", lambda: [], lambda: {},
        lambda: [[[]]], lambda: {"a": {"b": {}}}, lambda: [0] * 2000, lambda: {"__class__": 1},
        lambda: {"name": "adam", "lr": -1}, lambda: ["x", "out", "y", "in"], lambda: [1, 2, 3],
        lambda: {"x": 1, "y": 2}, lambda: _deep(rng.choice([10, 70, 150])), lambda: rng.choice(payloads),
    ]  # fmt: skip
    return rng.choice(choices)()


def _deep(levels: int) -> Any:
    value: Any = 0
    for i in range(levels):
        value = [value] if i % 2 else {"a": value}
    return value


# ------------------------------------------------------------------------------------ graph JSON mutations
def _containers(doc: Any) -> list[Any]:
    """Every dict and list in ``doc`` (iteratively: mutated documents may be deep)."""
    found, stack = [], [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, (dict, list)):
            found.append(value)
            stack.extend(value.values() if isinstance(value, dict) else value)
    return found


def _slots(container: Any) -> list[Any]:
    return list(container) if isinstance(container, dict) else list(range(len(container)))


def mutate_document(doc: dict[str, Any], rng: random.Random, payloads: list[str]) -> Any:
    """One random structural mutation of a graph document (in place where possible); returns the document."""
    from amp_notebook.ir import ops as O
    from amp_notebook.ui import builder_schema as S

    containers = [c for c in _containers(doc) if c]
    if rng.random() < 0.4:  # gentle: the document still fits the schema, so later checks get exercised
        return _gentle_mutation(doc, rng)
    op = rng.randrange(8)
    if op == 0 and containers:  # replace a value
        c = rng.choice(containers)
        c[rng.choice(_slots(c))] = nasty_values(rng, payloads)
    elif op == 1 and containers:  # drop a field or an item
        c = rng.choice(containers)
        slot = rng.choice(_slots(c))
        del c[slot]
    elif op == 2:  # add a junk field
        dicts = [c for c in _containers(doc) if isinstance(c, dict)]
        if dicts:
            rng.choice(dicts)[rng.choice(["junk", "code", "__class__", "kind", "name", "config", "x"])] = nasty_values(
                rng, payloads
            )
    elif op == 3:  # duplicate a list item (a node twice, an edge twice)
        lists = [c for c in _containers(doc) if isinstance(c, list) and c]
        if lists:
            c = rng.choice(lists)
            c.insert(rng.randrange(len(c) + 1), copy.deepcopy(rng.choice(c)))
    elif op == 4 and isinstance(doc, dict) and isinstance(doc.get("nodes"), list) and doc["nodes"]:
        node = rng.choice(doc["nodes"])  # another kind, with that kind's default config or the old one
        if isinstance(node, dict):
            kind = rng.choice(sorted(O.OPS))
            node["kind"] = kind
            if rng.random() < 0.7:
                node["config"] = S.default_config(kind)
    elif op == 5:  # a code payload in some string
        strings = [(c, s) for c in _containers(doc) for s in _slots(c) if isinstance(c[s], str)]
        if strings:
            c, s = rng.choice(strings)
            c[s] = rng.choice(payloads)
    elif op == 6:  # an extreme number in some number
        numbers = [(c, s) for c in _containers(doc) for s in _slots(c)
                   if isinstance(c[s], (int, float)) and not isinstance(c[s], bool)]  # fmt: skip
        if numbers:
            c, s = rng.choice(numbers)
            c[s] = rng.choice([0, -1, 2**24 + 1, 2**31, 10**30, 10**400, 1.5, 1e308, True])
    elif op == 7 and isinstance(doc, dict) and isinstance(doc.get("edges"), list) and doc["edges"]:
        edge = rng.choice(doc["edges"])  # rewire an edge end to another node or port
        if isinstance(edge, list) and len(edge) == 4 and isinstance(doc.get("nodes"), list):
            names = [n.get("name") for n in doc["nodes"] if isinstance(n, dict)] or ["x"]
            i = rng.randrange(4)
            edge[i] = rng.choice(names) if i % 2 == 0 else rng.choice(["out", "in", "in0", "in1", "true", "b7"])
    return doc


def _gentle_mutation(doc: Any, rng: random.Random) -> Any:
    """A change that keeps the document within the schema: another small width or count, a dropped or
    re-aimed edge, a node's runtime attributes, another predicate."""
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    edges = doc.get("edges") if isinstance(doc, dict) else None
    if not isinstance(nodes, list) or not isinstance(edges, list) or not nodes:
        return doc
    node = rng.choice(nodes)
    config = node.get("config") if isinstance(node, dict) else None
    op = rng.randrange(5)
    if op == 0 and isinstance(config, dict):
        ints = [k for k, v in config.items() if isinstance(v, int) and not isinstance(v, bool)]
        if ints:
            config[rng.choice(ints)] = rng.randint(1, 9)
    elif op == 1 and edges:
        edges.pop(rng.randrange(len(edges)))
    elif op == 2 and edges:
        edge = rng.choice(edges)
        if isinstance(edge, list) and len(edge) == 4:
            other = rng.choice(nodes)
            if isinstance(other, dict) and isinstance(other.get("name"), str):
                edge[rng.choice([0, 2])] = other["name"]
    elif op == 3 and isinstance(node, dict):
        node[rng.choice(["worker", "min_update_frequency"])] = rng.choice([None, 0, 1, 3])
        node["optimizer"] = rng.choice([None, {"name": "sgd", "lr": 0.1}, {"name": "adam", "beta1": 2.0}])
    elif op == 4 and isinstance(config, dict):
        for key in ("predicate", "by", "count", "key", "index"):
            if isinstance(config.get(key), str):
                config[key] = rng.choice(["t < length", "key % 2", "t + 1", "length", "pos // 2", "t < x", "1 / 0"])
    return doc


def corrupt_text(text: str, rng: random.Random) -> bytes:
    """A text-level corruption of a JSON document."""
    raw = text.encode("utf-8", "surrogatepass")
    op = rng.randrange(7)
    if op == 0:
        return raw[: rng.randrange(len(raw))]
    if op == 1:
        i = rng.randrange(len(raw))
        return raw[:i] + bytes([rng.randrange(256)]) + raw[i + 1 :]
    if op == 2:
        return b"[" * rng.choice([70, 5000, 200_000]) + b"]" * rng.choice([0, 5000])
    if op == 3:
        return b"\x80\x05\x95" + raw  # a pickle header
    if op == 4:
        return raw.replace(b"1", b"NaN", 1) if rng.random() < 0.5 else raw.replace(b"4", b"1e400", 1)
    if op == 5:
        return raw.replace(b'"', b"'", rng.randrange(1, 5))
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))


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
        "layout": {"positions": lambda: {name(): position() for _ in range(rng.randint(1, 3))}},
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
        "undo": {}, "redo": {}, "auto_layout": {},
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
