"""The graph under construction, and how it becomes a valid IR graph.

While the compiler reads the model, it adds nodes to a :class:`DraftGraph`: a :class:`Graph` in which one
output may feed any number of inputs (a Python name read twice is simply used twice), and which tracks,
for every output port, its width, its dtype and the state fields its messages carry (``fields``: loop
counters, tree positions, beyond the key and the batch fields), so that joins can decide how to match
messages and errors can name widths. :func:`finalize` then turns the draft into the IR's strict form:

1. **dead code**: nodes from which no loss can be reached are removed (a carried value nobody reads,
   an unused helper result);
2. **shared parameters**: call sites that named the same parameterized node (``name="step"`` twice)
   become one node behind a multiplexer: each site's input passes an Isu that sets a state field to the
   site's number, a Phi merges them into the shared node, a Distribute on that field sends each result
   back to its site, and an Isu removes the field again (its inverse restores it for the backward pass).
   One node, one set of weights, every gradient accumulated into it;
3. **fan-out and ends**: an output read by several inputs gets a Bcast; an output nobody reads gets a
   Discard after a Split or Bcast (they count gradients per output) and a Sink anywhere else (a Cond
   branch, a loop exit: the message's producer waits for a backward, which a Sink answers with zeros).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from amp_notebook.ir import ops as O
from amp_notebook.ir.analysis import upstream
from amp_notebook.ir.graph import Edge, Graph, GraphError, Node, Ref
from amp_notebook.ir.ops.base import Op, OpError

_PASS_DTYPE = frozenset(
    {
        "identity",
        "cond",
        "phi",
        "isu",
        "distribute",
        "bcast",
        "split",
        "ungroup",
        "group",
        "flatmap",
        "partition",
        "collect",
        "gather",
        "select_rows",
    }
)


class DraftGraph(Graph):
    """A graph being compiled: outputs may fan out, and every output port's width, dtype and state fields
    are known as soon as it exists."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.line: int | None = None  # the source line being compiled, stamped into each new node's meta
        self.info: dict[tuple[str, str], tuple[int | None, str, frozenset[str]]] = {}
        self.shared: dict[str, list[str]] = {}  # parameter name -> the nodes of its call sites, in order

    def add_node(
        self,
        op: Op,
        inputs: Mapping[str, Ref | None] | Sequence[Ref | None] = (),
        name: str | None = None,
        **attrs: Any,
    ) -> Node:
        node = super().add_node(op, inputs, name, **attrs)
        if self.line is not None:
            node.meta.setdefault("line", self.line)
        try:
            self._describe_outputs(node)
        except OpError as exc:
            self.remove_node(node.name)
            raise GraphError(f"{node.describe()}: {exc}") from None
        return node

    def connect(self, src: Ref, dst: str, port: str) -> Edge:
        """As :meth:`Graph.connect`, except that one output may feed several inputs (resolved by finalize)."""
        for node_name in (src.node, dst):
            if node_name not in self.nodes:
                raise GraphError(f"connect {src} -> {dst}:{port}: there is no node {node_name!r}")
        if src.port not in self.nodes[src.node].op.output_ports():
            raise GraphError(f"connect {src} -> {dst}:{port}: no output {src.port!r}")
        if port not in self.nodes[dst].op.input_ports():
            raise GraphError(f"connect {src} -> {dst}:{port}: no input {port!r}")
        if any(e.dst == dst and e.dst_port == port for e in self.edges):
            raise GraphError(f"connect {src} -> {dst}:{port}: that input is already fed")
        edge = Edge(src.node, src.port, dst, port)
        self.edges.append(edge)
        return edge

    def describe(self, ref: Ref) -> tuple[int | None, str, frozenset[str]]:
        return self.info.get((ref.node, ref.port), (None, "float", frozenset()))

    def _describe_outputs(self, node: Node) -> None:
        op = node.op
        incoming = self.incoming(node.name)
        ins = {port: self.describe(Ref(e.src, e.src_port)) for port, e in incoming.items()}
        widths = op.infer_widths({port: info[0] for port, info in ins.items()})
        first = next((ins[p] for p in op.input_ports() if p in ins), None)
        fields = first[2] if first is not None else frozenset()
        dtype = first[1] if first is not None and node.kind in _PASS_DTYPE else "float"
        if isinstance(op, O.Input):
            dtype = op.dtype
        elif isinstance(op, O.Ungroup):
            fields = fields | {op.counter}
        elif isinstance(op, O.Flatmap | O.Partition | O.Collect):
            fields = fields | {op.field}
        elif isinstance(op, O.Isu):
            for name, expr in op.forward_updates.items():
                fields = fields - {name} if expr is None else fields | {name}
        for port in op.output_ports():
            self.info[(node.name, port)] = (widths.get(port), dtype, frozenset(fields))

    def rename(self, old: str, new: str) -> None:
        super().rename(old, new)
        self.info = {((new if n == old else n), p): v for (n, p), v in self.info.items()}

    def fresh(self, stem: str, taken: Mapping[str, Any] | None = None) -> str:
        name, i = stem, 2
        while name in self.nodes or (taken is not None and name in taken):
            name, i = f"{stem}_{i}", i + 1
        return name


def finalize(draft: DraftGraph) -> Graph:
    """The draft as a strict IR graph: dead nodes removed, shared parameters multiplexed, fan-out and unread
    outputs made explicit (see the module docstring). The result is not validated yet."""
    live = live_nodes(draft)
    for name in [n for n in draft.nodes if n not in live]:
        draft.remove_node(name)
    for parameter, sites in draft.shared.items():
        _share(draft, parameter, [s for s in sites if s in draft.nodes])
    return _materialize(draft)


def live_nodes(graph: Graph) -> set[str]:
    """Nodes from which a training loss can be reached (the losses included)."""
    return upstream(graph, [name for name, node in graph.nodes.items() if node.kind in O.TRAINING_LOSSES])


def _share(draft: DraftGraph, parameter: str, sites: list[str]) -> None:
    """Make the call sites ``sites`` of ``parameter`` one node (see the module docstring, step 2)."""
    if not sites:
        return
    if len(sites) == 1:
        if sites[0] != parameter:
            draft.rename(sites[0], parameter)
        return
    order = list(draft.nodes)
    at = order.index(sites[0])
    first = draft.nodes[sites[0]]
    field = _site_field(draft, parameter)
    inputs = [draft.incoming(s)["in"] for s in sites]
    readers = [[e for e in draft.edges if e.src == s] for s in sites]
    line = first.meta.get("line")
    for s in sites:
        draft.remove_node(s)
    before = set(draft.nodes)
    draft.line = line
    tags = [
        Ref(
            draft.add_node(O.Isu({field: str(i)}, {field: None}), [Ref(e.src, e.src_port)], f"{parameter}_site{i}").name
        )
        for i, e in enumerate(inputs)
    ]
    merged = draft.add_node(O.Phi(len(sites)), tags, name=f"{parameter}_sites")
    shared = draft.add_node(
        first.op,
        [Ref(merged.name)],
        name=parameter,
        min_update_frequency=first.min_update_frequency,
        optimizer=first.optimizer,
        worker=first.worker,
        meta=dict(first.meta),
    )
    route = draft.add_node(O.Distribute(field, len(sites)), [Ref(shared.name)], name=f"{parameter}_route")
    for i, edges in enumerate(readers):
        back = draft.add_node(O.Isu({field: None}, {field: str(i)}), [Ref(route.name, f"b{i}")], f"{parameter}_out{i}")
        for e in edges:
            draft.connect(Ref(back.name), e.dst, e.dst_port)
    added = [n for n in draft.nodes if n not in before]
    rest = [n for n in order if n in draft.nodes and n not in added]
    at = min(at, len(rest))
    draft.nodes = {n: draft.nodes[n] for n in [*rest[:at], *added, *rest[at:]]}


def _site_field(draft: DraftGraph, parameter: str) -> str:
    stem = "".join(c if c.isalnum() else "_" for c in parameter).strip("_") or "param"
    used = {f for info in draft.info.values() for f in info[2]}
    field, i = f"{stem}_site", 2
    while field in used or not field.isidentifier():
        field, i = f"{stem}_site{i}", i + 1
    return field if field[0].isalpha() else f"p_{field}"


def _materialize(draft: DraftGraph) -> Graph:
    """A plain Graph with a Bcast wherever an output feeds several inputs and a Discard or Sink wherever an
    output feeds none, each placed right after its producer."""
    readers: dict[tuple[str, str], list[Edge]] = {}
    for e in draft.edges:
        readers.setdefault((e.src, e.src_port), []).append(e)
    g = Graph(draft.name)
    sources: dict[tuple[str, str], list[Ref]] = {}
    taken = dict(draft.nodes)

    def add(op: Op, src: Ref, stem: str, meta: dict[str, Any]) -> Node:
        name = draft.fresh(stem, taken)
        taken[name] = None
        return g.add_node(op, [src], name=name, meta=dict(meta))

    for name, node in draft.nodes.items():
        g.add_node(
            node.op,
            name=name,
            min_update_frequency=node.min_update_frequency,
            optimizer=node.optimizer,
            worker=node.worker,
            meta=dict(node.meta),
        )
        line = {"line": node.meta["line"]} if "line" in node.meta else {}
        ports = node.op.output_ports()
        for port in ports:
            uses = readers.get((name, port), [])
            stem = name if len(ports) == 1 else f"{name}_{port}"
            if len(uses) > 1:
                fan = add(O.Bcast(len(uses)), Ref(name, port), f"{stem}_fanout", line)
                sources[(name, port)] = [Ref(fan.name, p) for p in fan.op.output_ports()]
            elif uses:
                sources[(name, port)] = [Ref(name, port)]
            else:
                end = O.Discard() if node.kind in ("split", "bcast") else O.Sink()
                add(end, Ref(name, port), f"{stem}_unused", line)
    for e in draft.edges:
        g.connect(sources[(e.src, e.src_port)].pop(0), e.dst, e.dst_port)
    return g
