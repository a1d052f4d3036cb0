"""The reference interpreter: a single-threaded, deterministic executor of a graph; the oracle.

It shares the ops (their math is checked separately, against finite differences and torch) and the
graph's gradient-flow analysis (``ir/analysis.py``), but none of the runtime: no compiled plan (it routes
by node name straight from the graph's edges, so a routing bug in the runtime's tables cannot hide behind
a shared table), no workers, no placement, no priorities, no credit counting. It runs one key at a time
to completion with a plain FIFO worklist, and checks the IR's invariants as it goes:

* every forward message a node emits for a training key gets exactly one backward message back;
* when a key completes, every cache and join of every node is empty (memory bounded by what is in flight);
* every Isu's backward inverts its forward on the states it saw.

``gradients(batch)`` gives the parameter gradients of one key (for comparisons with torch) and
``update()`` steps every node's optimizer. Training with it, synchronously in the runtime's ``sync`` key
order, is a backend of the runtime: :func:`amp_notebook.runtime.reference.train_reference`.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

import numpy as np

from amp_notebook.data.batch import Batch
from amp_notebook.errors import AmpError
from amp_notebook.ir import ops as O
from amp_notebook.ir.analysis import carries_gradient, requires_grad
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.message import BWD, FWD, State
from amp_notebook.ir.ops import LOSS_PORT, NodeContext
from amp_notebook.optim import DEFAULT_OPTIMIZER, Optimizer, average_parameters, end_epoch, make_optimizer


class InvariantError(AmpError, AssertionError):
    """The graph or an op broke one of the IR's invariants."""


Route = dict[tuple[str, str], tuple[str, str]]


class Interpreter:
    """The reference executor of one graph: runs one key at a time to completion, forward then backward.

    Owns its copy of the graph's parameters, each node's context (caches, gradients, optimizer state) and a
    FIFO worklist of messages. It routes by node name straight from the graph's edges and checks the IR's
    invariants as it goes (module docstring). It never touches threads, placement, priorities, credits or the
    runtime's compiled plan, so that it can be the oracle every backend is tested against."""

    def __init__(
        self,
        graph: Graph,
        params: dict[str, dict[str, np.ndarray]] | None = None,
        seed: int = 0,
        dtype: Any = np.float64,
        optimizer: Optimizer | dict[str, Any] | str = DEFAULT_OPTIMIZER,
    ) -> None:
        graph.validate()
        self.graph = graph
        self.dtype = np.dtype(dtype)
        self.names = list(graph.nodes)
        self.ops = {name: node.op for name, node in graph.nodes.items()}
        needs = requires_grad(graph)
        # routing by name, straight from the edges: (node, out port) -> (node, in port) forward; backward
        # (node, in port) -> (node, out port) along the edges that carry gradients
        self.fwd_route: Route = {(e.src, e.src_port): (e.dst, e.dst_port) for e in graph.edges}
        grad_edges = [e for e in graph.edges if carries_gradient(graph, e, needs)]
        self.bwd_route: Route = {(e.dst, e.dst_port): (e.src, e.src_port) for e in grad_edges}
        self.parameterized = {name for name, node in graph.nodes.items() if node.kind in O.PARAMETERIZED}
        default = make_optimizer(optimizer)
        self.optimizers = {
            name: default if graph.nodes[name].optimizer is None else make_optimizer(graph.nodes[name].optimizer)
            for name in self.parameterized
        }
        initial = params if params is not None else graph.init_params(seed, self.dtype)
        self.contexts: list[NodeContext] = []
        self._by_name: dict[str, NodeContext] = {}
        for name in self.names:
            ctx = NodeContext(name, {k: np.array(v, dtype=self.dtype) for k, v in initial.get(name, {}).items()})
            ctx.grad_inputs = frozenset(e.dst_port for e in grad_edges if e.dst == name)
            ctx.grad_outputs = frozenset(e.src_port for e in grad_edges if e.src == name)
            self.contexts.append(ctx)
            self._by_name[name] = ctx
        is_loss = {name for name, node in graph.nodes.items() if node.kind in O.LOSSES}
        self.receives_backward = {
            name: bool(self._by_name[name].grad_outputs) or (name in is_loss and bool(self._by_name[name].grad_inputs))
            for name in self.names
        }
        self.inputs = [name for name, node in graph.nodes.items() if node.kind in O.INPUTS]
        self.reports: list[dict[str, Any]] = []

    def context(self, name: str) -> NodeContext:
        """The runtime state (parameters, gradients, caches) of the node called ``name``."""
        return self._by_name[name]

    def describe(self, name: str) -> str:
        return f"{type(self.ops[name]).__name__} {name!r}"

    # ------------------------------------------------------------------ one key
    def run_key(self, batch: Batch, key: int = 0, train: bool = True) -> list[dict[str, Any]]:
        """Run one key to completion (forward, and backward when ``train``); gradients accumulate in
        the contexts. Returns the loss reports of this key."""
        state = State(key=key, **batch.fields)
        work: deque[tuple[str, str, int, Any, State]] = deque()
        for name in self.inputs:
            op = self.ops[name]
            if op.fill == "zeros":
                payload = np.zeros((batch.size, op.width), dtype=self.dtype)
            else:
                payload = batch.inputs[name]
                if op.dtype == "float":
                    payload = np.asarray(payload, dtype=self.dtype)
            work.append((name, "in", FWD, payload, state))
        owed: Counter[tuple[str, str, State]] = Counter()  # backward messages still owed, by (node, out_port, state)
        reports: list[dict[str, Any]] = []
        while work:
            node, port, direction, payload, s = work.popleft()
            ctx, op = self._by_name[node], self.ops[node]
            if direction == FWD:
                ctx.train = train and self.receives_backward[node]
                for out_port, y, s2 in op.forward(ctx, port, payload, s):
                    self._check_isu(node, s, s2)
                    if out_port == LOSS_PORT:
                        if ctx.train:
                            self._emit_back(node, op.backward(ctx, LOSS_PORT, 1.0, s2), work)
                        continue
                    dst, dst_port = self.fwd_route[(node, out_port)]
                    if train and (dst, dst_port) in self.bwd_route:
                        owed[(node, out_port, s2)] += 1
                    work.append((dst, dst_port, FWD, y, s2))
                for r in ctx.reports:
                    reports.append(r)
                ctx.reports.clear()
            else:
                if owed[(node, port, s)] <= 0:
                    raise InvariantError(
                        f"{self.describe(node)} received a backward message at output {port!r} with state {s} "
                        "that it never sent forward (or received it twice)"
                    )
                owed[(node, port, s)] -= 1
                emitted = op.backward(ctx, port, payload, s)  # sees n_grads before this gradient
                if node in self.parameterized:
                    ctx.n_grads += 1
                    ctx.grad_keys.add(key)
                self._emit_back(node, emitted, work)
        missing = +owed
        if missing:
            (node, port, s), _ = next(iter(missing.items()))
            raise InvariantError(
                f"{self.describe(node)} sent a forward message from {port!r} with state {s} whose backward never came"
            )
        for ctx in self.contexts:
            if ctx.cache or ctx.joins:
                left = list(ctx.cache)[:3] + list(ctx.joins)[:3]
                raise InvariantError(
                    f"{self.describe(ctx.name)} still holds cache/join entries after key {key} completed: {left}; "
                    "something it waits for never arrived"
                )
        self.reports.extend(reports)
        return reports

    def _emit_back(self, node: str, emitted: list, work: deque) -> None:
        route = self.bwd_route
        for in_port, g, s in emitted:
            src = route.get((node, in_port))
            if src is not None:
                work.append((src[0], src[1], BWD, g, s))

    def _check_isu(self, node: str, before: State, after: State) -> None:
        op = self.ops[node]
        if isinstance(op, O.Isu):
            back = op.apply(op.backward_updates, after)
            if back != before:
                raise InvariantError(
                    f"{self.describe(node)} is not invertible: forward maps {before} to {after}, "
                    f"but backward maps that back to {back}"
                )

    # ----------------------------------------------------------------- helpers
    def zero_grads(self) -> None:
        for ctx in self.contexts:
            ctx.zero_grads()

    def gradients(self, batch: Batch, key: int = 0) -> dict[str, dict[str, np.ndarray]]:
        """The gradient of the key's mean loss with respect to every parameter (a copy)."""
        self.zero_grads()
        self.run_key(batch, key=key, train=True)
        return {name: {k: v.copy() for k, v in self._by_name[name].grads.items()} for name in self._parameterized()}

    def params(self) -> dict[str, dict[str, np.ndarray]]:
        return {name: {k: v.copy() for k, v in self._by_name[name].params.items()} for name in self._parameterized()}

    def update(self) -> None:
        """Every parameterized node steps its optimizer on what it holds (the mean over keys)."""
        for name in self._parameterized():
            ctx = self._by_name[name]
            if ctx.n_grads:
                self.optimizers[name].step(ctx.params, ctx.grads, ctx.opt_state, 1.0 / len(ctx.grad_keys))
                ctx.reset_grads()
                ctx.version += 1

    def average_replicas(self) -> None:
        """Set every replica group's parameters to their exact mean (epoch-end work)."""
        for group in self.graph.replica_groups:
            average_parameters([self._by_name[name] for name in group])

    def end_epoch(self) -> None:
        """Epoch-end work: replicas averaged, each optimizer's per-epoch schedule applied once."""
        self.average_replicas()
        end_epoch(self.optimizers.values())

    def _parameterized(self) -> list[str]:
        return [name for name in self.names if name in self.parameterized]
