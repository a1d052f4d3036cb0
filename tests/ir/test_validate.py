"""Static validation of IR graphs and the builder's own errors: every message names the node (and port)."""

from __future__ import annotations

import pytest

from amp_notebook import models
from amp_notebook.ir import ops
from amp_notebook.ir.graph import Graph, GraphError, Ref
from amp_notebook.ir.validate import Problem, ValidationError, check


def problems_about(graph: Graph, node: str | None, require_loss: bool = False) -> list[Problem]:
    return [p for p in check(graph, require_loss=require_loss) if p.node == node]


def only_problem(graph: Graph, require_loss: bool = False) -> Problem:
    found = check(graph, require_loss=require_loss)
    assert len(found) == 1, f"expected exactly one problem, got {[p.message for p in found]}"
    return found[0]


def regression_tail(g: Graph, x: Ref, width: int) -> str:
    """Close a graph with an MSE loss against a target input of ``width``."""
    return g.mse(x, g.input("y", width=width), name="loss")


# ------------------------------------------------------------------------------ valid graphs
@pytest.mark.parametrize(
    "graph",
    [
        models.mlp(),
        models.mlp(hidden=8, layers=1),
        models.rnn(),
        models.rnn(replicas=2),
        models.rnn(replicas=3),
    ],
    ids=["mlp", "mlp_1_layer", "rnn", "rnn_x2", "rnn_x3"],
)
def test_model_zoo_graphs_are_valid(graph: Graph) -> None:
    assert check(graph, require_loss=True) == []
    graph.validate(require_loss=True)


def test_validation_error_lists_every_problem() -> None:
    g = Graph("broken")
    g.input("x", width=4)
    g.add_node(ops.Linear(4, 2), name="lin")
    with pytest.raises(ValidationError) as info:
        g.validate(require_loss=True)
    err = info.value
    assert len(err.problems) == 4  # x:out, lin:in, lin:out, no loss
    assert "graph 'broken' has 4 problem(s)" in str(err)
    for p in err.problems:
        assert p.message in str(err)


# ------------------------------------------------------------------------------------- ports
def test_unconnected_input_port() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    a = g.add(x, None, name="sum")
    regression_tail(g, a, 4)
    p = only_problem(g)
    assert (p.node, p.port) == ("sum", "b")
    assert "Add 'sum' input 'b' is not connected" in p.message
    assert "g.connect(<output>, 'sum', 'b')" in p.message


def test_unconnected_output_port() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    first, _ = g.bcast(x, name="fan")
    regression_tail(g, first, 4)
    p = only_problem(g)
    assert (p.node, p.port) == ("fan", "out1")
    assert "Bcast 'fan' output 'out1' is not connected" in p.message


@pytest.mark.parametrize("connected", ["true", "false"])
def test_cond_with_one_branch_connected(connected: str) -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    branches = dict(zip(("true", "false"), g.cond(x, "key % 2 == 0", name="route"), strict=True))
    regression_tail(g, branches[connected], 4)
    missing = "false" if connected == "true" else "true"
    p = only_problem(g)
    assert (p.node, p.port) == ("route", missing)
    assert f"Cond 'route' output {missing!r} is not connected" in p.message
    assert "both branches" in p.message


def test_multiway_cond_reports_each_unconnected_branch() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    b0, _, _ = g.cond(x, "key % 3", branches=3, name="route")
    regression_tail(g, b0, 4)
    found = check(g)
    assert {(p.node, p.port) for p in found} == {("route", "b1"), ("route", "b2")}


# ------------------------------------------------------------------------------------ cycles
def test_cycle_not_through_a_phi() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    a = g.add(x, None, name="sum")
    r = g.relu(a, name="act")
    g.connect(r, "sum", "b")
    found = check(g)
    (cycle,) = [p for p in found if "does not pass through a Phi" in p.message]
    assert cycle.node in {"sum", "act"}
    assert "sum" in cycle.message and "act" in cycle.message
    assert "g.phi" in cycle.message


def test_loop_through_a_phi_without_an_isu() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    merged = g.phi(x, None, name="merge")
    r = g.relu(merged, name="act")
    again, done = g.cond(r, "t < 3", name="more")
    g.connect(again, "merge", "in1")
    regression_tail(g, done, 4)
    p = only_problem(g)
    assert p.node in {"merge", "act", "more"}
    assert "has no Isu" in p.message
    for name in ("merge", "act", "more"):
        assert repr(name) in p.message
    # the same loop with an Isu is fine
    g2 = Graph("g2")
    x = g2.input("x", width=4)
    merged = g2.phi(g2.isu(x, {"t": "0"}, {"t": None}), None, name="merge")
    r = g2.isu(g2.relu(merged), {"t": "t + 1"}, {"t": "t - 1"}, name="tick")
    again, done = g2.cond(r, "t < 3", name="more")
    g2.connect(again, "merge", "in1")
    regression_tail(g2, done, 4)
    assert check(g2) == []


def test_self_loop_without_an_isu() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    merged = g.phi(x, None, name="merge")
    g.connect(merged, "merge", "in1")
    found = problems_about(g, "merge")
    assert any("has no Isu" in p.message and "'merge'" in p.message for p in found)


# ------------------------------------------------------------------------------------ widths
def test_width_mismatch_names_node_port_widths_and_source() -> None:
    g = Graph("g")
    x = g.input("features", width=64)
    logits = g.linear(x, 10, in_features=128, name="fc")
    regression_tail(g, logits, 10)
    p = only_problem(g)
    assert p.node == "fc"
    message = p.message
    assert "Linear 'fc'" in message
    assert "input 'in'" in message
    assert "expected width 128" in message and "got 64" in message
    assert "Input 'features'" in message


def test_width_mismatch_between_binary_inputs() -> None:
    g = Graph("g")
    a = g.input("a", width=3)
    b = g.input("b", width=5)
    s = g.add(a, b, name="sum")
    regression_tail(g, s, 3)
    (p,) = problems_about(g, "sum")
    assert "Add 'sum'" in p.message and "'a'" in p.message and "'b'" in p.message
    assert "3" in p.message and "5" in p.message
    assert "Input 'a'" in p.message and "Input 'b'" in p.message


def test_width_mismatch_inside_a_loop_is_found() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    merged = g.phi(g.isu(x, {"t": "0"}, {"t": None}), None, name="merge")
    h = g.linear(merged, 5, name="grow")  # 4 -> 5, fed back into a Phi whose other input is 4 wide
    h = g.isu(h, {"t": "t + 1"}, {"t": "t - 1"}, name="tick")
    again, done = g.cond(h, "t < 3", name="more")
    g.connect(again, "merge", "in1")
    regression_tail(g, done, 5)
    messages = [p.message for p in check(g)]
    assert any("Phi 'merge'" in m and "4" in m and "5" in m for m in messages), messages


# ------------------------------------------------------------------------------- attributes
@pytest.mark.parametrize("value", [0, -3, 1.5, "2", True])
def test_bad_min_update_frequency(value: object) -> None:
    g = Graph("g")
    regression_tail(g, g.linear(g.input("x", width=4), 2, name="fc", min_update_frequency=value), 2)
    p = only_problem(g)
    assert p.node == "fc"
    assert "Linear 'fc' min_update_frequency" in p.message and repr(value) in p.message


@pytest.mark.parametrize("value", [-1, 0.5, "0", False])
def test_bad_worker(value: object) -> None:
    g = Graph("g")
    regression_tail(g, g.linear(g.input("x", width=4), 2, name="fc", worker=value), 2)
    p = only_problem(g)
    assert p.node == "fc"
    assert "Linear 'fc' worker" in p.message and repr(value) in p.message


@pytest.mark.parametrize(
    ("optimizer", "match"),
    [
        ({"name": "rmsprop"}, "unknown optimizer 'rmsprop'"),
        ({"lr": 0.1}, "expected an optimizer name"),
        ({"name": "sgd", "lr": -1}, "lr"),
        ({"name": "adam", "bogus": 1}, "bogus"),
        ("nadam", "unknown optimizer 'nadam'"),
    ],
)
def test_bad_optimizer(optimizer: object, match: str) -> None:
    g = Graph("g")
    regression_tail(g, g.linear(g.input("x", width=4), 2, name="fc", optimizer=optimizer), 2)
    p = only_problem(g)
    assert p.node == "fc"
    assert "Linear 'fc' optimizer" in p.message and match in p.message


def test_good_attributes_pass() -> None:
    g = Graph("g")
    fc = g.linear(
        g.input("x", width=4), 2, name="fc", min_update_frequency=3, worker=0,
        optimizer={"name": "adam", "lr": 0.01},
    )  # fmt: skip
    regression_tail(g, fc, 2)
    assert check(g) == []


# ---------------------------------------------------------------------------------- replicas
def _two_linears(g: Graph, widths: tuple[int, int]) -> None:
    x = g.input("x", width=4)
    a, b = g.bcast(x)
    la = g.linear(a, widths[0], name="la")
    lb = g.linear(b, widths[1], name="lb")
    g.mse(g.concat(la, lb), g.input("y", width=sum(widths)), name="loss")


def test_replica_group_shape_mismatch() -> None:
    g = Graph("g")
    _two_linears(g, (4, 3))
    g.replica_groups = [["la", "lb"]]
    p = only_problem(g)
    assert p.node == "la"
    assert "replica group ['la', 'lb']" in p.message and "shapes differ" in p.message
    assert "(4, 4)" in p.message and "(4, 3)" in p.message


def test_replica_group_naming_a_missing_node() -> None:
    g = Graph("g")
    _two_linears(g, (3, 3))
    g.replica_groups = [["la", "ghost"]]
    p = only_problem(g)
    assert p.node == "ghost"
    assert "missing node(s) ['ghost']" in p.message


def test_replica_group_of_nodes_without_parameters() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    a, b = g.bcast(x)
    g.mse(g.add(g.relu(a, name="ra"), g.relu(b, name="rb")), g.input("y", width=4), name="loss")
    g.replica_groups = [["ra", "rb"]]
    p = only_problem(g)
    assert p.node == "ra"
    assert "replica group ['ra', 'rb']" in p.message and "without parameters" in p.message


def test_equal_replica_group_is_valid_and_starts_equal() -> None:
    g = Graph("g")
    _two_linears(g, (3, 3))
    g.replica_groups = [["la", "lb"]]
    assert check(g) == []
    params = g.init_params(seed=1)
    assert (params["la"]["W"] == params["lb"]["W"]).all()


# ------------------------------------------------------------------------- graph-level rules
def test_missing_loss_only_when_required() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    g.add_node(ops.Identity(), [x], name="sink")
    g.add_node(ops.MSE(), [Ref("sink"), g.input("y", width=4)], name="loss")
    assert check(g, require_loss=True) == []
    g2 = Graph("g2")
    x = g2.input("x", width=4)
    a, b = g2.bcast(x, name="fan")
    g2.add(a, b, name="sum")
    found = check(g2, require_loss=True)
    assert any("has no loss" in p.message and p.node is None for p in found)
    assert not any("has no loss" in p.message for p in check(g2, require_loss=False))


def test_no_input() -> None:
    p = only_problem(Graph("empty"))
    assert p.node is None
    assert "no Input node" in p.message


# ---------------------------------------------------------------------------- builder errors
def test_connecting_an_already_fed_input() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    y = g.input("y", width=4)
    g.relu(x, name="act")
    with pytest.raises(GraphError) as info:
        g.connect(y, "act", "in")
    message = str(info.value)
    assert "act:in" in message and "already fed by x:out" in message
    assert "Phi" in message


def test_using_an_output_twice_points_at_bcast() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    g.relu(x, name="first")
    with pytest.raises(GraphError) as info:
        g.tanh(x, name="second")
    message = str(info.value)
    assert "x:out" in message and "already feeds first:in" in message
    assert "bcast" in message
    # a failed builder call leaves the graph as it was, so the corrected call can reuse the name
    assert "second" not in g.nodes
    assert len(g.edges) == 1
    g.relu(g.input("z", width=4), name="second")


def test_unknown_output_port() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    fan = g.bcast(x, 2, name="fan")
    g.relu(fan[0], name="act")
    with pytest.raises(GraphError) as info:
        g.connect(Ref("fan", "out7"), "act", "in")
    message = str(info.value)
    assert "Bcast 'fan' has no output 'out7'" in message and "['out0', 'out1']" in message


def test_unknown_input_port() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    g.add_node(ops.Add(), name="sum")
    with pytest.raises(GraphError) as info:
        g.connect(x, "sum", "c")
    message = str(info.value)
    assert "Add 'sum' has no input 'c'" in message and "['a', 'b']" in message
    with pytest.raises(GraphError, match="there is no node 'ghost'"):
        g.connect(x, "ghost", "in")
    with pytest.raises(GraphError, match="there is no node 'ghost'"):
        g.connect(Ref("ghost"), "sum", "a")


def test_add_node_mapping_with_unknown_port() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    with pytest.raises(GraphError, match="Linear 'fc' has no input 'x'"):
        g.add_node(ops.Linear(4, 2), {"x": x}, name="fc")
    assert "fc" not in g.nodes
    g.add_node(ops.Linear(4, 2), {"in": x}, name="fc")


def test_too_many_positional_inputs() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    y = g.input("y", width=4)
    with pytest.raises(GraphError, match=r"ReLU 'act': got 2 inputs but it has ports \['in'\]"):
        g.add_node(ops.ReLU(), [x, y], name="act")


def test_duplicate_node_names() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    g.relu(x, name="act")
    with pytest.raises(GraphError) as info:
        g.input("act", width=4)
    assert "node name 'act' is already used by ReLU 'act'" in str(info.value)


def test_fresh_names_do_not_collide_with_given_names() -> None:
    g = Graph("g")
    x = g.input("x", width=4)
    a, b = g.bcast(x, name="bcast_0")
    assert g.relu(a).node != g.relu(b).node


def test_linear_needs_a_known_width() -> None:
    g = Graph("g")
    x = g.input("x")  # no width
    with pytest.raises(GraphError, match="the width of x:out is not known"):
        g.linear(x, 3)


def test_add_node_needs_an_op() -> None:
    with pytest.raises(GraphError, match="expected an Op instance"):
        Graph("g").add_node("linear")  # type: ignore[arg-type]


def test_connect_needs_a_ref() -> None:
    g = Graph("g")
    g.input("x", width=4)
    g.add_node(ops.ReLU(), name="act")
    with pytest.raises(GraphError, match="expected a Ref"):
        g.connect("x", "act", "in")  # type: ignore[arg-type]


def test_a_node_with_billions_of_parameters_is_a_problem_not_a_memory_error() -> None:
    from amp_notebook.ir.validate import MAX_NODE_PARAMETERS, check

    g = Graph("typo")
    x = g.input("x", width=4)
    g.mse(g.linear(g.linear(x, 100_000, name="wide"), 4, in_features=100_000, name="back"), g.input("y", width=4))
    assert check(g) == []
    g.nodes["back"].op = type(g.nodes["back"].op)(100_000, 4_000)  # each width within the schema's 2**24
    (problem,) = [p for p in check(g) if p.node == "back"]
    assert "has 400,004,000 parameters (W 100000 x 4000, b 4000)" in problem.message
    assert f"more than {MAX_NODE_PARAMETERS:,}" in problem.message and "typo" in problem.message
