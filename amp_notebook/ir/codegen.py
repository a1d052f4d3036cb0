"""Graph -> Python builder code that recreates the same graph.

The code is generated from data only: node names, op kinds and JSON-ready configs, each written as a
Python literal with :func:`repr` after checking it is plain data (None, bool, int, finite float, str,
lists and dicts of those), so no text taken from a graph can become code. Node names become variables
through a sanitizer, never verbatim.

Nodes are emitted in the graph's insertion order (so the rebuilt graph lists them in the same order, and
placement and topological tie-breaks agree). A node whose op kind has a builder method of the same name
(``g.linear``, ``g.cond``, ...) that takes every config field as a keyword is written with it, its inputs
passed as the variables of nodes already written; any other node (a new op kind, an input fed by a node
written later, such as a loop's back-edge) is written as ``g.add_node(O.Kind(...), {...}, name=...)`` and
its missing inputs are connected at the end with ``g.connect``. Node attributes and meta follow as
assignments. The rebuilt graph equals the original up to the order of its edge list.
"""

from __future__ import annotations

import inspect
import keyword
import math
import re
from typing import Any

from amp_notebook.ir.graph import Graph, GraphError, Node

_RESERVED = {"g", "O", "Ref", "Graph"}
# builder methods that take their inputs as *args, so the port count is implied
_VARARGS = {"concat": "n_inputs", "phi": "n_inputs"}
_RENAMED = {("bcast", "n_outputs"): "n"}


def graph_to_python(graph: Graph, var: str = "g") -> str:
    """Python source that rebuilds ``graph`` into a variable ``var`` (``g`` by default)."""
    names = _variables(graph)
    written: set[str] = set()
    refs: dict[tuple[str, str], str] = {}  # (node, output port) -> expression of its Ref
    later: list[str] = []
    lines = [
        "from amp_notebook.ir import ops as O",
        "from amp_notebook.ir.graph import Graph, Ref",
        "",
        f"{var} = Graph({_literal(graph.name)})",
    ]
    for name, node in graph.nodes.items():
        incoming = graph.incoming(name)
        ready = {p: refs.get((e.src, e.src_port)) for p, e in incoming.items()}
        line, outs = _builder_call(node, names[name], ready, var)
        if line is None:
            line, outs = _generic_call(node, names[name], ready, var)
        lines.append(line)
        refs.update(outs)
        written.add(name)
        for port, edge in incoming.items():
            if ready.get(port) is None:
                later.append(f"{var}.connect(Ref({_literal(edge.src)}, {_literal(edge.src_port)}), "
                             f"{_literal(name)}, {_literal(port)})")  # fmt: skip
        lines += _attributes(node, var)
    # inputs fed by a node written after their consumer (loop back-edges) connect once both exist
    lines += later
    if graph.replica_groups:
        lines.append(f"{var}.replica_groups = {_literal([list(gr) for gr in graph.replica_groups])}")
    return "\n".join(lines) + "\n"


def _builder_call(
    node: Node, var_name: str, ready: dict[str, str | None], var: str
) -> tuple[str | None, dict[tuple[str, str], str]]:
    """``x = g.kind(inputs..., name=..., **config)`` when a same-named builder method fits exactly."""
    kind, op = node.kind, node.op
    method = getattr(Graph, kind, None)
    if method is None or kind == "input" or not callable(method):
        return _input_call(node, var_name, var) if kind == "input" else (None, {})
    params = inspect.signature(method).parameters
    config = dict(op.config())
    if kind in _VARARGS:
        config.pop(_VARARGS[kind])
    kwargs = {_RENAMED.get((kind, k), k): v for k, v in config.items()}
    ports = list(op.input_ports())
    positional = [p for p in params if p != "self"][: 0 if kind in _VARARGS else len(ports)]
    if "name" not in params or any(k not in params or k in positional for k in kwargs):
        return None, {}
    if kind in _VARARGS and not any(p.kind == p.VAR_POSITIONAL for p in params.values()):
        return None, {}
    if any(ready.get(p) is None for p in ports) and kind not in _VARARGS:
        return None, {}  # builder methods need every input; the generic form connects the rest later
    # a keyword equal to the method's default is left out: the method passes that default to the op itself
    kwargs = {k: v for k, v in kwargs.items() if params[k].default is inspect.Parameter.empty or params[k].default != v}
    args = [ready.get(p) or "None" for p in ports]
    args += [f"name={_literal(node.name)}"] + [f"{k}={_literal(v)}" for k, v in kwargs.items()]
    call = f"{var}.{kind}({', '.join(args)})"
    return _assign(node, var_name, call)


def _input_call(node: Node, var_name: str, var: str) -> tuple[str | None, dict[tuple[str, str], str]]:
    c = node.op.config()
    if c["fill"] == "zeros" and c["dtype"] == "float":
        call = f"{var}.zeros({_literal(node.name)}, {_literal(c['width'])})"
    elif c["fill"] is None:
        call = f"{var}.input({_literal(node.name)}, width={_literal(c['width'])}, dtype={_literal(c['dtype'])})"
    else:
        return None, {}
    return _assign(node, var_name, call)


def _generic_call(
    node: Node, var_name: str, ready: dict[str, str | None], var: str
) -> tuple[str, dict[tuple[str, str], str]]:
    cls = type(node.op).__name__
    config = ", ".join(f"{k}={_literal(v)}" for k, v in node.op.config().items())
    inputs = ", ".join(f"{_literal(p)}: {ref}" for p, ref in ready.items() if ref is not None)
    call = f"{var}.add_node(O.{cls}({config}), {{{inputs}}}, name={_literal(node.name)})"
    outs = list(node.op.output_ports())
    if not outs:
        return call, {}
    return f"{var_name} = {call}.name", {(node.name, p): f"Ref({var_name}, {_literal(p)})" for p in outs}


def _assign(node: Node, var_name: str, call: str) -> tuple[str, dict[tuple[str, str], str]]:
    outs = list(node.op.output_ports())
    if not outs:
        return call, {}
    if len(outs) == 1 and outs[0] == "out" and not _returns_refs(node.kind):
        return f"{var_name} = {call}", {(node.name, "out"): var_name}
    targets = [f"{var_name}_{_identifier(p)}" for p in outs]
    lhs = ", ".join(targets) + ("," if len(targets) == 1 else "")
    return f"{lhs} = {call}", {(node.name, p): t for p, t in zip(outs, targets, strict=True)}


def _returns_refs(kind: str) -> bool:
    """Whether the builder method ``g.<kind>`` returns a tuple of Refs (one per output, even for one output)."""
    method = getattr(Graph, kind, None)
    return method is not None and str(inspect.signature(method).return_annotation).startswith("tuple")


def _attributes(node: Node, var: str) -> list[str]:
    lines = []
    target = f"{var}.nodes[{_literal(node.name)}]"
    for attr in ("min_update_frequency", "optimizer", "worker"):
        value = getattr(node, attr)
        if value is not None:
            lines.append(f"{target}.{attr} = {_literal(value)}")
    if node.meta:
        lines.append(f"{target}.meta.update({_literal(node.meta)})")
    return lines


def _variables(graph: Graph) -> dict[str, str]:
    used: set[str] = set(_RESERVED)
    out = {}
    for name in graph.nodes:
        base = _identifier(name)
        candidate, i = base, 1
        while candidate in used:
            candidate, i = f"{base}_{i}", i + 1
        used.add(candidate)
        out[name] = candidate
    return out


def _identifier(text: str) -> str:
    ident = re.sub(r"\W", "_", text, flags=re.ASCII) or "node"
    if ident[0].isdigit() or keyword.iskeyword(ident) or ident in _RESERVED:
        ident = f"n_{ident}"
    return ident


def _literal(value: Any) -> str:
    """``repr`` of plain data only; anything else is refused so no graph content can turn into code."""
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise GraphError(f"codegen: cannot write the non-finite number {value!r}")
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise GraphError(f"codegen: dict keys must be strings, got {list(value)!r}")
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    raise GraphError(f"codegen: cannot write {type(value).__name__} {value!r} as data")
