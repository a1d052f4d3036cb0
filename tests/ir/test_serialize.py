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
    GraphFileError,
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
    ops.Ungroup("t", chunk="bucket"),
    ops.Ungroup("c", chunk=1),
    ops.Partition("w", keep_2d=False, size_field="ids"),
    ops.Collect("0", "w", "length", None, axis=0, drop=["w", "ids"]),
    ops.LSTMStart(3),
    ops.LSTMUpdate(2, match_on=["t"]),
    ops.LayerNorm(6, eps=1e-3),
    ops.Dropout(0.25, seed=7),
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
    assert f"nodes[{i}] ('embed', exec) kind" in message and "found the string 'exec'" in message
    assert "linear" in message  # lists the known kinds


@pytest.mark.parametrize(
    ("node", "config", "match"),
    [
        ("out", {"in_features": -4, "out_features": 10}, "config.in_features: expected an integer from 1"),
        ("out", {"in_features": 4, "out_features": 10, "activation": "relu"}, "unknown field(s) 'activation'"),
        ("out", {"in_features": 4}, "missing required field(s) 'out_features'"),
        ("out", [4, 10], "config: expected an object {...}, found a list of 2 items"),
        ("embed", {"num_embeddings": "14", "embedding_dim": 3}, "found the string '14'; write the number without"),
        ("more", {"predicate": "t < length", "branches": 1}, "config.branches: expected an integer from 2 to 1024"),
        ("loop", {"n_inputs": 0}, "config.n_inputs: expected an integer from 1 to 1024, found 0"),
        ("tick", {"forward": {}, "backward": {}}, "bad config"),  # the op's own check: no update at all
        ("tick", {"forward": {"__t": "1"}, "backward": {}}, "expected field names (letters"),
        ("steps", {"counter": "key"}, 'not "key"'),
        ("h0", {"width": None, "dtype": "float", "fill": "zeros"}, "needs a width"),
        ("h0", {"width": 4, "dtype": "complex", "fill": None}, 'config.dtype: expected one of "float", "int"'),
    ],
)  # fmt: skip
def test_bad_config_names_the_node_and_index(node: str, config: Any, match: str) -> None:
    data = _data()
    i = _node_index(data, node)
    data["nodes"][i]["config"] = config
    with pytest.raises(GraphError) as info:
        graph_from_dict(data)
    message = str(info.value)
    assert f"nodes[{i}] ({node!r}, {data['nodes'][i]['kind']})" in message
    assert match in message
    assert "problems" not in message, "one bad node must not drag its edges into the report"


def test_group_counter_is_checked_on_load() -> None:
    g = Graph("g")
    x = g.input("x", width=3)
    rows = g.ungroup(x, counter="t")
    g.mse(g.group(rows, "length", counter="t", name="collect"), g.input("y", width=3))
    data = graph_to_dict(g)
    i = _node_index(data, "collect")
    for counter in (5, "key", "not an identifier"):
        data["nodes"][i]["config"]["counter"] = counter
        with pytest.raises(GraphError, match=rf"nodes\[{i}\] \('collect', group\)( config.counter|: bad config)"):
            graph_from_dict(data)


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ("linear", r"\]: expected an object \{...\}, found the string 'linear'"),
        ({"kind": "relu"}, r"\]: missing required field\(s\) 'name'"),
        ({"name": 5, "kind": "relu"}, r"\].name: expected a string \(1 to 256 characters\), found 5"),
        ({"name": "", "kind": "relu"}, r"\] \('', relu\) name: expected a string \(1 to 256 characters\)"),
        ({"name": "r"}, r"\] \('r'\): missing required field\(s\) 'kind'"),
        ({"name": "r", "kind": ["relu"]}, r"\] \('r'\) kind: expected one of the \d+ names add, .*, found a list"),
        ({"name": "r", "kind": "relu", "meta": [1]}, r"meta: expected an object \{...\} or null, found a list"),
        ({"name": "r", "kind": "relu", "code": "import os"}, r"\('r', relu\): unknown field\(s\) 'code'; remove"),
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
    with pytest.raises(GraphError, match=r"edges\[3\](\[3\])?: expected") as info:
        graph_from_dict(data)
    described = r"\[source node, output port, destination node, input port\]|destination input port"
    assert re.search(described, str(info.value))


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


# ------------------------------------------------------------------------------------- untrusted files
@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_a_malicious_pickle_is_refused_and_nothing_runs(protocol: int, tmp_path: Path) -> None:
    import pickle

    sentinel = tmp_path / "pwned"
    path = tmp_path / "graph.json"
    path.write_bytes(pickle.dumps(_Payload(sentinel), protocol=protocol))
    for load in (load_graph, load_params):
        with pytest.raises(GraphFileError) as info:
            load(path)
        assert "pickle" in str(info.value) or "not valid JSON" in str(info.value) or ".npz" in str(info.value)
    assert not sentinel.exists(), "a pickle was unpickled"


@pytest.mark.parametrize(
    ("template", "node", "field"),
    [
        ("__import__('os').system('touch {path}')", "more", "predicate"),
        ("t.__class__.__init__.__globals__['__builtins__']['open']('{path}', 'w')", "more", "predicate"),
        ("().__class__.__base__.__subclasses__()[0]('{path}')", "tick", "forward"),
        ("[open('{path}', 'w') for t in (1,)]", "tick", "backward"),
        ("exec(\"open('{path}', 'w')\")", "steps", "counter"),
        ("t if open('{path}', 'w') else t", "more", "predicate"),
    ],
)
def test_a_graph_that_smuggles_code_is_refused_and_nothing_runs(
    template: str, node: str, field: str, tmp_path: Path
) -> None:
    sentinel = tmp_path / "pwned"
    data = _data()
    config = data["nodes"][_node_index(data, node)]["config"]
    payload = template.format(path=sentinel)
    config[field] = {"t": payload} if field in ("forward", "backward") else payload
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(data))
    with pytest.raises(GraphFileError) as info:
        load_graph(path)
    assert repr(node) in str(info.value)
    assert not sentinel.exists(), "loading a graph ran code"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (b"", "found an empty file"),
        (b"\x00\x01\x02\xff\xfe", "expected UTF-8 JSON text, found a byte"),
        (b"PK\x03\x04rest", "zip archive"),
        (b"\x93NUMPY\x01\x00", "numpy .npy array"),
        (b'{"schema": "amp_notebook.graph", "version": NaN}', "NaN and Infinity are not JSON numbers"),
        (b'{"schema": "amp_notebook.graph", "version": 1e400}', "expected a number that fits a 64-bit float"),
        (b'{"a": ' + b"9" * 5000 + b"}", "not valid JSON for a graph"),
        (b"[" * 100_000 + b"]" * 100_000, "nested at most 64 levels deep"),
        (b'{"a": ' + b"[" * 70 + b"]" * 70 + b"}", "nested at most 64 levels deep, found more than 64 levels"),
        (b'{"schema": "amp_notebook.graph", ', "not valid JSON: line 1 column 34: Expecting property name"),
        (b"\xef\xbb\xbf[]", "expected schema 'amp_notebook.graph', found 'list'"),  # a UTF-8 BOM is fine
    ],
)
def test_files_that_are_not_graph_json_are_refused_with_what_was_found(text: bytes, match: str, tmp_path: Path) -> None:
    path = tmp_path / "graph.json"
    path.write_bytes(text)
    with pytest.raises(GraphFileError, match=re.escape(match)):
        load_graph(path)


def test_huge_numbers_are_refused_before_anything_is_built() -> None:
    data = _data()
    i = _node_index(data, "out")
    data["nodes"][i]["config"]["in_features"] = 10**30
    data["nodes"][_node_index(data, "loop")]["config"]["n_inputs"] = 10**9  # would make a billion ports
    with pytest.raises(GraphFileError) as info:
        graph_from_dict(data)
    assert len(info.value.problems) == 2
    assert "config.in_features: expected an integer from 1 to 16777216" in info.value.problems[1]
    assert "config.n_inputs: expected an integer from 1 to 1024, found 1000000000" in info.value.problems[0]


def test_load_params_refuses_files_that_are_not_npz(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.ones(3))
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(GraphFileError, match=r"numpy \.npy array"):
        load_params(tmp_path / "a.npy")
    with pytest.raises(GraphFileError, match=r"not a readable \.npz archive"):
        load_params(tmp_path / "broken.npz")
    with pytest.raises(FileNotFoundError):
        load_params(tmp_path / "missing.npz")
