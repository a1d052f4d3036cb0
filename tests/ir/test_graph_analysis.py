"""One answer for a graph's loops, order and reachability (``ir/analysis.py``), used by the validator, the
topological order and the builder's canvas alike.

The loop cases are the zoo's (a do-while RNN, replicas inside its loop, the Tree-LSTM's Collect loop, the
BiLSTM's four loops) and compiled programs whose loops hold an ``if`` (a second entry into the cycle), a
nested loop, and a weight shared by two call sites in one step (a multiplexer Phi on the loop's cycle).
"""

from __future__ import annotations

import networkx as nx
import pytest

import amp_notebook as amp
from amp_notebook import models
from amp_notebook.compiler import nn
from amp_notebook.ir.analysis import cycle_without_phi, loop_back_edges, loops, to_networkx, topological_order, upstream
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.validate import check
from tests.compiler.test_language import first_step_differs  # an if on the loop counter inside a for


def nested(tokens: nn.Sequence(int), target: nn.Ints(), depth=2):
    h = nn.zeros(6)
    for token in tokens:
        h = nn.tanh(nn.linear(nn.concat(nn.embedding(token, 14, 4, name="embed"), h), 6, name="step"))
        k = 0
        while k < depth:
            h = nn.relu(nn.linear(h, 6, name="deep"))
            k += 1
    return nn.softmax_cross_entropy(nn.linear(h, 3, name="out"), target)


def shared_twice(tokens: nn.Sequence(int), target: nn.Ints()):
    h = nn.zeros(6)
    for token in tokens:
        e = nn.embedding(token, 14, 6, name="embed")
        h = nn.relu(nn.linear(nn.concat(e, h), 6, name="step"))
        h = nn.relu(nn.linear(nn.concat(e, h), 6, name="step"))
    return nn.softmax_cross_entropy(nn.linear(h, 3, name="out"), target)


CASES = {
    "rnn": (lambda: models.rnn(), {"more:true -> loop:in1"}),
    "rnn_x2": (lambda: models.rnn(replicas=2), {"more:true -> loop:in1"}),  # not the replicas' merge
    "tree_lstm": (lambda: models.tree_lstm(vocab_size=20), {"branch_cell:out -> nodes:in1"}),
    "tree_lstm_forest": (lambda: models.tree_lstm_forest(vocab_size=20), {"tick:out -> levels:in1"}),
    "bilstm_tagger": (
        lambda: models.bilstm_tagger(20, 10, 5),
        {f"{p}_update:out -> {p}_loop:in1" for p in ("fwd", "bwd", "char_fwd", "char_bwd")},
    ),
    "ggsnn": (lambda: models.ggsnn(n_edge_types=2, feature_width=8, classes=4), {"more:true -> loop:in1"}),
    "mlp": (lambda: models.mlp(), set()),
    # the if's merge is entered from outside the cycle too (the t == 0 side reads only the step's token), but
    # the loop is entered where its state begins: the back-edge is the loop's, not the if's
    "first_step_differs": (lambda: amp.compile(first_step_differs), {"h_next:out -> h_loop:in1"}),
    "nested": (lambda: amp.compile(nested), {"h_next:out -> h_loop_2:in1", "h_next_2:out -> h_loop:in1"}),
    # the shared weight's Phi sits on the loop's cycle; within the loop, the second call site closes a cycle of
    # its own through it
    "shared_twice": (
        lambda: amp.compile(shared_twice), {"h_next:out -> h_loop:in1", "step_site1:out -> step_sites:in1"}
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_loop_back_edges_are_the_edges_that_close_loops(case: str) -> None:
    make, expected = CASES[case]
    graph = make()
    assert {str(e) for e in loop_back_edges(graph)} == expected
    assert all(graph.nodes[e.dst].kind == "phi" for e in loop_back_edges(graph))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_topological_order_runs_every_other_edge_forward(case: str) -> None:
    graph = CASES[case][0]()
    order = topological_order(graph)
    assert sorted(order) == sorted(graph.nodes) and graph.topological_order() == order
    at = {name: i for i, name in enumerate(order)}
    back = loop_back_edges(graph)
    assert all(at[e.src] < at[e.dst] for e in graph.edges if e not in back)
    assert nx.is_directed_acyclic_graph(to_networkx(graph, back))


def test_insertion_order_breaks_ties() -> None:
    g = Graph("g")
    for name in ("b", "a", "c"):
        g.input(name, width=2)
    assert topological_order(g) == ["b", "a", "c"]


def cyclic_without_phi() -> Graph:
    g = Graph("g")
    x = g.input("x", width=4)
    g.connect(g.relu(g.add(x, None, name="sum"), name="act"), "sum", "b")
    return g


def test_a_cycle_without_a_phi_is_found_and_the_order_falls_back_to_insertion_order() -> None:
    g = cyclic_without_phi()
    assert set(cycle_without_phi(g)) == {"sum", "act"}
    assert topological_order(g) == list(g.nodes)
    assert [p.node for p in check(g) if "does not pass through a Phi" in p.message] in (["sum"], ["act"])


def test_a_loop_entered_through_a_join_breaks_at_its_phis() -> None:
    """No Phi of the cycle has an input from outside (the cycle is entered at an Add): every Phi of it is taken
    as a header, so the order stays topological."""
    g = Graph("g")
    x = g.input("x", width=4)
    s = g.add(x, None, name="join")
    merged = g.phi(s, name="merge")
    stepped = g.isu(merged, {"t": "t + 1"}, {"t": "t - 1"}, name="step")
    again, done = g.cond(stepped, "t < 3", name="more")
    g.connect(again, "join", "b")
    assert {str(e) for e in loop_back_edges(g)} == {"join:out -> merge:in0"}
    assert cycle_without_phi(g) is None
    assert topological_order(g) == ["x", "merge", "step", "more", "join"]
    assert [set(c) for c in loops(g)] == [{"join", "merge", "step", "more"}]
    del done


def two_phis(closings: tuple[tuple[str, str], tuple[str, str]]) -> Graph:
    """x -> Phi p -> relu -> Phi q -> tanh -> Bcast, the Bcast's outputs closing cycles at ``closings``."""
    g = Graph("g")
    a = g.relu(g.phi(g.input("x", width=2), None, name="p"), name="a")
    fan = g.bcast(g.tanh(g.phi(a, None, name="q"), name="b"), 2, name="fan")
    for out, (node, port) in zip(fan, closings, strict=True):
        g.connect(out, node, port)
    return g


@pytest.mark.parametrize("closings", [(("p", "in1"), ("q", "in1")), (("q", "in1"), ("p", "in1"))])
def test_loops_nested_and_side_by_side_leave_an_acyclic_rest(closings: tuple) -> None:
    g = two_phis(closings)
    closing = {f"fan:out{i} -> {node}:{port}" for i, (node, port) in enumerate(closings)}
    assert {str(e) for e in loop_back_edges(g)} == closing
    assert cycle_without_phi(g) is None and topological_order(g) == ["x", "p", "a", "q", "b", "fan"]


def test_upstream_is_everything_a_target_depends_on() -> None:
    graph = models.rnn()
    assert upstream(graph, ["loss"]) == set(graph.nodes) - {n for n in graph.nodes if graph.nodes[n].kind == "sink"}
    assert upstream(graph, ["tokens"]) == {"tokens"}
