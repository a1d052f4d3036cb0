"""A graph compiled for execution: integer node ids, routing tables, owners and update policies.

Which edges carry gradients comes from the graph's own analysis (``ir/analysis.py``); this module turns
it, with a placement, into the integer-indexed tables the workers read per message. A plan is immutable
once compiled (a frozen dataclass of tuples): what may change while a run goes (per-node
``min_update_frequency`` and ``max_bundle``, ``max_active_keys``, pausing) lives in the session's
:class:`~amp_notebook.runtime.knobs.Knobs`, which starts from the plan's ``min_update_frequency``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from amp_notebook.ir import ops as O
from amp_notebook.ir.analysis import carries_gradient, requires_grad
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.ops.base import Op
from amp_notebook.optim import DEFAULT_OPTIMIZER, Optimizer, average_parameters, end_epoch, make_optimizer


@dataclass(frozen=True)
class Plan:
    """The tables of a placed graph, indexed by node number, immutable once compiled. Owns the routes, owners,
    ops, optimizers and per-node flags; never holds runtime state (contexts and live knobs belong to the
    session, queues and clocks to the backend)."""

    graph: Graph
    names: tuple[str, ...]
    index: dict[str, int]
    ops: tuple[Op, ...]
    fwd_route: tuple[dict[str, tuple[int, str]], ...]  # per node: output port -> (node, input port)
    bwd_route: tuple[dict[str, tuple[int, str]], ...]  # per node: input port -> (node, output port), gradients only
    grad_inputs: tuple[frozenset[str], ...]
    grad_outputs: tuple[frozenset[str], ...]
    receives_backward: tuple[bool, ...]
    owner: tuple[int, ...]
    parameterized: tuple[bool, ...]
    is_loss: tuple[bool, ...]
    inputs: dict[str, int]
    min_update_frequency: tuple[int, ...]  # per node, as compiled: the node's own or the run's (Knobs start here)
    optimizers: tuple[Optimizer | None, ...]
    replica_groups: tuple[tuple[int, ...], ...]
    workers: int

    def describe(self, node: int) -> str:
        return f"{type(self.ops[node]).__name__} {self.names[node]!r}"


def compile_plan(
    graph: Graph,
    placement: dict[str, int],
    workers: int,
    min_update_frequency: int = 1,
    optimizer: Optimizer | None = None,
) -> Plan:
    names = list(graph.nodes)
    index = {n: i for i, n in enumerate(names)}
    ops = [graph.nodes[n].op for n in names]
    needs = requires_grad(graph)
    fwd_route: list[dict[str, tuple[int, str]]] = [{} for _ in names]
    bwd_route: list[dict[str, tuple[int, str]]] = [{} for _ in names]
    grad_in: list[set[str]] = [set() for _ in names]
    grad_out: list[set[str]] = [set() for _ in names]
    for e in graph.edges:
        s, d = index[e.src], index[e.dst]
        fwd_route[s][e.src_port] = (d, e.dst_port)
        if carries_gradient(graph, e, needs):
            bwd_route[d][e.dst_port] = (s, e.src_port)
            grad_in[d].add(e.dst_port)
            grad_out[s].add(e.src_port)
    is_loss = [graph.nodes[n].kind in O.LOSSES for n in names]
    receives = [bool(grad_out[i]) or (is_loss[i] and bool(grad_in[i])) for i in range(len(names))]
    default_opt = optimizer or make_optimizer(DEFAULT_OPTIMIZER)
    parameterized = [graph.nodes[n].kind in O.PARAMETERIZED for n in names]
    optimizers: list[Optimizer | None] = []
    mufs: list[int] = []
    for i, n in enumerate(names):
        node = graph.nodes[n]
        mufs.append(node.min_update_frequency or min_update_frequency)
        if not parameterized[i]:
            optimizers.append(None)
        else:
            optimizers.append(make_optimizer(node.optimizer) if node.optimizer is not None else default_opt)
    return Plan(
        graph=graph,
        names=tuple(names),
        index=index,
        ops=tuple(ops),
        fwd_route=tuple(fwd_route),
        bwd_route=tuple(bwd_route),
        grad_inputs=tuple(frozenset(s) for s in grad_in),
        grad_outputs=tuple(frozenset(s) for s in grad_out),
        receives_backward=tuple(receives),
        owner=tuple(placement[n] for n in names),
        parameterized=tuple(parameterized),
        is_loss=tuple(is_loss),
        inputs={n: index[n] for n in names if graph.nodes[n].kind in O.INPUTS},
        min_update_frequency=tuple(mufs),
        optimizers=tuple(optimizers),
        replica_groups=tuple(tuple(index[n] for n in group) for group in graph.replica_groups),
        workers=workers,
    )


def average_replicas(plan: Plan, contexts: Sequence[O.NodeContext]) -> None:
    """Set every replica in each group to the exact mean of the group's parameters and optimizer memory
    (:func:`~amp_notebook.optim.average_parameters`; epoch-end work, while no message is in flight)."""
    for group in plan.replica_groups:
        average_parameters([contexts[i] for i in group])


def end_epoch_optimizers(plan: Plan) -> None:
    """Let each distinct optimizer apply its per-epoch schedule (``lr_decay``) once."""
    end_epoch(o for o in plan.optimizers if o is not None)
