"""The published graph JSON Schema: valid itself, in step with the code, and the source of clear messages."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import jsonschema
import pytest

from amp_notebook.ir import expr, ops
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.schema import graph_schema, graph_schema_problems
from amp_notebook.ir.serialize import VERSION, GraphFileError, graph_from_dict, graph_to_dict
from amp_notebook.testing.mutations import code_payloads, mutate_document, zoo_graphs
from tests.ir.test_serialize import EVERY_OP, _data, _node_index


def full_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(graph_schema())


def test_the_schema_is_a_valid_draft_2020_12_schema_of_this_version() -> None:
    schema = graph_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["version"]["const"] == VERSION
    assert schema["$id"].endswith(f":{VERSION}") and f"version {VERSION}" in schema["title"]


def test_the_schema_ships_in_the_package() -> None:
    from importlib import resources

    assert resources.files("amp_notebook.ir").joinpath("graph.schema.json").is_file()


def test_every_op_kind_has_a_config_schema_and_a_dispatch_entry_and_nothing_else() -> None:
    """The node's ``allOf`` is exactly 'if kind == K then config: config_K' for every op kind: what the fast
    split validator (document, then each node's config by its kind) relies on to accept the same documents."""
    defs = graph_schema()["$defs"]
    node = defs["node"]
    assert set(node["properties"]["kind"]["enum"]) == set(ops.OPS)
    assert {k.removeprefix("config_") for k in defs if k.startswith("config_")} == set(ops.OPS)
    expected = [
        {"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
         "then": {"properties": {"config": {"$ref": f"#/$defs/config_{kind}"}}}}
        for kind in sorted(ops.OPS)
    ]  # fmt: skip
    assert node["allOf"] == expected


def test_the_committed_schema_is_the_one_the_op_declarations_generate() -> None:
    """graph.schema.json is generated (python -m amp_notebook.ir.graph_schema --write), never edited by hand."""
    from amp_notebook.ir.graph_schema import SCHEMA_PATH, main, schema_text

    assert SCHEMA_PATH.read_text(encoding="utf-8") == schema_text(), (
        "ir/graph.schema.json is out of date with the op declarations: run python -m amp_notebook.ir.graph_schema "
        "--write and commit the file"
    )
    assert main(["--check"]) == 0


@pytest.mark.parametrize("kind", sorted(ops.OPS))
def test_config_schema_names_every_constructor_parameter(kind: str) -> None:
    import inspect

    params = list(inspect.signature(ops.OPS[kind]).parameters)
    assert params == [f.name for f in ops.OPS[kind].fields]
    schema = graph_schema()["$defs"][f"config_{kind}"]
    assert list(schema["properties"]) == params
    assert schema.get("required", []) == [f.name for f in ops.OPS[kind].fields if f.required]
    assert schema["additionalProperties"] is False


def test_every_op_config_and_every_zoo_graph_fit_the_schema() -> None:
    validator = full_validator()
    for op in EVERY_OP:
        node_schema = {"$ref": f"#/$defs/config_{op.kind}", "$defs": graph_schema()["$defs"]}
        errors = list(jsonschema.Draft202012Validator(node_schema).iter_errors(op.config()))
        assert not errors, f"{op!r}: {[e.message for e in errors]}"
    for doc in zoo_graphs():
        assert not list(validator.iter_errors(doc))
        assert graph_schema_problems(doc) == []


def test_expression_limits_agree_with_the_expression_language() -> None:
    assert graph_schema()["$defs"]["expression"]["maxLength"] == expr.MAX_LENGTH


def split_agrees_with_whole(cases: int, seed: int, tmp_path: Any) -> int:
    """On ``cases`` mutated documents, the fast path finds problems exactly when the published schema (checked
    by jsonschema as any other tool would) does; returns how many documents were invalid."""
    rng = random.Random(seed)
    seeds, payloads, validator = zoo_graphs(), code_payloads(tmp_path / "sentinel"), full_validator()
    disagreements, invalid = [], 0
    for case in range(cases):
        doc = copy.deepcopy(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            doc = mutate_document(doc, rng, payloads)
        whole = validator.is_valid(doc)
        invalid += not whole
        if whole != (graph_schema_problems(doc) == []):
            disagreements.append(case)
    assert not disagreements
    return invalid


def test_split_validation_agrees_with_the_whole_schema(tmp_path: Any) -> None:
    invalid = split_agrees_with_whole(40, seed=5, tmp_path=tmp_path)
    assert 5 < invalid < 40  # both kinds of document were tried


@pytest.mark.slow
def test_split_validation_agrees_with_the_whole_schema_on_many_documents(tmp_path: Any) -> None:
    invalid = split_agrees_with_whole(300, seed=6, tmp_path=tmp_path)
    assert 50 < invalid < 300


# ----------------------------------------------------------------------------------------- messages
def test_every_problem_is_listed_in_document_order_with_path_expected_found_and_fix() -> None:
    data = _data()
    embed, out = _node_index(data, "embed"), _node_index(data, "out")
    data["nodes"][embed]["config"]["num_embeddings"] = "14"
    data["nodes"][out]["config"]["activation"] = "relu"
    data["nodes"][out]["kind"] = "linear"
    data["edges"][0] = ["tokens", "out", "steps"]
    data["junk"] = 1
    with pytest.raises(GraphFileError) as info:
        graph_from_dict(data)
    problems = info.value.problems
    assert len(problems) == 4, problems
    assert problems[0].startswith("top level: unknown field(s) 'junk'; remove them (allowed: schema, version")
    assert problems[1] == (
        "edges[0]: expected at least 4 items, found 3 ([source node, output port, destination node, input port], "
        'such as ["x", "out", "fc", "in"])'
    )
    assert problems[2] == (
        f"nodes[{embed}] ('embed', embedding) config.num_embeddings: expected an integer from 1 to 16777216, found "
        "the string '14'; write the number without quotes (num_embeddings: rows of the table: the vocabulary size)"
    )
    assert problems[3] == (
        f"nodes[{out}] ('out', linear) config: unknown field(s) 'activation'; remove them (allowed: in_features, "
        "out_features, bias)"
    )
    assert str(info.value).startswith("graph JSON has 4 problems:\n  - top level")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d, i: d["nodes"][i].__setitem__("kind", "linaer"), "found the string 'linaer'; did you mean 'linear'?"),
        (lambda d, i: d["nodes"][i].__setitem__("optimizer", {"name": "adamw"}),
         "optimizer.name: expected one of \"sgd\", \"momentum\", \"adam\", found the string 'adamw'; did you mean"),
        (lambda d, i: d["nodes"][i].__setitem__("worker", 10**40), "worker: expected an integer from 0 to 65535"),
        (lambda d, i: d["nodes"][i].__setitem__("meta", [1]), "meta: expected an object {...} or null, found a list"),
        (lambda d, i: d["nodes"][i]["config"].__setitem__("in_features", 2**40), "found 1099511627776 (in_features:"),
        (lambda d, i: d["nodes"][i]["config"].__setitem__("in_features", 10**400), "found a number of 401 digits"),
        (lambda d, i: d["nodes"][i].pop("kind"), "missing required field(s) 'kind'; add them (kind: the op kind)"),
    ],
)  # fmt: skip
def test_messages_name_the_fix(change: Any, message: str) -> None:
    data = _data()
    i = _node_index(data, "out")
    change(data, i)
    with pytest.raises(GraphFileError) as info:
        graph_from_dict(data)
    assert message in str(info.value)
    assert f"nodes[{i}] ('out'" in str(info.value)


def test_a_document_that_is_not_a_graph_gets_one_message_not_a_list() -> None:
    for doc, found in [({"traceEvents": []}, "found None"), ([1, 2], "found 'list'"), ("x", "found 'str'")]:
        with pytest.raises(GraphFileError) as info:
            graph_from_dict(doc)
        assert len(info.value.problems) == 1 and found in info.value.problems[0]
        assert "is this an amp_notebook graph" in info.value.problems[0]


def test_a_graph_built_in_python_always_fits_its_schema() -> None:
    g = Graph("every op")
    x = g.input("x", width=4)
    a, b = g.bcast(x)
    g.mse(g.add(g.relu(a), g.tanh(b)), g.input("y", width=4))
    assert graph_schema_problems(json.loads(json.dumps(graph_to_dict(g)))) == []
