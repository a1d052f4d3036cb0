"""Graph JSON round trips, refusal of bad or unsafe JSON, and parameters as .npz without pickle."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.ir import ops
from amp_notebook.ir.graph import Graph, GraphError
from amp_notebook.ir.serialize import (
    SCHEMA,
    VERSION,
    graph_from_dict,
    graph_to_dict,
    load_graph,
    load_params,
    save_graph,
    save_params,
)


def _with_attrs() -> Graph:
    g = models.mlp(hidden=16)
    g.nodes["linear1"].min_update_frequency = 4
    g.nodes["linear2"].optimizer = {"name": "adam", "lr": 0.001}
    g.nodes["linear3"].worker = 2
    g.nodes["relu1"].meta = {"color": "red", "note": [1, 2]}
    return g


GRAPHS = {
    "mlp": models.mlp,
    "mlp_with_attrs": _with_attrs,
    "rnn": models.rnn,
    "rnn_x2": lambda: models.rnn(replicas=2),
    "rnn_x3_small": lambda: models.rnn(vocab_size=14, hidden=5, embedding_dim=3, replicas=3),
}


def assert_same_graph(a: Graph, b: Graph) -> None:
    assert a.name == b.name
    assert list(a.nodes) == list(b.nodes)
    for name, node in a.nodes.items():
        other = b.nodes[name]
        assert type(other.op) is type(node.op)
        assert other.op == node.op, name
        assert other.op.config() == node.op.config()
        assert other.op.input_ports() == node.op.input_ports()
        assert other.op.output_ports() == node.op.output_ports()
        assert other.op.param_shapes() == node.op.param_shapes()
        assert (other.min_update_frequency, other.optimizer, other.worker, other.meta) == (
            node.min_update_frequency, node.optimizer, node.worker, node.meta,
        )  # fmt: skip
    assert a.edges == b.edges
    assert a.replica_groups == b.replica_groups


# ----------------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("make", GRAPHS.values(), ids=GRAPHS.keys())
def test_dict_round_trip(make: Any) -> None:
    g = make()
    data = graph_to_dict(g)
    assert data["schema"] == SCHEMA and data["version"] == VERSION
    assert json.loads(json.dumps(data)) == data, "graph_to_dict must produce plain JSON data (no tuples)"
    back = graph_from_dict(data)
    assert_same_graph(g, back)
    assert graph_to_dict(back) == data
    back.validate(require_loss=True)


@pytest.mark.parametrize("make", GRAPHS.values(), ids=GRAPHS.keys())
def test_file_round_trip(make: Any, tmp_path: Path) -> None:
    g = make()
    path = tmp_path / "graph.json"
    save_graph(g, path)
    back = load_graph(path)
    assert_same_graph(g, back)
    save_graph(back, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == path.read_text()


def test_replica_groups_survive_the_round_trip() -> None:
    g = models.rnn(replicas=2)
    assert g.replica_groups == [["step0", "step1"]]
    back = graph_from_dict(json.loads(json.dumps(graph_to_dict(g))))
    assert back.replica_groups == [["step0", "step1"]]
    params = back.init_params(seed=3)
    np.testing.assert_array_equal(params["step0"]["W"], params["step1"]["W"])


# An instance of every op kind with non-default settings, for the config round trip.
EVERY_OP = [
    ops.Input(width=5, dtype="float", fill="zeros"),
    ops.Input(dtype="int"),
    ops.Identity(),
    ops.Linear(3, 4, bias=False),
    ops.Embedding(7, 2),
    ops.ReLU(),
    ops.Tanh(),
    ops.Sigmoid(),
    ops.Add(match_on=("t", "u")),
    ops.Mul(),
    ops.Cond("key % 3", branches=3),
    ops.Phi(4),
    ops.Isu({"t": "t + 1", "u": None}, {"t": "t - 1"}),
    ops.Concat(3, match_on=["t"]),
    ops.Split([1, 2, 3]),
    ops.Bcast(4),
    ops.Ungroup("step"),
    ops.Group("length - 1", counter="step"),
    ops.SoftmaxCrossEntropy(match_on=("key",)),
    ops.SegmentSoftmaxCrossEntropy(match_on=()),
    ops.MSE(),
    ops.Sub(match_on=["t"]),
    ops.Discard(),
    ops.Distribute("etype", 4),
    ops.Flatmap("node", keep_2d=False),
    ops.Collect("parent", "slot", "arity", "node"),
    ops.Gather(match_on=("t",)),
    ops.ScatterSum(),
    ops.ScatterMean(match_on=()),
    ops.TypedEdgeSum(3, match_on=("t",)),
    ops.SelectRows(),
    ops.SumRows(),
    ops.MeanRows(),
    ops.Partition("level", keep_2d=False),
    ops.TreeLSTMLeaf(3),
    ops.TreeLSTMBranch(4, match_on=("pos",)),
    ops.GRUUpdate(2, match_on=["t"]),
    ops.Sink(),
]


@pytest.mark.parametrize("op", EVERY_OP, ids=[f"{op.kind}{i}" for i, op in enumerate(EVERY_OP)])
def test_op_config_round_trip(op: ops.Op) -> None:
    config = json.loads(json.dumps(op.config()))
    assert config == op.config(), "config() must be plain JSON data"
    rebuilt = ops.OPS[op.kind](**config)
    assert rebuilt == op
    assert rebuilt.input_ports() == op.input_ports()
    assert rebuilt.output_ports() == op.output_ports()


def test_every_op_kind_has_a_config_round_trip() -> None:
    assert {op.kind for op in EVERY_OP} == set(ops.OPS)


# ------------------------------------------------------------------------------------- bad JSON
def _data() -> dict[str, Any]:
    return graph_to_dict(models.rnn(hidden=4, embedding_dim=3))


def _node_index(data: dict[str, Any], name: str) -> int:
    return next(i for i, n in enumerate(data["nodes"]) if n["name"] == name)


def test_wrong_schema() -> None:
    data = _data()
    data["schema"] = "something.else"
    with pytest.raises(GraphError, match=re.escape("expected schema 'amp_notebook.graph', found 'something.else'")):
        graph_from_dict(data)
    with pytest.raises(GraphError, match="expected schema"):
        graph_from_dict([1, 2])  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="found None"):
        graph_from_dict({"nodes": []})


@pytest.mark.parametrize("version", [2, 0, None, "1"])
def test_wrong_version(version: object) -> None:
    data = _data()
    data["version"] = version
    with pytest.raises(GraphError, match=f"expected schema version 1, found {version!r}"):
        graph_from_dict(data)


def test_unknown_kind_names_the_node_and_index() -> None:
    data = _data()
    i = _node_index(data, "embed")
    data["nodes"][i]["kind"] = "exec"
    with pytest.raises(GraphError) as info:
        graph_from_dict(data)
    message = str(info.value)
    assert f"nodes[{i}]" in message and "'embed'" in message and "unknown op kind 'exec'" in message
    assert "linear" in message  # lists the known kinds


@pytest.mark.parametrize(
    ("node", "config", "match"),
    [
        ("out", {"in_features": -4, "out_features": 10, "bias": True}, "in_features"),
        ("out", {"in_features": 4, "out_features": 10, "bias": True, "activation": "relu"}, "activation"),
        ("out", {"in_features": 4}, "out_features"),
        ("out", [4, 10], "mapping"),
        ("embed", {"num_embeddings": "14", "embedding_dim": 3}, "num_embeddings"),
        ("more", {"predicate": "t < length", "branches": 1}, "branches"),
        ("loop", {"n_inputs": 0}, "n_inputs"),
        ("tick", {"forward": {}, "backward": {}}, "at least one field"),
        ("tick", {"forward": {"__t": "1"}, "backward": {}}, "field names"),
        ("steps", {"counter": "key"}, "counter"),
        ("h0", {"width": None, "dtype": "float", "fill": "zeros"}, "needs a width"),
        ("h0", {"width": 4, "dtype": "complex", "fill": None}, "dtype"),
    ],
)
def test_bad_config_names_the_node_and_index(node: str, config: Any, match: str) -> None:
    data = _data()
    i = _node_index(data, node)
    data["nodes"][i]["config"] = config
    with pytest.raises(GraphError) as info:
        graph_from_dict(data)
    message = str(info.value)
    assert f"nodes[{i}]" in message and repr(node) in message and "bad config" in message
    assert match in message


def test_group_counter_is_checked_on_load() -> None:
    g = Graph("g")
    x = g.input("x", width=3)
    rows = g.ungroup(x, counter="t")
    g.mse(g.group(rows, "length", counter="t", name="collect"), g.input("y", width=3))
    data = graph_to_dict(g)
    i = _node_index(data, "collect")
    for counter in (5, "key", "not an identifier"):
        data["nodes"][i]["config"]["counter"] = counter
        with pytest.raises(GraphError, match=rf"nodes\[{i}\] \('collect', group\): bad config"):
            graph_from_dict(data)


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ("linear", "expected an object"),
        ({"kind": "relu"}, "expected an object with a string 'name'"),
        ({"name": 5, "kind": "relu"}, "expected an object with a string 'name'"),
        ({"name": "", "kind": "relu"}, "expected an object with a string 'name'"),
        ({"name": "r"}, "expected a string 'kind'"),
        ({"name": "r", "kind": ["relu"]}, "expected a string 'kind'"),
        ({"name": "r", "kind": "relu", "meta": [1]}, "an object 'meta'"),
        ({"name": "r", "kind": "relu", "code": "import os"}, r"unknown field\(s\) \['code'\]"),
    ],
)
def test_bad_node_entry(entry: Any, match: str) -> None:
    data = _data()
    data["nodes"].append(entry)
    i = len(data["nodes"]) - 1
    with pytest.raises(GraphError, match=match) as info:
        graph_from_dict(data)
    assert f"nodes[{i}]" in str(info.value)


def test_duplicate_node_name() -> None:
    data = _data()
    data["nodes"].append(copy.deepcopy(data["nodes"][_node_index(data, "embed")]))
    with pytest.raises(GraphError, match="node name 'embed' is already used"):
        graph_from_dict(data)


@pytest.mark.parametrize(
    "edge",
    [
        ["tokens", "out", "steps"],
        "tokens:out -> steps:in",
        ["tokens", "out", "steps", 0],
        None,
        {"src": "tokens"},
    ],
)
def test_malformed_edge_names_the_index(edge: Any) -> None:
    data = _data()
    data["edges"].insert(3, edge)
    with pytest.raises(GraphError, match=r"edges\[3\]: expected \[src, src_port, dst, dst_port\]"):
        graph_from_dict(data)


@pytest.mark.parametrize(
    ("edge", "match"),
    [
        (["tokens", "out", "ghost", "in"], "there is no node 'ghost'"),
        (["ghost", "out", "steps", "in"], "there is no node 'ghost'"),
        (["tokens", "bogus", "steps", "in"], "Input 'tokens' has no output 'bogus'"),
        (["tokens", "out", "steps", "bogus"], "Ungroup 'steps' has no input 'bogus'"),
    ],
)
def test_edge_to_unknown_node_or_port_names_it(edge: list[str], match: str) -> None:
    data = _data()
    data["edges"] = [e for e in data["edges"] if e[2] != "steps"] + [edge]
    with pytest.raises(GraphError, match=match):
        graph_from_dict(data)


def test_edge_feeding_an_input_twice() -> None:
    data = _data()
    data["edges"].append(list(data["edges"][0]))
    with pytest.raises(GraphError, match="already fed"):
        graph_from_dict(data)


def test_invalid_json_text(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"schema": "amp_notebook.graph", ')
    with pytest.raises(GraphError, match="not valid JSON"):
        load_graph(path)


# ------------------------------------------------------------------------------ unsafe expressions
def _sentinel_expression(path: Path) -> str:
    return f"__import__('pathlib').Path({str(path)!r}).touch()"


@pytest.mark.parametrize(
    ("node", "field", "template"),
    [
        ("more", "predicate", "{payload}"),
        ("more", "predicate", "t.__class__"),
        ("more", "predicate", "().__class__.__bases__[0].__subclasses__()"),
        ("more", "predicate", "open({path!r}, 'w')"),
        ("more", "predicate", "__builtins__"),
        ("more", "predicate", "(lambda: 1)()"),
        ("tick", "forward", "{payload}"),
        ("tick", "backward", "t.real"),
        ("tick", "forward", "[t for t in (1, 2)]"),
    ],
)
def test_expressions_in_loaded_graphs_are_checked_and_never_run(
    node: str, field: str, template: str, tmp_path: Path
) -> None:
    sentinel = tmp_path / "pwned"
    source = template.format(payload=_sentinel_expression(sentinel), path=str(sentinel))
    data = _data()
    i = _node_index(data, node)
    config = data["nodes"][i]["config"]
    if field == "predicate":
        config["predicate"] = source
    else:
        config[field] = {"t": source}
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(data))
    with pytest.raises(GraphError) as info:
        load_graph(path)
    message = str(info.value)
    assert f"nodes[{i}]" in message and repr(node) in message
    assert "not allowed" in message or "only calls of" in message
    assert not sentinel.exists(), "loading a graph ran code from an expression"


def test_group_count_expression_is_checked_on_load(tmp_path: Path) -> None:
    sentinel = tmp_path / "pwned"
    g = Graph("g")
    rows = g.ungroup(g.input("x", width=3), counter="t")
    g.mse(g.group(rows, "length", name="collect"), g.input("y", width=3))
    data = graph_to_dict(g)
    data["nodes"][_node_index(data, "collect")]["config"]["count"] = _sentinel_expression(sentinel)
    with pytest.raises(GraphError, match="'collect', group"):
        graph_from_dict(data)
    assert not sentinel.exists()


# ---------------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_params_round_trip(dtype: Any, tmp_path: Path) -> None:
    g = models.rnn(vocab_size=14, hidden=5, embedding_dim=3, replicas=2)
    params = g.init_params(seed=7, dtype=dtype)
    path = tmp_path / "params.npz"
    save_params(params, path)
    back = load_params(path, graph=g)
    assert set(back) == set(params)
    for node, group in params.items():
        assert set(back[node]) == set(group)
        for name, value in group.items():
            assert back[node][name].dtype == value.dtype
            np.testing.assert_array_equal(back[node][name], value)


def test_params_with_slash_in_node_name(tmp_path: Path) -> None:
    params = {"block/fc": {"W": np.ones((2, 3))}}
    save_params(params, tmp_path / "p.npz")
    back = load_params(tmp_path / "p.npz")
    assert list(back) == ["block/fc"] and list(back["block/fc"]) == ["W"]


def test_load_params_checks_shapes_against_the_graph(tmp_path: Path) -> None:
    path = tmp_path / "params.npz"
    save_params(models.mlp(hidden=8).init_params(), path)
    load_params(path, graph=models.mlp(hidden=8))
    with pytest.raises(GraphError) as info:
        load_params(path, graph=models.mlp(hidden=16))
    message = str(info.value)
    assert "Linear 'linear1'" in message and "(64, 16)" in message and "(64, 8)" in message


def test_load_params_reports_missing_parameters(tmp_path: Path) -> None:
    params = models.mlp(hidden=8).init_params()
    del params["linear3"]
    params["linear2"].pop("b")
    path = tmp_path / "params.npz"
    save_params(params, path)
    with pytest.raises(GraphError, match=r"Linear 'linear2'.*found \{'W': \(8, 8\)\}"):
        load_params(path, graph=models.mlp(hidden=8))


def test_load_params_refuses_unnamed_entries(tmp_path: Path) -> None:
    path = tmp_path / "params.npz"
    np.savez(path, W=np.ones(3))
    with pytest.raises(GraphError, match="entry 'W' is not named 'node/param'"):
        load_params(path)


class _Payload:
    """Unpickling this would create a file: the proof that a pickle was run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


def test_load_params_refuses_pickled_object_arrays(tmp_path: Path) -> None:
    sentinel = tmp_path / "pwned"
    path = tmp_path / "params.npz"
    evil = np.empty(1, dtype=object)
    evil[0] = _Payload(sentinel)
    np.savez(path, **{"linear1/W": evil})  # numpy pickles object arrays when writing
    assert not sentinel.exists()
    with pytest.raises(ValueError, match="allow_pickle"):
        load_params(path)
    with pytest.raises(ValueError, match="allow_pickle"):
        load_params(path, graph=models.mlp())
    assert not sentinel.exists(), "loading parameters unpickled an object"
