"""Static analyses of a graph, in one place: its loops, a topological order, reachability, gradient flow.

**Loops.** A loop is closed by a Phi that merges the loop's entry (from outside the cycle) with the loop's
back-edge (from inside). :func:`loop_back_edges` finds them within each strongly connected component (a
set of nodes that all reach each other; a loop and everything on it): the component's *headers* are its
Phis with an input from outside the component, and a header's inputs from inside the component are
back-edges. Removing them and repeating finds the loops nested inside. Two refinements keep that answer
the one a reader of the model expects:

* a Phi whose inputs all come from inside the cycle only merges branches within the loop (the replicas'
  Phi inside the RNN's loop, an ``if`` inside a ``for``), so it is no header and its edges are no loop's;
* when several Phis of one component have inputs from outside (an ``if t == 0`` inside a loop, whose first
  side reads only the step's input, enters the cycle a second time at the ``if``'s merge), the headers are
  those entered first: the ones whose outside input sits fewest steps (along the longest path) after the
  graph's inputs. The loop is entered where its state begins, not where a step's input joins it.

A component with Phis but no Phi entered from outside (entered through a join instead) takes all its
Phis as headers. What is left once every back-edge is removed is acyclic exactly when every cycle of the
graph passes through a Phi, which is what the validator requires (:func:`cycle_without_phi`), so the
validator, :func:`topological_order` and the builder's canvas (which draws back-edges routed around the
side) all use this one answer.

**Order.** :func:`topological_order` sorts the graph without its back-edges, insertion order breaking
ties; the validator's width inference, placement and the watchdog's report walk it. An invalid graph (a
cycle without a Phi) falls back to insertion order. The back-edges and the order of one shape of a graph
(its node names and kinds in order, its edges) are kept beside it, since a builder's view asks several
times; any edit changes the shape and the next call recomputes them.

**Reachability.** :func:`upstream` gives what a set of nodes depends on (the compiler keeps only the nodes
a loss depends on); :func:`loops` the sets of nodes messages can go round (the validator wants an Isu in
each).

**Gradient flow** is decided statically. An output *requires grad* when its node has parameters, when its
forward depends on whether the key trains (a Dropout: ``ctx.train``, which a runtime sets only where a
backward comes back, must tell it, so a backward comes back to it even when nothing before it learns), or
when one of its differentiable inputs is fed by an output that requires grad (a fixed point, so loops
settle). An edge carries a backward message when its source output requires grad and its destination port
is differentiable (a loss's ``target`` and an Embedding's ids are not). A node caches for backward only
when a backward will come back to it; otherwise (token streams, validation keys) it caches nothing, so
memory stays bounded by what is in flight.

The runtime's compiled plan (``runtime/plan.py``) and the reference interpreter each build their own
routing from the graph's edges; they share these analyses, which are properties of the graph alone.
networkx does the graph algorithms; it is imported when an analysis first runs, so importing the IR does
not load it.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from amp_notebook.ir import ops as O

if TYPE_CHECKING:
    import networkx as nx

    from amp_notebook.ir.graph import Edge, Graph


def to_networkx(graph: Graph, without: Collection[Edge] = ()) -> nx.DiGraph:
    """The graph as a networkx ``DiGraph`` over node names (edges ``without`` left out): the view every
    analysis here runs on."""
    import networkx as nx

    view = nx.DiGraph(name=graph.name)
    view.add_nodes_from(graph.nodes)
    view.add_edges_from((e.src, e.dst) for e in graph.edges if e not in without)
    return view


def loop_back_edges(graph: Graph) -> set[Edge]:
    """The edges that close loops (module docstring): into a loop's header Phi from inside its cycle."""
    return set(_structure(graph).back)


def topological_order(graph: Graph) -> list[str]:
    """Node names in topological order of the graph without its loop back-edges, insertion order breaking
    ties; an invalid graph (a cycle that passes no Phi) falls back to insertion order."""
    structure = _structure(graph)
    if structure.order is None:
        import networkx as nx

        view = to_networkx(graph, structure.back)
        index = {name: i for i, name in enumerate(graph.nodes)}
        try:
            structure.order = list(nx.lexicographical_topological_sort(view, key=index.__getitem__))
        except nx.NetworkXUnfeasible:
            structure.order = list(graph.nodes)
    return list(structure.order)


@dataclass
class _Structure:
    """What the analyses found for one shape of a graph (its node names and kinds in order, and its edges)."""

    key: tuple[Any, ...]
    back: frozenset[Edge]
    order: list[str] | None = None


# graph -> its analysed structure, recomputed when the graph's shape changed; a builder's view asks several
# times for the same answer
_CACHE: weakref.WeakKeyDictionary[Graph, _Structure] = weakref.WeakKeyDictionary()


def _structure(graph: Graph) -> _Structure:
    key = (tuple((name, node.kind) for name, node in graph.nodes.items()), tuple(graph.edges))
    found = _CACHE.get(graph)
    if found is None or found.key != key:
        found = _CACHE[graph] = _Structure(key, frozenset(_find_back_edges(graph)))
    return found


def _find_back_edges(graph: Graph) -> set[Edge]:
    import networkx as nx

    into: dict[str, list[Edge]] = {name: [] for name, node in graph.nodes.items() if node.kind == "phi"}
    for e in graph.edges:
        if e.dst in into:
            into[e.dst].append(e)
    view = to_networkx(graph)
    back: set[Edge] = set()
    while True:
        depth: dict[str, int] | None = None  # of the graph without the back-edges found so far, when a tie needs it
        found: set[Edge] = set()
        for component in nx.strongly_connected_components(view):
            phis = [n for n in component if n in into]
            if not phis or (len(component) == 1 and not view.has_edge(phis[0], phis[0])):  # no cycle, or no Phi
                continue
            entered = {p: [e.src for e in into[p] if e not in back and e.src not in component] for p in phis}
            headers = [p for p in phis if entered[p]] or phis
            if len(headers) > 1:
                depth = depth if depth is not None else _depths(view)
                first = {p: min(depth[src] for src in entered[p]) for p in headers}
                headers = [p for p in headers if first[p] == min(first.values())]
            for p in headers:
                found.update(e for e in into[p] if e not in back and e.src in component)
        if not found:
            return back
        back |= found
        view.remove_edges_from((e.src, e.dst) for e in found)


def cycle_without_phi(graph: Graph) -> list[str] | None:
    """The nodes of a cycle that passes through no Phi, in order, or None when every cycle does."""
    import networkx as nx

    try:
        return [src for src, _ in nx.find_cycle(to_networkx(graph, loop_back_edges(graph)))]
    except nx.NetworkXNoCycle:
        return None


def loops(graph: Graph) -> list[set[str]]:
    """The node sets that messages can go round: strongly connected components with a cycle (nested loops
    are one set)."""
    import networkx as nx

    view = to_networkx(graph)
    return [c for c in nx.strongly_connected_components(view) if len(c) > 1 or any(view.has_edge(n, n) for n in c)]


def upstream(graph: Graph, targets: Iterable[str]) -> set[str]:
    """The nodes from which one of ``targets`` can be reached along edges, ``targets`` included."""
    import networkx as nx

    view = to_networkx(graph)
    found = set(targets)
    for name in list(found):
        found |= nx.ancestors(view, name)
    return found


def _depths(view: nx.DiGraph) -> dict[str, int]:
    """Each node's longest-path distance from a node without inputs, counted over strongly connected
    components (the nodes of one cycle share a depth)."""
    import networkx as nx

    dag = nx.condensation(view)
    level: dict[int, int] = {}
    for c in nx.topological_sort(dag):
        level[c] = max((level[p] + 1 for p in dag.predecessors(c)), default=0)
    return {name: level[c] for name, c in dag.graph["mapping"].items()}


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


__all__ = [
    "carries_gradient", "cycle_without_phi", "loop_back_edges", "loops", "requires_grad", "to_networkx",
    "topological_order", "upstream",
]  # fmt: skip
