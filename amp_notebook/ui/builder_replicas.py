"""Replicating one heavy node behind a Cond and a Phi, the builder's ``replicas`` property.

``set_replicas(g, "step", 3)`` rewrites ``a -> step -> b`` into::

    a -> Cond 'step_route' (key % 3) -> step, step_r1, step_r2 -> Phi 'step_merge' -> b

with the copies tied in a replica group (parameters start equal and are averaged by the runtime), exactly
what :meth:`Graph.replicate` builds for a one-node body. The route, merge and copies carry
``meta["replica_of"] = "step"`` so that setting ``replicas`` again (or back to 1) undoes the rewrite.
Replica groups made otherwise (``rnn(replicas=2)`` replicates Linear + ReLU) are left alone.
"""

from __future__ import annotations

from amp_notebook.ir import ops as O
from amp_notebook.ir.graph import Graph, GraphError, Ref

MAX_REPLICAS = 16


def replicas_of(graph: Graph, name: str) -> int:
    for group in graph.replica_groups:
        if name in group:
            return len(group)
    return 1


def set_replicas(graph: Graph, name: str, replicas: int) -> None:
    node = graph.nodes[name]
    if not 1 <= replicas <= MAX_REPLICAS:
        raise GraphError(f"{node.describe()} replicas: expected an int in [1, {MAX_REPLICAS}], got {replicas}")
    if node.kind not in O.PARAMETERIZED:
        raise GraphError(
            f"{node.describe()} replicas: only parameterized nodes ({sorted(O.PARAMETERIZED)}) can be replicated"
        )
    if node.meta.get("replica_of") not in (None, name):
        raise GraphError(f"{node.describe()} is a copy of {node.meta['replica_of']!r}; set replicas on that node")
    current = replicas_of(graph, name)
    if current == replicas:
        return
    if current > 1:
        if not graph.nodes[name].meta.get("replica_of"):
            raise GraphError(
                f"{node.describe()} replicas: its replica group was not made by the builder (a model's "
                "g.replicate(...)); rebuild the model with another replica count instead"
            )
        _collapse(graph, name)
    if replicas > 1:
        _expand(graph, name, replicas)


def _expand(graph: Graph, name: str, replicas: int) -> None:
    node = graph.nodes[name]
    incoming, outgoing = graph.incoming(name).get("in"), graph.outgoing(name).get("out")
    for e in (incoming, outgoing):
        if e is not None:
            graph.disconnect(e.dst, e.dst_port)
    predicate = "key % 2 == 0" if replicas == 2 else f"key % {replicas}"
    route = graph.add_node(O.Cond(predicate, replicas), [Ref(incoming.src, incoming.src_port)] if incoming else [],
                           name=f"{name}_route")  # fmt: skip
    merge = graph.add_node(O.Phi(replicas), name=f"{name}_merge")
    copies = [name]
    for i in range(1, replicas):
        copy = graph.add_node(
            type(node.op)(**node.op.config()), name=f"{name}_r{i}", min_update_frequency=node.min_update_frequency,
            optimizer=None if node.optimizer is None else dict(node.optimizer), worker=None,
        )  # fmt: skip
        copies.append(copy.name)
    for i, (branch, copy_name) in enumerate(zip(route.op.output_ports(), copies, strict=True)):
        graph.connect(Ref(route.name, branch), copy_name, "in")
        graph.connect(Ref(copy_name), merge.name, f"in{i}")
    if outgoing is not None:
        graph.connect(Ref(merge.name), outgoing.dst, outgoing.dst_port)
    for n in (route.name, merge.name, *copies):
        graph.nodes[n].meta["replica_of"] = name
    graph.tie_replicas(copies)


def _collapse(graph: Graph, name: str) -> None:
    route, merge = f"{name}_route", f"{name}_merge"
    into = graph.incoming(route).get("in") if route in graph.nodes else None
    out = graph.outgoing(merge).get("out") if merge in graph.nodes else None
    group = next(g for g in graph.replica_groups if name in g)
    for n in [route, merge, *group]:
        if n != name and n in graph.nodes and graph.nodes[n].meta.get("replica_of") == name:
            graph.remove_node(n)  # which leaves ``name`` alone in its replica group, so the group goes
    for e in [*graph.incoming(name).values(), *graph.outgoing(name).values()]:
        graph.disconnect(e.dst, e.dst_port)
    graph.nodes[name].meta.pop("replica_of", None)
    if into is not None:
        graph.connect(Ref(into.src, into.src_port), name, "in")
    if out is not None:
        graph.connect(Ref(name), out.dst, out.dst_port)
