"""The graph builder without a browser: every intent on a Graph, undo/redo, refusals with messages, the
synced view, replicas, placement, and the widget's Python API (no kernel needed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from amp_notebook.ir.graph import Ref
from amp_notebook.ir.serialize import graph_to_dict
from amp_notebook.ui.builder_model import BuilderError, BuilderModel


def small() -> BuilderModel:
    m = BuilderModel()
    m.add_node("input", name="x", config={"width": 8}, position=(0, 0))
    m.add_node("linear", name="fc", config={"in_features": 8, "out_features": 3}, position=(200, 0))
    m.add_node("input", name="y", config={"dtype": "int"})
    m.add_node("softmax_cross_entropy", name="loss")
    return m


def test_add_connect_and_validate_to_a_trainable_graph() -> None:
    m = small()
    assert m.graph.nodes["fc"].op.out_features == 3
    assert m.positions["fc"] == (200.0, 0.0)
    messages = [p.message for p in m.problems()]
    assert any("Linear 'fc' input 'in' is not connected" in s for s in messages)
    m.connect("x", "out", "fc", "in")
    m.connect("fc", "out", "loss", "logits")
    m.connect("y", "out", "loss", "target")
    assert m.problems() == []
    assert m.widths()[("fc", "out")] == 3


def test_view_marks_problems_on_nodes_and_ports_and_widths_on_edges() -> None:
    m = small()
    m.connect("x", "out", "fc", "in")
    view = m.view()
    fc = next(n for n in view["nodes"] if n["id"] == "fc")
    assert [e["port"] for e in fc["errors"]] == ["out"]
    assert "output 'out' is not connected" in fc["errors"][0]["message"]
    assert view["edges"] == [
        {"id": "x:out->fc:in", "source": "x", "sourceHandle": "out", "target": "fc", "targetHandle": "in", "width": 8,
         "loop": False}
    ]  # fmt: skip
    assert fc["config"] == {"in_features": "8", "out_features": "3", "bias": "true"}
    assert next(n for n in view["nodes"] if n["id"] == "y")["position"] is None  # laid out by the browser
    json.dumps(view)  # JSON-ready


def test_invalid_connects_are_refused_with_a_message_and_change_nothing() -> None:
    m = small()
    m.connect("x", "out", "fc", "in")
    before = graph_to_dict(m.graph)
    cases = [
        (("y", "out", "fc", "in"), "already fed by x:out"),
        (("x", "out", "loss", "logits"), "already feeds fc:in"),
        (("fc", "nope", "loss", "logits"), "has no output 'nope'"),
        (("fc", "out", "loss", "bad"), "has no input 'bad'"),
        (("ghost", "out", "loss", "logits"), "there is no node 'ghost'"),
    ]
    for args, message in cases:
        with pytest.raises(BuilderError, match=message):
            m.connect(*args)
    assert graph_to_dict(m.graph) == before
    assert m.can_undo and m._undo[-1][0] != before  # refusals pushed no undo step


def test_width_mismatch_names_node_port_expected_found() -> None:
    m = small()
    m.set_property("fc", "in_features", "5")
    m.connect("x", "out", "fc", "in")
    (problem,) = [p for p in m.problems() if p.port == "in"]
    assert problem.node == "fc"
    assert "expected width 5, got 8" in problem.message and "fix" in problem.message


def test_every_intent_through_apply_and_undo_redo() -> None:
    m = BuilderModel()
    intents = [
        {"type": "add_node", "kind": "input", "name": "x", "config": {"width": "4"}, "position": [0, 0]},
        {"type": "add_node", "kind": "relu", "name": "r", "position": {"x": 100, "y": 0}},
        {"type": "connect", "src": "x", "src_port": "out", "dst": "r", "dst_port": "in"},
        {"type": "move", "positions": {"r": [150, 20]}},
        {"type": "set_property", "node": "x", "field": "width", "value": "6"},
        {"type": "set_property", "node": "r", "field": "name", "value": "act"},
        {"type": "disconnect", "dst": "act", "dst_port": "in"},
        {"type": "add_node", "kind": "tanh", "name": "t"},
        {"type": "delete", "nodes": ["t"]},
        {"type": "auto_layout"},
        {"type": "auto_place"},
        {"type": "pin", "nodes": ["x", "act"], "worker": 1},
        {"type": "pin", "nodes": ["act"], "worker": ""},
    ]
    states = [graph_to_dict(m.graph)]
    positions = [dict(m.positions)]
    for intent in intents:
        m.apply(intent)
        states.append(graph_to_dict(m.graph))
        positions.append(dict(m.positions))
    assert m.graph.nodes["x"].op.width == 6 and "act" in m.graph.nodes and not m.graph.edges
    assert states[4] != states[3] or positions[4] != positions[3]
    for i in range(len(intents), 0, -1):
        m.apply({"type": "undo"})
        assert graph_to_dict(m.graph) == states[i - 1]
        assert m.positions == positions[i - 1]
    with pytest.raises(BuilderError, match="nothing to undo"):
        m.undo()
    for i in range(1, len(intents) + 1):
        m.apply({"type": "redo"})
        assert graph_to_dict(m.graph) == states[i]
    with pytest.raises(BuilderError, match="nothing to redo"):
        m.redo()


def test_undo_keeps_the_graph_object_users_hold() -> None:
    m = small()
    g = m.graph
    m.connect("x", "out", "fc", "in")
    m.undo()
    assert m.graph is g and not g.edges


def test_a_new_edit_clears_redo_and_layout_is_not_an_undo_step() -> None:
    m = small()
    m.connect("x", "out", "fc", "in")
    m.undo()
    m.layout({"y": [5, 5], "loss": [9, 9]})
    assert m.can_redo and m.positions["y"] == (5.0, 5.0)
    m.move({"y": (1, 1)})
    assert not m.can_redo


def test_wrong_property_types_are_refused() -> None:
    m = small()
    for field, value, message in [
        ("out_features", "abc", "expected an int, got 'abc'"),
        ("out_features", 2.5, "expected an int, got float 2.5"),
        ("out_features", True, "expected an int, got bool True"),
        ("out_features", "0", "expected a positive int"),
        ("bias", "maybe", "expected true or false"),
        ("min_update_frequency", "0", "expected an int >= 1"),
        ("worker", "-1", "expected an int >= 0"),
        ("worker", "two", "expected an int"),
        ("optimizer", "rmsprop", "unknown optimizer 'rmsprop'"),
        ("optimizer", "{not json", "expected JSON"),
        ("nonsense", 1, "no property 'nonsense'"),
    ]:
        with pytest.raises(BuilderError, match=message):
            m.set_property("fc", field, value)
    assert m.graph.nodes["fc"].op.out_features == 3 and m.graph.nodes["fc"].worker is None
    with pytest.raises(BuilderError, match="no property 'size'"):
        m.add_node("linear", config={"size": 3})
    with pytest.raises(BuilderError, match="unknown op kind 'conv2d'"):
        m.add_node("conv2d")
    with pytest.raises(BuilderError, match="unknown intent 'exec'"):
        m.apply({"type": "exec", "code": "print(1)"})


@pytest.mark.parametrize(
    "expression",
    ["__import__('os').system('echo pwned')", "t.__class__", "open('x')", "(lambda: 1)()", "t ** 99", "x[0]",
     "t.real", "__builtins__"],
)  # fmt: skip
def test_unsafe_expressions_are_refused(expression: str) -> None:
    m = BuilderModel()
    m.add_node("cond", name="c")
    m.add_node("isu", name="i")
    with pytest.raises(BuilderError, match=r"not allowed|only calls of|not a valid expression"):
        m.set_property("c", "predicate", expression)
    with pytest.raises(BuilderError, match=r"not allowed|only calls of|not a valid expression"):
        m.set_property("i", "forward", f"t = {expression}")
    assert m.graph.nodes["c"].op.predicate.source == "t < length"


def test_expressions_and_updates_from_text() -> None:
    m = BuilderModel()
    m.add_node("isu", name="i")
    m.set_property("i", "forward", "t = t + 2; length = None")
    assert m.graph.nodes["i"].op.config()["forward"] == {"t": "t + 2", "length": None}
    m.add_node("split", name="s")
    m.set_property("s", "sizes", "4, 4, 8")
    assert m.graph.nodes["s"].op.output_ports() == ("out0", "out1", "out2")


def test_shrinking_ports_drops_their_edges() -> None:
    m = BuilderModel()
    m.add_node("input", name="x", config={"width": 4})
    m.add_node("bcast", name="b", config={"n_outputs": 3})
    m.add_node("relu", name="r")
    m.connect("x", "out", "b", "in")
    m.connect("b", "out2", "r", "in")
    m.set_property("b", "n_outputs", 2)
    assert [str(e) for e in m.graph.edges] == ["x:out -> b:in"]


def test_loaded_json_is_data_never_code() -> None:
    m = BuilderModel()
    evil = {"schema": "amp_notebook.graph", "version": 1, "name": "g", "edges": [],
            "nodes": [{"name": "c", "kind": "cond", "config": {"predicate": "__import__('os').getcwd()"}}]}  # fmt: skip
    with pytest.raises(Exception, match=r"not allowed|only calls of"):
        m.load(evil)
    assert not m.graph.nodes


def test_load_every_zoo_model_and_view() -> None:
    from amp_notebook.models import zoo
    from amp_notebook.ui.builder_model import ZOO_MODELS

    assert ZOO_MODELS == zoo.NAMES and "bilstm-tagger" in ZOO_MODELS  # the CLI's and Python's names
    m = BuilderModel()
    for name in ZOO_MODELS:
        m.load_model(name)
        view = m.view()
        assert view["n_problems"] == 0, (name, view["general_errors"], [n["errors"] for n in view["nodes"]])
        assert len(view["nodes"]) == len(m.graph.nodes)
        assert m.zoo_model == view["zoo_model"] == name


def test_a_zoo_model_is_remembered_by_its_name_until_a_plain_load_and_undo_brings_it_back() -> None:
    m = BuilderModel()
    assert m.zoo_model is None
    m.load_model("tree_lstm")  # the underscore spelling is an alias: the registry's name is kept
    assert m.zoo_model == "tree-lstm"
    m.set_property("classify", "name", "head")  # edits keep it: a retuned zoo model trains on the zoo's data
    assert m.zoo_model == "tree-lstm"
    m.load_model("rnn")
    assert m.zoo_model == "rnn"
    m.load(graph_to_dict(m.graph))  # the same graph, but from a plain load: no zoo model any more
    assert m.zoo_model is None and m.view()["zoo_model"] is None
    m.undo()  # undoing the load brings the zoo model back with its graph
    assert m.zoo_model == "rnn"
    m.undo()
    assert m.zoo_model == "tree-lstm" and "head" in m.graph.nodes
    m.undo()
    m.undo()
    assert m.zoo_model is None and not m.graph.nodes
    m.redo()
    assert m.zoo_model == "tree-lstm"
    with pytest.raises(BuilderError, match=r"unknown zoo model 'tree lstm'.*bilstm-tagger"):
        m.load_model("tree lstm")
    assert m.zoo_model == "tree-lstm"  # a refused load changes nothing


@pytest.mark.parametrize(
    ("model", "loops"),
    [
        ("mlp", []),
        ("rnn", ["more:true -> loop:in1"]),
        # the replicas' merging Phi sits inside the loop: its edges close cycles too, but only through the
        # loop's Phi, so they are not back-edges
        ("rnn-x2", ["more:true -> loop:in1"]),
        ("tree-lstm", ["branch_cell:out -> nodes:in1"]),
        ("ggsnn", ["more:true -> loop:in1"]),
    ],
)
def test_view_marks_loop_back_edges(model: str, loops: list[str]) -> None:
    m = BuilderModel()
    m.load_model(model)
    view = m.view()
    marked = sorted(f"{e['source']}:{e['sourceHandle']} -> {e['target']}:{e['targetHandle']}"
                    for e in view["edges"] if e["loop"])  # fmt: skip
    assert marked == loops


def test_nested_loops_each_get_their_back_edge() -> None:
    from amp_notebook.ir.graph import Graph
    from amp_notebook.ui.builder_view import loop_back_edges

    g = Graph("nested")
    outer = g.phi(g.input("x", width=4), None, name="outer")
    inner = g.phi(outer, None, name="inner")
    h = g.relu(inner, name="body")
    again, out = g.cond(h, "t < 3", name="inner_more")
    g.connect(again, "inner", "in1")
    again2, _done = g.cond(out, "s < 2", name="outer_more")
    g.connect(again2, "outer", "in1")
    assert sorted(map(str, loop_back_edges(g))) == ["inner_more:true -> inner:in1", "outer_more:true -> outer:in1"]


def test_layout_direction_is_kept_with_the_positions_and_undone_with_them() -> None:
    m = BuilderModel()
    m.load_model("rnn")
    assert m.view()["direction"] is None  # the browser chooses it by the graph's shape
    m.layout({"tokens": [0, 0]}, direction="TB")
    assert m.view()["direction"] == "TB" and m.positions["tokens"] == (0.0, 0.0)
    m.auto_layout(direction="LR")  # one undo step: positions forgotten, the direction asked for
    assert m.direction == "LR" and not m.positions
    m.undo()
    assert m.direction == "TB" and m.positions["tokens"] == (0.0, 0.0)
    m.apply({"type": "auto_layout", "direction": None})
    assert m.direction is None
    m.load_model("mlp")
    m.layout({"x": [1, 2]}, direction="LR")
    m.load_model("rnn")
    assert m.direction is None and not m.positions
    with pytest.raises(BuilderError, match=r"layout direction: expected 'TB'.*got 'up'"):
        m.layout({}, direction="up")
    with pytest.raises(BuilderError, match=r"intent 'layout' refused: direction: expected one of \"TB\", \"LR\""):
        m.apply({"type": "layout", "positions": {}, "direction": "up"})
    with pytest.raises(BuilderError, match=r"auto_layout direction"):
        m.auto_layout(direction="diagonal")


def test_replicas_expand_and_collapse() -> None:
    m = BuilderModel()
    m.load_model("mlp")
    before = graph_to_dict(m.graph)
    m.set_property("linear2", "replicas", 3)
    g = m.graph
    assert ["linear2", "linear2_r1", "linear2_r2"] in g.replica_groups
    assert g.nodes["linear2_route"].op.config() == {"predicate": "key % 3", "branches": 3}
    assert m.problems() == []
    m.set_property("linear2", "replicas", "2")
    assert g.nodes["linear2_route"].op.config()["predicate"] == "key % 2 == 0" and "linear2_r2" not in g.nodes
    m.set_property("linear2", "replicas", 1)
    after = graph_to_dict(m.graph)
    assert sorted(after["edges"]) == sorted(before["edges"]) and not after["replica_groups"]
    m.load_model("rnn_x2")
    with pytest.raises(BuilderError, match="not made by the builder"):
        m.set_property("step0", "replicas", 3)
    with pytest.raises(BuilderError, match="only parameterized nodes"):
        m.set_property("relu0", "replicas", 2)


def test_auto_place_pins_workers_and_view_colours_by_worker() -> None:
    m = BuilderModel(workers=3)
    m.load_model("mlp")
    placed = m.auto_place()
    assert {placed[n] for n in ("linear1", "linear2", "linear3")} == {0, 1, 2}
    assert all(m.graph.nodes[n].worker == w for n, w in placed.items())
    view = m.view()
    assert all(n["pinned"] and n["worker"] == placed[n["id"]] for n in view["nodes"])
    m.set_property("linear1", "worker", "")
    assert m.graph.nodes["linear1"].worker is None


def test_pin_is_one_undo_step_and_lanes_show_each_workers_load() -> None:
    m = BuilderModel(workers=3)
    m.load_model("mlp")
    m.auto_place()
    lanes = m.view()["lanes"]
    assert [lane["worker"] for lane in lanes] == [0, 1, 2]
    assert sum(lane["nodes"] for lane in lanes) == len(m.graph.nodes)
    linear = [n for n in m.graph.nodes if m.graph.nodes[n].kind == "linear"]
    assert sorted(x for lane in lanes for x in lane["heavy_nodes"]) == sorted(linear)
    costs = {n: m.graph.nodes[n].op.in_features * m.graph.nodes[n].op.out_features for n in linear}
    for lane in lanes:  # a lane's cost is the multiply-adds per row of the Linear nodes it runs
        assert lane["cost"] == sum(costs[n] for n in lane["heavy_nodes"])
        assert lane["pinned"] == lane["nodes"]
    before = graph_to_dict(m.graph)
    m.pin(["linear1", "linear2"], 2)  # what dropping two selected nodes on lane 2 sends
    assert m.graph.nodes["linear1"].worker == m.graph.nodes["linear2"].worker == 2
    lane2 = m.view()["lanes"][2]
    assert {"linear1", "linear2"} <= set(lane2["heavy_nodes"])
    assert lane2["cost"] >= costs["linear1"] + costs["linear2"]
    m.undo()
    assert graph_to_dict(m.graph) == before  # both nodes back in one step
    m.pin("linear1", None)  # the "heuristic" lane unpins
    assert m.graph.nodes["linear1"].worker is None
    assert m.view()["lanes"][0]["pinned"] + m.view()["lanes"][1]["pinned"] + m.view()["lanes"][2]["pinned"] == (
        len(m.graph.nodes) - 1
    )


@pytest.mark.parametrize(
    ("nodes", "worker", "message"),
    [
        (["linear1"], 3, r"worker 3 is not one of the builder's workers 0\.\.2"),
        (["linear1"], -1, r"worker -1 is not one of"),
        (["linear1"], "two", r"pin worker"),
        (["nope"], 1, r"pin: there is no node 'nope'"),
        ([], 1, r"intent 'pin' refused: nodes: expected at least 1 item, found 0"),
        ({"a": 1}, 1, r"intent 'pin' refused: nodes: expected a node name or a non-empty list of them"),
    ],
)
def test_pin_refuses_bad_input_and_changes_nothing(nodes: object, worker: object, message: str) -> None:
    m = BuilderModel(workers=3)
    m.load_model("mlp")
    before = graph_to_dict(m.graph)
    with pytest.raises(BuilderError, match=message):
        m.apply({"type": "pin", "nodes": nodes, "worker": worker})
    assert graph_to_dict(m.graph) == before


def test_cells_are_added_behind_identity_ports() -> None:
    m = BuilderModel()
    made = m.add_cell("cell:gru_cell", name="gru", hidden=4, in_features=3, position=(10, 10))
    assert {"gru_in_x", "gru_in_h", "gru_x"} <= set(made)
    assert all(m.graph.nodes[n].meta["cell"] == "gru" for n in made)
    m.add_node("input", name="x", config={"width": 3})
    m.connect("x", "out", "gru_in_x", "in")
    assert m.widths()[("gru_x", "out")] == 12


def test_edit_block_is_one_undo_step_and_failures_roll_back() -> None:
    m = small()
    with m.edit() as g:
        g.connect(Ref("x"), "fc", "in")
        g.connect(Ref("fc"), "loss", "logits")
    assert len(m.graph.edges) == 2
    with pytest.raises(BuilderError), m.edit() as g:
        g.connect(Ref("y"), "loss", "target")
        g.connect(Ref("x"), "loss", "target")  # already fed: the whole block is undone
    assert len(m.graph.edges) == 2
    m.undo()
    assert not m.graph.edges


def test_widget_python_api_syncs_the_view() -> None:
    pytest.importorskip("anywidget")
    from amp_notebook.ui import GraphBuilder

    b = GraphBuilder()
    b.add_node("input", name="x", config={"width": 8})
    assert [n["id"] for n in b.view["nodes"]] == ["x"]
    with pytest.raises(BuilderError):
        b.connect("x", "out", "nowhere", "in")
    assert "no node 'nowhere'" in b.notice["text"]
    b._on_msg(b, {"type": "intent", "intent": {"type": "add_node", "kind": "relu", "name": "r"}}, [])
    b._on_msg(b, {"type": "intent", "intent": {"type": "connect", "src": "x", "src_port": "out", "dst": "r",
                                                "dst_port": "in"}}, [])  # fmt: skip
    assert b.view["edges"][0]["width"] == 8
    b._on_msg(b, {"type": "export", "format": "python"}, [])
    assert "g.relu(x, name='r')" in b.export["text"]
    b._on_msg(b, {"type": "train"}, [])
    assert "no training data" in b.notice["text"] and "load a zoo model" in b.notice["text"]
    b.load(b.to_json())
    assert list(b.graph.nodes) == ["x", "r"]


def test_train_on_a_loaded_zoo_model_brings_its_data_and_settings() -> None:
    pytest.importorskip("anywidget")
    from amp_notebook.data.list_reduction import list_reduction_dataset
    from amp_notebook.models import zoo
    from amp_notebook.ui import GraphBuilder

    entry = zoo.get("rnn")
    small = entry.dataset("small")
    b = GraphBuilder()
    assert b.zoo == [{"name": e.name, "description": e.description} for e in zoo.ENTRIES]
    b._on_msg(b, {"type": "intent", "intent": {"type": "load_model", "model": "rnn"}}, [])
    b._on_msg(b, {"type": "train"}, [])  # the canvas's Train: no train_data set
    assert b.notice["level"] == "info", b.notice
    assert b.notice["text"].startswith(
        f"training the zoo's rnn on its small dataset (list_reduction: {small.train_instances:,} training instances"
    )
    run = b.run
    assert run is not None
    status = run.status
    # the zoo's recommended settings: its epochs (not train's 1) and its update frequency on every node
    assert status["epochs"] == entry.settings.epochs == 3
    assert set(status["min_update_frequency"].values()) == {entry.settings.min_update_frequency} == {10}
    run.stop()
    # train_options and Train's keywords go over the zoo's settings; the data is the zoo's small dataset
    b.train_options = {"epochs": 1}
    result = b.train(max_active_keys=2).wait(timeout=120)
    assert result.train_instances == small.train_instances
    assert result.history[0].val_instances == small.val_instances
    assert (result.config.epochs, result.config.max_active_keys, result.config.workers) == (1, 2, b.workers)
    assert result.config.min_update_frequency == 10 and result.config.optimizer == dict(entry.settings.optimizer)
    # a plain load forgets the zoo model: Train asks for data again; undoing the load brings the zoo back
    b.load(b.to_json())
    b._on_msg(b, {"type": "train"}, [])
    assert b.notice["level"] == "error" and "no training data" in b.notice["text"]
    b.undo()
    assert b.view["zoo_model"] == "rnn"
    # data of one's own on a zoo model: the zoo's settings still apply, and the notice says whose data it is not
    own = list_reduction_dataset(n_train=200, n_val=50, seed=3)
    b.train_options = {}
    run = b.train(own, epochs=1)
    assert "on its small dataset" not in b.notice["text"] and "min_update_frequency 10" in b.notice["text"]
    assert run.wait(timeout=120).train_instances == 200


def test_widget_trains_in_the_background() -> None:
    pytest.importorskip("anywidget")
    import amp_notebook as amp
    from amp_notebook.ui import GraphBuilder

    data = amp.data.list_reduction_dataset(n_train=200, n_val=50, seed=0)
    b = GraphBuilder()
    b.load_model("rnn")
    b.set_property("step", "out_features", 16)
    b.set_property("out", "in_features", 16)
    b.set_property("h0", "width", 16)
    b.set_property("step", "in_features", 80)
    run = b.train(data, epochs=1, optimizer={"name": "adam", "lr": 2e-3})
    result = run.wait(timeout=60)
    assert result.train_instances > 0


def test_a_default_config_is_a_copy_the_palette_keeps_its_defaults() -> None:
    from amp_notebook.ui.builder_schema import default_config

    config = default_config("split")
    config["sizes"].append(True)  # a caller (or a fuzzed intent) changing what it was given
    assert default_config("split") == {"sizes": [32, 32]}


def test_loading_another_graph_clears_the_notice_and_the_export_about_the_last() -> None:
    pytest.importorskip("anywidget")
    from amp_notebook.ui import GraphBuilder

    b = GraphBuilder()
    b.load_model("mlp")
    first = b.view["generation"]
    b._on_msg(b, {"type": "intent", "intent": {"type": "set_property", "node": "linear1",
                                                "field": "min_update_frequency", "value": "many"}}, [])  # fmt: skip
    assert "many" in b.notice["text"]
    b._on_msg(b, {"type": "export", "format": "python"}, [])
    assert "linear1" in b.export["text"]
    # an edit keeps both, and the export's text follows it
    b.set_property("linear1", "name", "first")
    assert "first" in b.export["text"] and "linear1" not in b.export["text"] and b.notice
    # a refused load changes nothing
    with pytest.raises(BuilderError):
        b.load_model("no_such_model")
    assert b.view["generation"] == first and "no_such_model" in b.notice["text"] and b.export
    # another graph, from the canvas's load: the notice and the export of the last one are gone
    b._on_msg(b, {"type": "intent", "intent": {"type": "load_model", "model": "rnn"}}, [])
    assert b.view["generation"] == first + 1 and b.view["name"] != "mlp"
    assert b.notice == {} and b.export == {}
    # undoing the load is an edit: the graph comes back, and a new export shows it
    b.undo()
    b._on_msg(b, {"type": "export", "format": "json"}, [])
    assert '"first"' in b.export["text"]


EXIT_AFTER_A_BUILDER_RUN = """
import amp_notebook as amp
from amp_notebook.ui import GraphBuilder
b = GraphBuilder(amp.models.rnn(hidden=16, embedding_dim=8))
result = b.train(amp.data.list_reduction_dataset(n_train=100, n_val=20, seed=0), epochs=1).wait(timeout=60)
print(result.summary()["engine_used"])
"""


def test_a_script_that_trains_from_a_builder_exits_quietly() -> None:
    # ipywidgets keeps an open widget, its run and the run's engine until the widget is closed, so they are
    # alive at exit: that is no leak, and the exit prints nothing about one (nanobind's leak report is off
    # outside the sanitizer build)
    pytest.importorskip("anywidget")
    done = subprocess.run([sys.executable, "-c", EXIT_AFTER_A_BUILDER_RUN], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] in ("native", "python")
    assert "leak" not in done.stderr, done.stderr
