"""Graph -> Python builder code -> the same graph, for every model-zoo graph and every op kind."""

from __future__ import annotations

import pytest

from amp_notebook.ir import ops as O
from amp_notebook.ir.codegen import graph_to_python
from amp_notebook.ir.graph import Graph, Ref
from amp_notebook.ir.serialize import graph_from_dict, graph_to_dict
from amp_notebook.models import zoo
from amp_notebook.ui import builder_schema as S
from amp_notebook.ui.builder_model import ZOO_MODELS, BuilderModel


def canonical(graph: Graph) -> dict:
    """The graph's JSON with its edge list sorted: equal for the same graph however it was built."""
    data = graph_to_dict(graph)
    data["edges"] = sorted(data["edges"])
    return data


def rebuild(source: str) -> Graph:
    namespace: dict = {}
    exec(compile(source, "<generated>", "exec"), namespace)  # the test runs the generated code; the builder never does
    return namespace["g"]


@pytest.mark.parametrize("model", ZOO_MODELS)
def test_python_round_trip_of_every_model(model: str) -> None:
    graph = zoo.get(model).graph()
    assert canonical(rebuild(graph_to_python(graph))) == canonical(graph)


@pytest.mark.parametrize("model", ZOO_MODELS)
def test_json_round_trip_of_every_model(model: str) -> None:
    graph = zoo.get(model).graph()
    assert graph_to_dict(graph_from_dict(graph_to_dict(graph))) == graph_to_dict(graph)


def test_node_order_attributes_and_meta_survive() -> None:
    graph = zoo.get("tree-lstm").graph()
    graph.nodes["classify"].worker = 1
    graph.nodes["classify"].optimizer = {"name": "adam", "lr": 0.002}
    back = rebuild(graph_to_python(graph))
    assert list(back.nodes) == list(graph.nodes)
    assert back.nodes["classify"].optimizer == {"name": "adam", "lr": 0.002}
    assert back.nodes["leaf_gates"].meta == {"cell": "leaf"}


def test_every_op_kind_round_trips_even_when_added_out_of_order() -> None:
    """One node of every kind (default properties) wired nowhere, then a consumer added before its producer."""
    model = BuilderModel()
    for kind in O.OPS:
        model.add_node(kind, name=f"n_{kind}")
    model.add_node("relu", name="early")
    model.add_node("identity", name="late")
    model.connect("late", "out", "early", "in")  # fed by a node written after it: the generic form + connect
    graph = model.graph
    source = graph_to_python(graph)
    assert canonical(rebuild(source)) == canonical(graph)
    assert "g.connect(Ref('late', 'out'), 'early', 'in')" in source


def test_names_and_strings_are_written_as_data() -> None:
    g = Graph("evil'); import os; os.system('echo pwned'); ('")
    g.input("x; import os", width=4)
    g.add_node(O.Cond("t < 3"), [Ref("x; import os")], name="__import__('os')")
    source = graph_to_python(g)
    assert "import os\n" not in source.replace("from amp_notebook", "")
    back = rebuild(source)
    assert canonical(back) == canonical(g)


def test_non_data_values_are_refused() -> None:
    g = Graph("g")
    g.input("x", width=4)
    g.nodes["x"].meta["bad"] = object()
    with pytest.raises(ValueError, match="cannot write"):
        graph_to_python(g)


def test_every_palette_kind_makes_a_node_with_its_defaults() -> None:
    for entry in S.palette():
        model = BuilderModel()
        model.add_node(entry["kind"])
        assert model.graph.nodes
