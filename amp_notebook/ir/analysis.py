"""Static analyses of a graph that every executor relies on: which outputs carry gradients.

Gradient flow is decided statically. An output *requires grad* when its node has parameters, when its
forward depends on whether the key trains (a Dropout: ``ctx.train``, which a runtime sets only where a
backward comes back, must tell it, so a backward comes back to it even when nothing before it learns), or
when one of its differentiable inputs is fed by an output that requires grad (a fixed point, so loops
settle). An
edge carries a backward message when its source output requires grad and its destination port is
differentiable (a loss's ``target`` and an Embedding's ids are not). A node caches for backward only
when a backward will come back to it; otherwise (token streams, validation keys) it caches nothing, so
memory stays bounded by what is in flight.

The runtime's compiled plan (``runtime/plan.py``) and the reference interpreter each build their own
routing from the graph's edges; they share this analysis, which is a property of the graph alone.
"""

from __future__ import annotations

from amp_notebook.ir import ops as O
from amp_notebook.ir.graph import Edge, Graph


def requires_grad(graph: Graph) -> set[tuple[str, str]]:
    """The output ports (node, port) whose values depend on parameters (or on whether the key trains)."""
    needs: set[tuple[str, str]] = set()
    incoming = {n: graph.incoming(n) for n in graph.nodes}
    changed = True
    while changed:
        changed = False
        for name, node in graph.nodes.items():
            op = node.op
            live = (
                node.kind in O.PARAMETERIZED
                or op.training_dependent
                or any(
                    (e.src, e.src_port) in needs for port, e in incoming[name].items() if port not in op.nondiff_inputs
                )
            )
            if not live:
                continue
            for port in op.output_ports():
                if (name, port) not in needs:
                    needs.add((name, port))
                    changed = True
    return needs


def carries_gradient(graph: Graph, edge: Edge, needs: set[tuple[str, str]]) -> bool:
    """Whether a backward message travels this edge (``needs`` from :func:`requires_grad`)."""
    return (edge.src, edge.src_port) in needs and edge.dst_port not in graph.nodes[edge.dst].op.nondiff_inputs


__all__ = ["carries_gradient", "requires_grad"]
