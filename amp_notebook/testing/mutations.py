"""What the fuzzers feed amp_notebook: seed graphs, nasty values, code payloads, and mutations of JSON
documents and their text.

Every mutation draws from a ``random.Random`` so a seed reproduces a case. The structural mutations work
on any JSON document (the graph-specific ones look for ``nodes`` and ``edges`` and do nothing without
them), so trace files and browser messages are mutated with the same tools.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any


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
