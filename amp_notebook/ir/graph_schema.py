"""Writes the published graph JSON Schema (``ir/graph.schema.json``) from the op declarations.

The file is generated, never edited by hand: the document's envelope (``schema``, ``version``, nodes,
edges, replica groups) is written below, the shared definitions (``size``, ``expression``, ``match_on``, ...)
come from the field types in :mod:`amp_notebook.ir.ops.facts`, and each op kind's ``config_<kind>`` from its
class's ``fields``: one property per field (its type's schema and the field's one-line doc), no others, and
the fields without a default required. The node's ``allOf`` dispatches ``config`` to its kind's entry.

    python -m amp_notebook.ir.graph_schema --write     # after declaring or changing an op's fields
    python -m amp_notebook.ir.graph_schema --check     # exit status 1 when the committed file is stale

``tests/ir/test_schema.py`` fails when the committed file differs from what this writes, so the published
schema always describes the code. Loading a graph reads the committed file (:mod:`amp_notebook.ir.schema`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from amp_notebook.ir import ops as O
from amp_notebook.ir.ops.field_types import FIELD_NAME, MAX_NAME, SHARED_TYPES
from amp_notebook.ir.schema import SCHEMA_FILE
from amp_notebook.ir.serialize import SCHEMA as SCHEMA_NAME
from amp_notebook.ir.serialize import VERSION
from amp_notebook.optim import OPTIMIZERS

SCHEMA_PATH = Path(__file__).with_name(SCHEMA_FILE)
MAX_NODE_NAME = 256  # characters of a node or graph name
MAX_PORT_NAME = 64
MAX_NODES = 100_000
MAX_EDGES = 1_000_000
MAX_REPLICAS = 1024  # nodes in one replica group
MAX_MIN_UPDATE_FREQUENCY = 10**9
MAX_WORKER = 65535
MAX_OPTIMIZER_SETTINGS = 16


def _ref(name: str, description: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"$ref": f"#/$defs/{name}"}
    if description is not None:
        out["description"] = description
    return out


def config_schema(cls: type[O.Op]) -> dict[str, Any]:
    """The ``config_<kind>`` entry of an op class: its fields, nothing else, the ones without defaults required."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {f.name: f.schema() for f in cls.fields},
        "additionalProperties": False,
    }
    required = [f.name for f in cls.fields if f.required]
    if required:
        schema["required"] = required
    return schema


def _node(kinds: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["name", "kind"],
        "additionalProperties": False,
        "properties": {
            "name": _ref("node_name", "the node's name, unique in the graph"),
            "kind": {"enum": kinds, "description": "the op kind"},
            "config": {"type": "object", "description": "the op's settings (which ones depends on the kind)"},
            "min_update_frequency": {
                "type": ["integer", "null"], "minimum": 1, "maximum": MAX_MIN_UPDATE_FREQUENCY,
                "description": "gradients the node holds before it updates (null: the run's default)",
            },
            "optimizer": {
                "anyOf": [{"type": "null"}, _ref("optimizer")],
                "description": "this node's optimizer, such as {\"name\": \"adam\", \"lr\": 0.001} (null: the run's)",
            },
            "worker": {
                "type": ["integer", "null"], "minimum": 0, "maximum": MAX_WORKER,
                "description": "the worker the node is pinned to (null: placement chooses)",
            },
            "meta": {
                "type": ["object", "null"], "description": "free-form notes (the builder's cell tags); never code",
            },
        },
        "allOf": [
            {"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
             "then": {"properties": {"config": _ref(f"config_{kind}")}}}
            for kind in kinds
        ],
    }  # fmt: skip


def _definitions(kinds: list[str]) -> dict[str, Any]:
    defs: dict[str, Any] = {
        "node": _node(kinds),
        "edge": {
            "type": "array",
            "prefixItems": [
                _ref("node_name", "source node"), _ref("port_name", "source output port"),
                _ref("node_name", "destination node"), _ref("port_name", "destination input port"),
            ],
            "items": False,
            "minItems": 4,
            "description": (
                "[source node, output port, destination node, input port], such as [\"x\", \"out\", \"fc\", \"in\"]"
            ),
        },
        "node_name": {"type": "string", "minLength": 1, "maxLength": MAX_NODE_NAME},
        "port_name": {"type": "string", "minLength": 1, "maxLength": MAX_PORT_NAME},
    }  # fmt: skip
    for field_type in SHARED_TYPES:
        assert field_type.ref is not None
        defs[field_type.ref] = field_type.definition()
    defs["optimizer"] = {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"enum": list(OPTIMIZERS), "description": "the optimizer"}},
        "propertyNames": {"pattern": FIELD_NAME, "maxLength": MAX_NAME},
        "additionalProperties": {"type": ["number", "null"]},
        "maxProperties": MAX_OPTIMIZER_SETTINGS,
    }
    for kind in kinds:
        defs[f"config_{kind}"] = config_schema(O.OPS[kind])
    return defs


def build_graph_schema() -> dict[str, Any]:
    """The graph JSON Schema (draft 2020-12) for the op kinds of ``OPS``, as a dict."""
    kinds = sorted(O.OPS)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:amp-notebook:graph:{VERSION}",
        "title": f"amp_notebook IR graph, schema version {VERSION}",
        "description": (
            "A static IR graph as amp_notebook.save_graph writes it: nodes (an op kind with its config and the "
            "runtime attributes), edges from an output port to an input port, and replica groups. Expressions are "
            "strings in amp_notebook's safe expression language, checked again on load; nothing in a graph is code."
        ),
        "type": "object",
        "required": ["schema", "version", "nodes", "edges"],
        "additionalProperties": False,
        "properties": {
            "schema": {"const": SCHEMA_NAME, "description": f"always {SCHEMA_NAME!r}"},
            "version": {"const": VERSION, "description": "the schema version this file follows"},
            "name": {"type": "string", "maxLength": MAX_NODE_NAME, "description": "the graph's name"},
            "nodes": {
                "type": "array", "items": _ref("node"), "maxItems": MAX_NODES, "description": "the nodes, in order",
            },
            "edges": {
                "type": "array", "items": _ref("edge"), "maxItems": MAX_EDGES,
                "description": "edges as [src, src_port, dst, dst_port]",
            },
            "replica_groups": {
                "type": "array",
                "items": {
                    "type": "array", "items": _ref("node_name", "a parameterized node"), "uniqueItems": True,
                    "maxItems": MAX_REPLICAS,
                },
                "maxItems": MAX_NODES,
                "description": "lists of replica node names whose parameters are tied",
            },
        },
        "$defs": _definitions(kinds),
    }  # fmt: skip


def schema_text() -> str:
    """The file's text: the schema as JSON, indented one space, with a final newline."""
    return json.dumps(build_graph_schema(), indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amp_notebook.ir.graph_schema", description=__doc__.split("\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help=f"write {SCHEMA_PATH.name} from the op declarations")
    action.add_argument("--check", action="store_true", help=f"exit 1 when {SCHEMA_PATH.name} is out of date")
    args = parser.parse_args(argv)
    text = schema_text()
    if args.write:
        SCHEMA_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {SCHEMA_PATH}")
        return 0
    if SCHEMA_PATH.read_text(encoding="utf-8") != text:
        print(f"{SCHEMA_PATH} is out of date: run python -m amp_notebook.ir.graph_schema --write", file=sys.stderr)
        return 1
    print(f"{SCHEMA_PATH} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
