"""``Graph``'s edits (what the builder sends): rename, replace an op, pin a worker, set a node's update frequency
and optimizer, tie replicas, take another graph's content. Each keeps the graph's rules or refuses with a
``GraphError`` that names the node and leaves the graph as it was."""

from __future__ import annotations

import pytest

from amp_notebook.ir import ops as O
from amp_notebook.ir.graph import Graph, GraphError, Ref
from amp_notebook.ir.serialize import graph_to_dict


def small() -> Graph:
    g = Graph("g")
    x = g.input("x", width=4)
    h = g.relu(g.linear(x, 8, name="enc"), name="act")
    g.softmax_cross_entropy(g.linear(h, 3, name="out"), g.input("target", dtype="int"), name="loss")
    return g


def test_rename_keeps_order_edges_and_replica_groups() -> None:
    g = small()
    g.tie_replicas(["enc", "out"])  # shapes differ: the validator would refuse it, the edit does not care
    g.rename("enc", "encoder")
    assert list(g.nodes) == ["x", "encoder", "act", "out", "target", "loss"]
    assert g.nodes["encoder"].name == "encoder"
    assert {str(e) for e in g.edges} >= {"x:out -> encoder:in", "encoder:out -> act:in"}
    assert g.replica_groups == [["encoder", "out"]]


REFUSED_RENAMES = [("nope", "x2", "no node 'nope'"), ("enc", "act", "used by ReLU 'act'"), ("enc", "", "non-empty")]


@pytest.mark.parametrize(("old", "new", "match"), REFUSED_RENAMES)
def test_rename_refusals_name_the_culprit(old: str, new: str, match: str) -> None:
    g = small()
    before = graph_to_dict(g)
    with pytest.raises(GraphError, match=match):
        g.rename(old, new)
    assert graph_to_dict(g) == before


def test_replace_op_drops_the_edges_on_ports_that_vanish() -> None:
    g = Graph("g")
    a, b = g.input("a", width=2), g.input("b", width=2)
    g.relu(g.concat(a, b, name="cat"), name="act")
    dropped = g.replace_op("cat", O.Concat(1))
    assert [str(e) for e in dropped] == ["b:out -> cat:in1"]
    assert {str(e) for e in g.edges} == {"a:out -> cat:in0", "cat:out -> act:in"}
    assert isinstance(g.nodes["cat"].op, O.Concat) and g.nodes["cat"].op.input_ports() == ("in0",)
    with pytest.raises(GraphError, match="expected an Op instance"):
        g.replace_op("cat", "concat")


def test_node_attributes_are_checked_as_the_validator_checks_them() -> None:
    g = small()
    g.assign_worker("enc", 1)
    g.set_min_update_frequency("enc", 4)
    g.set_optimizer("enc", {"name": "adam", "lr": 0.01})
    node = g.nodes["enc"]
    assert (node.worker, node.min_update_frequency, node.optimizer) == (1, 4, {"name": "adam", "lr": 0.01})
    g.assign_worker("enc", None)
    assert node.worker is None
    for call, match in [
        (lambda: g.assign_worker("enc", -1), r"Linear 'enc' worker: expected an int >= 0"),
        (lambda: g.assign_worker("enc", True), "worker: expected an int"),
        (lambda: g.set_min_update_frequency("enc", 0), "min_update_frequency: expected an int >= 1"),
        (lambda: g.set_optimizer("enc", {"name": "adamw"}), "Linear 'enc' optimizer"),
        (lambda: g.assign_worker("ghost", 0), "no node 'ghost'"),
    ]:
        with pytest.raises(GraphError, match=match):
            call()
    assert (node.worker, node.min_update_frequency, node.optimizer["name"]) == (None, 4, "adam")


def test_tie_replicas_refuses_unknown_and_already_grouped_nodes() -> None:
    g = small()
    with pytest.raises(GraphError, match="two or more node names"):
        g.tie_replicas(["enc", "ghost"])
    g.tie_replicas(["enc", "out"])
    with pytest.raises(GraphError, match="Linear 'enc' is in a replica group already"):
        g.tie_replicas(["enc", "act"])


def test_replace_contents_keeps_the_object() -> None:
    g, other = small(), Graph("other")
    other.input("y", width=3)
    g.replace_contents(other)
    assert g.name == "other" and list(g.nodes) == ["y"] and g.edges == [] and g.replica_groups == []
    assert g.width(Ref("y")) == 3
