"""The static IR graph and the builder API that reads like the model.

A :class:`Graph` holds nodes (an op plus per-node runtime attributes: ``min_update_frequency``,
``optimizer``, ``worker``) and edges from an output port to an input port. Each output port feeds at
most one input port: fan-out is explicit (Bcast, Split), as in the paper, so that every forward message
gets exactly one backward.

The builder methods return :class:`Ref` (an output port) so code reads like the model::

    g = Graph("mlp")
    x = g.input("x", width=64)
    h = g.relu(g.linear(x, 128))
    g.softmax_cross_entropy(g.linear(h, 10), g.input("target", dtype="int"))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amp_notebook.errors import AmpError
from amp_notebook.ir import analysis
from amp_notebook.ir import ops as O
from amp_notebook.ir.ops.base import Op, Width


class GraphError(AmpError, ValueError):
    """A structural problem found while building or validating a graph."""


@dataclass(frozen=True)
class Ref:
    """An output port of a node: what builder methods take and return."""

    node: str
    port: str = "out"

    def __str__(self) -> str:
        return f"{self.node}:{self.port}"


@dataclass(frozen=True)
class Edge:
    """A connection from output ``src_port`` of node ``src`` to input ``dst_port`` of node ``dst``."""

    src: str
    src_port: str
    dst: str
    dst_port: str

    def __str__(self) -> str:
        return f"{self.src}:{self.src_port} -> {self.dst}:{self.dst_port}"


@dataclass
class Node:
    """One IR node: its op and the attributes the runtime reads (None means the run's default)."""

    name: str
    op: Op
    min_update_frequency: int | None = None
    optimizer: dict[str, Any] | None = None
    worker: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.op.kind

    def describe(self) -> str:
        return f"{type(self.op).__name__} {self.name!r}"


class Graph:
    """A static IR graph: nodes by name (in insertion order), edges, and replica groups."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.nodes: dict[str, Node] = {}
        self.edges: list[Edge] = []
        self.replica_groups: list[list[str]] = []
        # what amp.compile records about the Python function this graph came from (amp_notebook.compiler.pyform),
        # so GraphBuilder.to_python can write that form back; None for graphs built otherwise. Not serialized.
        self.compiled_from: Any = None
        self._counters: dict[str, int] = {}

    # ----------------------------------------------------------------- structure
    def add_node(
        self,
        op: Op,
        inputs: Mapping[str, Ref | None] | Sequence[Ref | None] = (),
        name: str | None = None,
        **attrs: Any,
    ) -> Node:
        """Add a node and connect its inputs (a mapping port -> Ref, or a sequence in port order)."""
        if not isinstance(op, Op):
            raise GraphError(f"add_node: expected an Op instance, got {type(op).__name__}")
        name = name or self._fresh_name(op.kind)
        if name in self.nodes:
            raise GraphError(f"node name {name!r} is already used by {self.nodes[name].describe()}; pick another")
        ports = op.input_ports()
        if not isinstance(inputs, Mapping):
            if len(inputs) > len(ports):
                raise GraphError(
                    f"{type(op).__name__} {name!r}: got {len(inputs)} inputs but it has ports {list(ports)}"
                )
            inputs = dict(zip(ports, inputs, strict=False))
        node = Node(name, op, **attrs)
        self.nodes[name] = node
        try:
            for port, ref in inputs.items():
                if ref is not None:
                    self.connect(ref, name, port)
        except GraphError:
            self.remove_node(name)  # a failed call leaves the graph as it was, so a corrected retry works
            raise
        return node

    def connect(self, src: Ref, dst: str, port: str) -> Edge:
        """Connect output ``src`` to input ``port`` of node ``dst``."""
        if not isinstance(src, Ref):
            raise GraphError(f"connect: expected a Ref (an output port) as source, got {src!r}")
        for node_name in (src.node, dst):
            if node_name not in self.nodes:
                raise GraphError(f"connect {src} -> {dst}:{port}: there is no node {node_name!r}")
        src_node, dst_node = self.nodes[src.node], self.nodes[dst]
        if src.port not in src_node.op.output_ports():
            raise GraphError(
                f"connect {src} -> {dst}:{port}: {src_node.describe()} has no output {src.port!r} "
                f"(outputs: {list(src_node.op.output_ports())})"
            )
        if port not in dst_node.op.input_ports():
            raise GraphError(
                f"connect {src} -> {dst}:{port}: {dst_node.describe()} has no input {port!r} "
                f"(inputs: {list(dst_node.op.input_ports())})"
            )
        for e in self.edges:
            if e.dst == dst and e.dst_port == port:
                raise GraphError(
                    f"connect {src} -> {dst}:{port}: that input is already fed by {e.src}:{e.src_port}; "
                    "disconnect it first or merge the two streams with a Phi"
                )
            if e.src == src.node and e.src_port == src.port:
                raise GraphError(
                    f"connect {src} -> {dst}:{port}: output {src} already feeds {e.dst}:{e.dst_port}; an output "
                    "feeds one input, so fan out with g.bcast(...) first"
                )
        edge = Edge(src.node, src.port, dst, port)
        self.edges.append(edge)
        return edge

    def disconnect(self, dst: str, port: str) -> Edge:
        for i, e in enumerate(self.edges):
            if e.dst == dst and e.dst_port == port:
                return self.edges.pop(i)
        raise GraphError(f"disconnect: input {dst}:{port} is not connected")

    def remove_node(self, name: str) -> Node:
        if name not in self.nodes:
            raise GraphError(f"remove_node: there is no node {name!r}")
        self.edges = [e for e in self.edges if name not in (e.src, e.dst)]
        for group in self.replica_groups:
            if name in group:
                group.remove(name)
        self.replica_groups = [g for g in self.replica_groups if len(g) > 1]
        return self.nodes.pop(name)

    def incoming(self, name: str) -> dict[str, Edge]:
        return {e.dst_port: e for e in self.edges if e.dst == name}

    def outgoing(self, name: str) -> dict[str, Edge]:
        return {e.src_port: e for e in self.edges if e.src == name}

    def topological_order(self) -> list[str]:
        """Node names in topological order of the graph without its loop back-edges, insertion order breaking
        ties (:func:`amp_notebook.ir.analysis.topological_order`, which says how loops are found)."""
        return analysis.topological_order(self)

    # ---------------------------------------------------------------- edits
    def rename(self, old: str, new: str) -> None:
        """Rename node ``old`` to ``new``, keeping its place in the insertion order, its edges and its replica
        group."""
        if old not in self.nodes:
            raise GraphError(f"rename {old!r}: there is no node {old!r}")
        if new == old:
            return
        if not isinstance(new, str) or not new:
            raise GraphError(f"rename {old!r}: expected a non-empty name, got {new!r}")
        if new in self.nodes:
            raise GraphError(f"rename {old!r}: the name {new!r} is used by {self.nodes[new].describe()}; pick another")
        self.nodes = {(new if k == old else k): v for k, v in self.nodes.items()}
        self.nodes[new].name = new
        self.edges = [
            Edge(new if e.src == old else e.src, e.src_port, new if e.dst == old else e.dst, e.dst_port)
            for e in self.edges
        ]
        self.replica_groups = [[new if n == old else n for n in group] for group in self.replica_groups]

    def replace_op(self, name: str, op: Op) -> list[Edge]:
        """Give node ``name`` a new op (its attributes stay); edges on ports the new op lacks are removed and
        returned."""
        if name not in self.nodes:
            raise GraphError(f"replace_op: there is no node {name!r}")
        if not isinstance(op, Op):
            raise GraphError(f"replace_op {name!r}: expected an Op instance, got {type(op).__name__}")
        ins, outs = set(op.input_ports()), set(op.output_ports())

        def vanishes(e: Edge) -> bool:
            return (e.dst == name and e.dst_port not in ins) or (e.src == name and e.src_port not in outs)

        dropped = [e for e in self.edges if vanishes(e)]
        self.edges = [e for e in self.edges if not vanishes(e)]
        self.nodes[name].op = op
        return dropped

    def assign_worker(self, name: str, worker: int | None) -> None:
        """Pin node ``name`` to ``worker`` (an int >= 0), or unpin it with None so placement chooses."""
        self._set_attr(name, "worker", worker)

    def set_min_update_frequency(self, name: str, value: int | None) -> None:
        """Node ``name`` updates after ``value`` gradients (an int >= 1), or None for the run's setting."""
        self._set_attr(name, "min_update_frequency", value)

    def set_optimizer(self, name: str, spec: Mapping[str, Any] | None) -> None:
        """Node ``name``'s own optimizer (a spec such as ``{"name": "adam", "lr": 2e-3}``), or None for the
        run's."""
        self._set_attr(name, "optimizer", None if spec is None else dict(spec) if isinstance(spec, Mapping) else spec)

    def tie_replicas(self, names: Sequence[str]) -> None:
        """Make ``names`` (parameterized nodes of one kind, in no other group) a replica group: their parameters
        start equal and the runtime averages them."""
        names = list(names)
        missing = [n for n in names if n not in self.nodes]
        if missing or len(names) < 2:
            raise GraphError(f"tie_replicas: expected two or more node names of this graph, got {names}")
        grouped = [n for n in names for g in self.replica_groups if n in g]
        if grouped:
            raise GraphError(f"tie_replicas: {self.nodes[grouped[0]].describe()} is in a replica group already")
        self.replica_groups.append(names)

    def replace_contents(self, other: Graph) -> None:
        """Make this graph hold ``other``'s name, nodes, edges and replica groups, keeping this object (so that
        references to it see the new content)."""
        if other is self:
            return
        self.name, self.nodes, self.edges = other.name, other.nodes, other.edges
        self.replica_groups = other.replica_groups

    def parameterized(self) -> list[str]:
        return [n.name for n in self.nodes.values() if n.kind in O.PARAMETERIZED]

    def init_params(self, seed: int = 0, dtype: Any = np.float32) -> dict[str, dict[str, np.ndarray]]:
        """Fresh parameters for every parameterized node; replicas in a group start equal."""
        rng = np.random.default_rng(seed)
        params = {
            name: node.op.init_params(rng, np.dtype(dtype))
            for name, node in self.nodes.items()
            if node.kind in O.PARAMETERIZED
        }
        for group in self.replica_groups:
            first = params[group[0]]
            for other in group[1:]:
                params[other] = {k: v.copy() for k, v in first.items()}
        return params

    def validate(self, require_loss: bool = False) -> None:
        """Raise :class:`~amp_notebook.ir.validate.ValidationError` listing every problem found."""
        from amp_notebook.ir.validate import validate

        validate(self, require_loss=require_loss)

    def width(self, ref: Ref) -> Width:
        """The inferred width of an output (None when unknown)."""
        from amp_notebook.ir.validate import infer_widths

        return infer_widths(self, strict=False)[0].get((ref.node, ref.port))

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.nodes)} nodes, {len(self.edges)} edges)"

    def _fresh_name(self, kind: str) -> str:
        while True:
            i = self._counters.get(kind, 0)
            self._counters[kind] = i + 1
            name = f"{kind}_{i}"
            if name not in self.nodes:
                return name

    def _set_attr(self, name: str, attr: str, value: Any) -> None:
        """Set a node attribute the runtime reads, checked as the validator checks it."""
        from amp_notebook.ir.validate import attribute_problem

        if name not in self.nodes:
            raise GraphError(f"{attr}: there is no node {name!r}")
        problem = attribute_problem(self.nodes[name], attr, value)
        if problem is not None:
            raise GraphError(problem)
        setattr(self.nodes[name], attr, value)

    def _add(self, op: Op, inputs: Sequence[Ref | None], name: str | None, attrs: dict[str, Any]) -> Node:
        return self.add_node(op, inputs, name=name, **attrs)

    def _single(self, op: Op, inputs: Sequence[Ref | None], name: str | None, attrs: dict[str, Any]) -> Ref:
        return Ref(self._add(op, inputs, name, attrs).name, "out")

    def _multi(self, op: Op, inputs: Sequence[Ref | None], name: str | None, attrs: dict[str, Any]) -> tuple[Ref, ...]:
        node = self._add(op, inputs, name, attrs)
        return tuple(Ref(node.name, p) for p in op.output_ports())

    # ------------------------------------------------------------------- builders
    def input(self, name: str, width: int | None = None, dtype: str = "float") -> Ref:
        """A graph input fed from the key's payload of the same name."""
        return self._single(O.Input(width=width, dtype=dtype), [], name, {})

    def zeros(self, name: str, width: int) -> Ref:
        """An input the controller fills with zeros of shape (batch size, width): an initial state."""
        return self._single(O.Input(width=width, fill="zeros"), [], name, {})

    def identity(self, x: Ref, name: str | None = None, **attrs: Any) -> Ref:
        return self._single(O.Identity(), [x], name, attrs)

    def linear(
        self, x: Ref, out_features: int, name: str | None = None, in_features: int | None = None,
        bias: bool = True, **attrs: Any,
    ) -> Ref:  # fmt: skip
        """``x @ W + b``; ``in_features`` defaults to the inferred width of ``x``."""
        if in_features is None:
            in_features = self.width(x)
            if in_features is None:
                raise GraphError(
                    f"linear({x}, {out_features}): the width of {x} is not known yet; pass in_features=..."
                )
        return self._single(O.Linear(in_features, out_features, bias=bias), [x], name, attrs)

    def embedding(
        self, ids: Ref, num_embeddings: int, embedding_dim: int, name: str | None = None, **attrs: Any
    ) -> Ref:
        return self._single(O.Embedding(num_embeddings, embedding_dim), [ids], name, attrs)

    def relu(self, x: Ref, name: str | None = None) -> Ref:
        return self._single(O.ReLU(), [x], name, {})

    def tanh(self, x: Ref, name: str | None = None) -> Ref:
        return self._single(O.Tanh(), [x], name, {})

    def sigmoid(self, x: Ref, name: str | None = None) -> Ref:
        return self._single(O.Sigmoid(), [x], name, {})

    def layer_norm(
        self, x: Ref, name: str | None = None, width: int | None = None, eps: float = 1e-5, **attrs: Any
    ) -> Ref:
        """``x`` normalized over its last axis, times a learned gain plus a learned bias; ``width`` defaults to
        the inferred width of ``x``."""
        if width is None:
            width = self.width(x)
            if width is None:
                raise GraphError(f"layer_norm({x}): the width of {x} is not known yet; pass width=...")
        return self._single(O.LayerNorm(width, eps), [x], name, attrs)

    def dropout(self, x: Ref, p: float = 0.5, name: str | None = None, seed: int = 0) -> Ref:
        """Zeroes elements with probability ``p`` (scaling the rest by 1 / (1 - p)) for training keys, with a
        mask drawn from the message's state; validation keys pass through."""
        return self._single(O.Dropout(p, seed), [x], name, {})

    def add(self, a: Ref, b: Ref, name: str | None = None, match_on: Sequence[str] | None = None) -> Ref:
        return self._single(O.Add(match_on), [a, b], name, {})

    def mul(self, a: Ref, b: Ref, name: str | None = None, match_on: Sequence[str] | None = None) -> Ref:
        return self._single(O.Mul(match_on), [a, b], name, {})

    def concat(self, *xs: Ref | None, name: str | None = None, match_on: Sequence[str] | None = None) -> Ref:
        return self._single(O.Concat(len(xs), match_on), list(xs), name, {})

    def split(self, x: Ref, sizes: Sequence[int], name: str | None = None) -> tuple[Ref, ...]:
        return self._multi(O.Split(list(sizes)), [x], name, {})

    def bcast(self, x: Ref, n: int = 2, name: str | None = None) -> tuple[Ref, ...]:
        return self._multi(O.Bcast(n), [x], name, {})

    def cond(self, x: Ref, predicate: str, branches: int = 2, name: str | None = None) -> tuple[Ref, ...]:
        """Route by ``predicate`` over the state: returns (true, false), or one Ref per branch."""
        return self._multi(O.Cond(predicate, branches), [x], name, {})

    def phi(self, *xs: Ref | None, name: str | None = None) -> Ref:
        """Merge streams; pass None for an input (a loop back-edge) to connect later with ``connect``."""
        return self._single(O.Phi(len(xs)), list(xs), name, {})

    def isu(
        self, x: Ref, forward: Mapping[str, str | None], backward: Mapping[str, str | None], name: str | None = None
    ) -> Ref:
        return self._single(O.Isu(forward, backward), [x], name, {})

    def ungroup(self, x: Ref, counter: str = "t", name: str | None = None, chunk: int | str | None = None) -> Ref:
        """One message per row of ``x`` (state ``counter = i``), or per ``chunk`` rows, keeping the leading axis."""
        return self._single(O.Ungroup(counter, chunk), [x], name, {})

    def group(self, x: Ref, count: str, counter: str = "t", name: str | None = None) -> Ref:
        return self._single(O.Group(count, counter), [x], name, {})

    def softmax_cross_entropy(
        self, logits: Ref, target: Ref, name: str | None = None, match_on: Sequence[str] | None = None
    ) -> str:
        """Adds the loss node and returns its name (a loss has no outputs)."""
        return self._add(O.SoftmaxCrossEntropy(match_on), [logits, target], name, {}).name

    def segment_softmax_cross_entropy(
        self, scores: Ref, segments: Ref, target: Ref, name: str | None = None, match_on: Sequence[str] | None = None
    ) -> str:
        """Node selection: a softmax over each graph's rows of ``scores`` (graph ids ``segments``) against each
        graph's answer row ``target``; adds the loss node and returns its name."""
        return self._add(O.SegmentSoftmaxCrossEntropy(match_on), [scores, segments, target], name, {}).name

    def mse(self, pred: Ref, target: Ref, name: str | None = None, match_on: Sequence[str] | None = None) -> str:
        return self._add(O.MSE(match_on), [pred, target], name, {}).name

    def replicate(self, x: Ref, replicas: int, body: Any, name: str = "replica", key_field: str = "key") -> Ref:
        """Build ``body(g, x_i, i) -> Ref`` ``replicas`` times behind a Cond on ``key % replicas`` and
        merge the copies with a Phi. Parameterized nodes made by each copy are tied into replica groups
        (matched by creation order) whose parameters start equal and are averaged by the runtime."""
        if replicas < 1:
            raise GraphError(f"replicate: expected replicas >= 1, got {replicas}")
        if replicas == 1:
            return body(self, x, 0)
        # key k runs through copy k % replicas; a 2-way Cond picks "true" (copy 0) by truth, so test for 0
        predicate = f"{key_field} % 2 == 0" if replicas == 2 else f"{key_field} % {replicas}"
        branches = self.cond(x, predicate, branches=replicas, name=f"{name}_route")
        made: list[list[str]] = []
        outs: list[Ref] = []
        for i, branch in enumerate(branches):
            before = set(self.nodes)
            outs.append(body(self, branch, i))
            made.append([n for n in self.nodes if n not in before and self.nodes[n].kind in O.PARAMETERIZED])
        if len({len(m) for m in made}) != 1:
            raise GraphError("replicate: every copy built by body must create the same parameterized nodes")
        for group in zip(*made, strict=True):
            self.tie_replicas(group)
        return self.phi(*outs, name=f"{name}_merge")

    # ------------------------------------------- structures known from the data: trees and graphs
    def sub(self, a: Ref, b: Ref, name: str | None = None, match_on: Sequence[str] | None = None) -> Ref:
        """``a - b`` elementwise."""
        return self._single(O.Sub(match_on), [a, b], name, {})

    def discard(self, x: Ref, name: str | None = None) -> str:
        """A sink for a value nobody reads (no gradient flows back from it); returns the node's name."""
        return self._add(O.Discard(), [x], name, {}).name

    def sink(self, x: Ref, name: str | None = None) -> str:
        """A sink that answers with a zero gradient, for a value nobody reads that went through control flow (a
        Cond branch, a loop exit); returns the node's name."""
        return self._add(O.Sink(), [x], name, {}).name

    def flatmap(self, x: Ref, field: str = "pos", keep_2d: bool = True, name: str | None = None) -> Ref:
        """One message per row of a matrix (n, 1 + k): column 0 becomes state field ``field``, the rest the
        payload ((1, k), or (k,) with ``keep_2d=False`` for ids and class labels)."""
        return self._single(O.Flatmap(field, keep_2d), [x], name, {})

    def partition(
        self, x: Ref, field: str = "t", keep_2d: bool = True, name: str | None = None, size_field: str | None = None
    ) -> Ref:
        """One message per distinct value of column 0 of a table (n, 1 + k), holding that group's rows
        ((m, k), or (m,) with ``keep_2d=False``) with ``field`` set to the value: per-level index vectors.
        ``size_field`` also puts each group's row count m into its state."""
        return self._single(O.Partition(field, keep_2d, size_field), [x], name, {})

    def collect(
        self, x: Ref, key: str, index: str, count: int | str, field: str | None, name: str | None = None,
        axis: int = -1, drop: Sequence[str] | None = None,
    ) -> Ref:  # fmt: skip
        """Merge the messages whose ``key`` expression agrees into one, concatenated in ``index`` order (along
        the last axis, or with ``axis=0`` rows stacked), with ``field`` set to the key value and the fields in
        ``drop`` removed: ``g.collect(x, "pos // 2", "pos % 2", 2, "pos")`` joins tree children."""
        return self._single(O.Collect(key, index, count, field, axis, drop), [x], name, {})

    def distribute(self, x: Ref, by: str, branches: int, name: str | None = None) -> tuple[Ref, ...]:
        """Route each message to output ``b{i}``, ``i`` the value of ``by`` on its state (one Ref per branch)."""
        return self._multi(O.Distribute(by, branches), [x], name, {})

    def gather(self, x: Ref, index: Ref, name: str | None = None, match_on: Sequence[str] | None = None) -> Ref:
        """``x[index]``: node states (N, H) read at an int index (E,), e.g. each edge's source."""
        return self._single(O.Gather(match_on), [x, index], name, {})

    def scatter_sum(
        self, x: Ref, index: Ref, like: Ref, name: str | None = None, match_on: Sequence[str] | None = None
    ) -> Ref:
        """Rows of ``x`` (E, H) summed into ``len(like)`` rows at ``index`` (E,), e.g. each edge's destination."""
        return self._single(O.ScatterSum(match_on), [x, index, like], name, {})

    def typed_edge_sum(
        self, x: Ref, edges: Ref, types: int, name: str | None = None, match_on: Sequence[str] | None = None
    ) -> Ref:
        """Each node's messages under ``types`` edge types side by side ``x`` (N, types * H), summed into the
        edges' destinations: ``edges`` (2, E) = [src * types + type, dst]; out (N, H)."""
        return self._single(O.TypedEdgeSum(types, match_on), [x, edges], name, {})

    def scatter_mean(
        self, x: Ref, index: Ref, like: Ref, name: str | None = None, match_on: Sequence[str] | None = None
    ) -> Ref:
        """As :meth:`scatter_sum`, divided by each row's number of incoming rows (0 where none)."""
        return self._single(O.ScatterMean(match_on), [x, index, like], name, {})

    def select_rows(self, x: Ref, rows: Ref, name: str | None = None, match_on: Sequence[str] | None = None) -> Ref:
        """The rows of ``x`` picked by a boolean mask or an int index (the edges of one type, say)."""
        return self._single(O.SelectRows(match_on), [x, rows], name, {})

    def sum_rows(self, x: Ref, name: str | None = None) -> Ref:
        """Readout: (N, ...) -> (1, ...) by summing rows."""
        return self._single(O.SumRows(), [x], name, {})

    def mean_rows(self, x: Ref, name: str | None = None) -> Ref:
        """Readout: (N, ...) -> (1, ...) by averaging rows."""
        return self._single(O.MeanRows(), [x], name, {})
