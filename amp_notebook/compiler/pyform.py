"""The compiled-from form: writing a compiled graph back as the Python function it came from.

``amp.compile`` records on the graph (``graph.compiled_from``) the model function's source, the constants
it was compiled with, the names it read from outside (constants, ``amp_notebook`` modules, ``amp.nn``
functions) and a fingerprint of the graph it produced: node names, kinds and configurations, edges and
replica groups. :func:`python_form` writes the function back, with the imports and constants it reads
and the ``amp_notebook.compile(...)`` call, as long as the graph still has that structure; node attributes
changed since (a worker pinned in the builder, an update frequency) follow as assignments. A graph edited
structurally, or one never compiled, is written as builder calls (``ir/codegen.py``), with a comment that
says why.

Everything written is either the user's own source text or literals (``repr`` of ints, floats, strings,
bools, None and tuples of them), so the text is exactly as trustworthy as the function it came from.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, field
from typing import Any

from amp_notebook.compiler import nn
from amp_notebook.compiler.source import Source, is_amp_module, is_constant
from amp_notebook.ir.codegen import graph_to_python
from amp_notebook.ir.graph import Graph

_ATTRS = ("min_update_frequency", "optimizer", "worker")


@dataclass
class CompiledFrom:
    """What ``amp.compile`` made a graph from (see the module docstring)."""

    function: str
    source: str
    filename: str
    first_line: int
    constants: dict[str, Any] = field(default_factory=dict)
    outside: dict[str, Any] = field(default_factory=dict)
    structure: dict[str, Any] = field(default_factory=dict)
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @staticmethod
    def record(source: Source, constants: dict[str, Any], graph: Graph) -> CompiledFrom:
        lines = source.text.splitlines()
        text = "\n".join(lines[source.tree.lineno - 1 :]) + "\n"  # the def without its decorators
        return CompiledFrom(
            function=source.name,
            source=text,
            filename=source.filename,
            first_line=source.first_line,
            constants=dict(constants),
            outside=dict(source.read_globals),
            structure=structure(graph),
            attributes=attributes(graph),
        )


def structure(graph: Graph) -> dict[str, Any]:
    return {
        "nodes": [[n.name, n.kind, n.op.config()] for n in graph.nodes.values()],
        "edges": sorted([e.src, e.src_port, e.dst, e.dst_port] for e in graph.edges),
        "replica_groups": [list(g) for g in graph.replica_groups],
    }


def attributes(graph: Graph) -> dict[str, dict[str, Any]]:
    return {n.name: {a: getattr(n, a) for a in _ATTRS} for n in graph.nodes.values()}


def compiled_form(graph: Graph, var: str = "g") -> tuple[str | None, str]:
    """(the compiled-from form, or None, and why not)."""
    record = graph.compiled_from
    if not isinstance(record, CompiledFrom):
        return None, "this graph was not made by amp.compile"
    if structure(graph) != record.structure:
        return None, f"this graph was edited since amp.compile({record.function}) made it"
    header = ["from __future__ import annotations", "", "import amp_notebook"]  # annotations may read defaults
    for name, value in record.outside.items():
        line = _outside(name, value)
        if line is None:
            return None, f"{record.function} reads {name!r}, which cannot be written as code"
        header.append(line)
    call = ", ".join([record.function, *(f"{k}={_literal(v)}" for k, v in record.constants.items())])
    if any(not _writable(v) for v in record.constants.values()):
        return None, "a constant given to amp.compile cannot be written as code"
    lines = [
        *header[:2],
        *dict.fromkeys(header[2:]),
        "",
        "",
        record.source.rstrip("\n"),
        "",
        "",
        f"{var} = amp_notebook.compile({call})",
    ]
    now = attributes(graph)
    for node, attrs in now.items():
        for attr, value in attrs.items():
            if value != record.attributes.get(node, {}).get(attr):
                if not _writable(value):
                    return None, f"the {attr} of {node!r} cannot be written as code"
                lines.append(f"{var}.nodes[{node!r}].{attr} = {_literal(value)}")
    return "\n".join(lines) + "\n", ""


def python_form(graph: Graph, var: str = "g") -> str:
    """The compiled-from form where it can be written; otherwise builder code with a comment saying why."""
    text, why = compiled_form(graph, var)
    if text is not None:
        return text
    return f"# {why}: written as builder calls\n" + graph_to_python(graph, var)


def _outside(name: str, value: Any) -> str | None:
    if is_constant(value):
        return f"{name} = {_literal(value)}" if _writable(value) else None
    if isinstance(value, types.ModuleType) and is_amp_module(value):
        if value.__name__ == "amp_notebook":
            return "import amp_notebook" if name == "amp_notebook" else f"import amp_notebook as {name}"
        package, _, leaf = value.__name__.rpartition(".")
        if value is nn:
            return "from amp_notebook import nn" if name == "nn" else f"from amp_notebook import nn as {name}"
        return f"from {package} import {leaf}" + ("" if leaf == name else f" as {name}")
    owner = getattr(value, "__module__", None)
    if owner == nn.__name__ and getattr(nn, getattr(value, "__name__", ""), None) is value:
        alias = "" if value.__name__ == name else f" as {name}"
        return f"from {nn.__name__} import {value.__name__}{alias}"
    return None


def _writable(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, tuple | list):
        return all(_writable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _writable(v) for k, v in value.items())
    return value is None or isinstance(value, bool | int | str)


def _literal(value: Any) -> str:
    return repr(value)
