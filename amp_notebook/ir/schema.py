"""The published JSON Schema of graph files, and messages that teach when a file breaks it.

``graph.schema.json`` (next to this module, shipped in the package; generated from the op declarations by
:mod:`amp_notebook.ir.graph_schema`, never edited by hand) describes the JSON that
:func:`~amp_notebook.ir.serialize.save_graph` writes, schema version ``serialize.VERSION``: the top-level
fields, every node field, and for each op kind the fields of its ``config`` with their types and ranges
(widths up to 2**24, port counts up to 1024, expressions up to 1000 characters, state field names of
letters, digits and ``_``). Other tools can check graph files with any JSON Schema validator (draft
2020-12); amp_notebook checks every file with the ``jsonschema`` library before it interprets anything in
it, so a file that is not a graph is refused whole, with every problem listed, before any op is built.

A ``jsonschema`` error knows the failing keyword, the JSON path and the value found; :func:`describe`
turns it into one line that names the path (with the node's name and kind when the path goes through a
node), what the schema expected, what was found and how to fix it, using the schema's ``description``
texts. The same formatting serves the builder's intents and the dashboard's controls
(:mod:`amp_notebook.ui.messages`), which are checked against schemas of their own.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError as SchemaViolation

SCHEMA_FILE = "graph.schema.json"
_TYPE_NAMES = {
    "integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false",
    "null": "null", "object": "an object {...}", "array": "a list [...]",
}  # fmt: skip
_MAX_SHOWN = 60  # characters of a found value quoted in a message


@cache
def graph_schema() -> dict[str, Any]:
    """The graph JSON Schema as a dict (read once from the package's data file)."""
    text = resources.files("amp_notebook.ir").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def validator_for(schema: Mapping[str, Any]) -> jsonschema.Draft202012Validator:
    """A validator for a draft 2020-12 ``schema`` (the schema itself is checked first)."""
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@cache
def _graph_validators() -> tuple[jsonschema.Draft202012Validator, dict[str, jsonschema.Draft202012Validator]]:
    """The graph schema split in two for speed: the document without the per-kind dispatch of ``config``
    (the node definition's ``allOf`` of ``if kind == K then config: config_K``), and one validator per kind
    for ``config_K``. Together they accept exactly what the whole schema accepts (tests/ir/test_schema.py
    checks that the ``allOf`` is that dispatch and nothing more) in a third of the time: each node meets
    one config schema instead of one ``if`` clause per op kind."""
    schema = graph_schema()
    validator_for(schema)  # the published schema itself must be a valid draft 2020-12 schema
    defs = schema["$defs"]
    node = {k: v for k, v in defs["node"].items() if k != "allOf"}
    structure = jsonschema.Draft202012Validator({**schema, "$defs": {**defs, "node": node}})
    configs = {
        kind: jsonschema.Draft202012Validator({"$ref": f"#/$defs/config_{kind}", "$defs": defs})
        for kind in node["properties"]["kind"]["enum"]
    }
    return structure, configs


def graph_schema_problems(data: Any) -> list[str]:
    """Every way ``data`` (parsed graph JSON) breaks the graph schema, one message each; empty when none."""
    structure, configs = _graph_validators()
    nodes = data.get("nodes") if isinstance(data, dict) else None
    found = _located(structure, data, nodes, ())
    for i, node in enumerate(nodes if isinstance(nodes, list) else []):
        if not isinstance(node, dict) or not isinstance(node.get("config"), dict):
            continue
        if isinstance(node.get("kind"), str) and node["kind"] in configs:
            found += _located(configs[node["kind"]], node["config"], nodes, ("nodes", i, "config"))
    return _unique(found)


def problems(validator: jsonschema.Draft202012Validator, data: Any) -> list[str]:
    """Messages for every error ``validator`` finds in ``data``, in document order, without repeats."""
    return _unique(_located(validator, data, None, ()))


def _located(
    validator: jsonschema.Draft202012Validator, data: Any, nodes: Any, base: tuple[str | int, ...]
) -> list[tuple[list[tuple[int, Any]], tuple[Any, ...], str]]:
    """(sort key, identity, message) of every error, ``base`` being the path of ``data`` in the document."""
    out = []
    for error in validator.iter_errors(data):
        path = (*base, *error.absolute_path)
        what = (path, error.validator, repr(error.validator_value))
        out.append(([_order(p) for p in path], what, describe(error, validator.schema, nodes, base)))
    return out


def _unique(found: list[tuple[list[tuple[int, Any]], tuple[Any, ...], str]]) -> list[str]:
    """Messages in document order, each once; a rule broken at one place but reached through two schemas
    (``config`` is an object by the node's schema and by its kind's) is said once."""
    said: set[tuple[Any, ...]] = set()
    messages: dict[str, None] = {}
    for _, what, message in sorted(found, key=lambda entry: entry[0]):
        if what not in said:
            said.add(what)
            messages.setdefault(message, None)
    return list(messages)


def _order(part: str | int) -> tuple[int, Any]:
    return (0, part) if isinstance(part, int) else (1, part)


def describe(error: SchemaViolation, root: Mapping[str, Any], nodes: Any = None, base: Sequence[Any] = ()) -> str:
    """One line: where (JSON path, node), expected, found, and a fix. ``base``: where the validated value
    sits in the document (``("nodes", 3, "config")``), ``nodes`` the graph's node list to name nodes by."""
    error = _most_specific(error)
    path = [*base, *error.absolute_path]
    where = json_path(path, nodes)
    key = path[-1] if path and isinstance(path[-1], str) else None
    hint = _description(error, root)
    about = f" ({key}: {hint})" if hint and key else (f" ({hint})" if hint else "")
    schema, found, value = error.schema, error.instance, error.validator_value
    kind = error.validator
    if kind == "required":
        missing = [k for k in value if isinstance(found, dict) and k not in found]
        fields = schema.get("properties", {})
        what = "; ".join(f"{k}: {fields[k]['description']}" for k in missing if "description" in fields.get(k, {}))
        return f"{where}: missing required field(s) {', '.join(map(repr, missing))}; add them" + (
            f" ({what})" if what else ""
        )
    if kind == "additionalProperties" and isinstance(found, dict):
        allowed = list(schema.get("properties", {}))
        extra = [k for k in found if k not in allowed]
        close = [m for k in extra for m in difflib.get_close_matches(str(k), allowed, n=1)]
        suggestion = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        listed = f" (allowed: {', '.join(allowed)})" if allowed else " (this kind has no settings)"
        return f"{where}: unknown field(s) {', '.join(map(repr, extra))}; remove them{listed}{suggestion}"
    if kind in ("minItems", "maxItems", "minProperties", "maxProperties"):
        bound = "at least" if kind.startswith("min") else "at most"
        unit = ("item" if kind.endswith("Items") else "field") + ("" if value == 1 else "s")
        return f"{where}: expected {bound} {value} {unit}, found {len(found)}{about}"
    if kind == "items" and value is False:
        n = len(schema.get("prefixItems", []))
        return f"{where}: expected exactly {n} items, found {len(found)}{about}"
    if kind == "uniqueItems":
        repeated = sorted({json.dumps(x) for x in found if found.count(x) > 1})
        return f"{where}: expected no repeats, found {', '.join(repeated)} more than once; remove the copies{about}"
    expected = expectation(schema)
    fix = _fix(kind, schema, found)
    if hint and hint in expected:
        about = ""
    if "propertyNames" in error.schema_path:  # the value is one of the object's field names
        return f"{where}: expected field names {expected.removeprefix('a name ')}, found {found!r}{fix}{about}"
    return f"{where}: expected {expected}, found {_show(found)}{fix}{about}"


def json_path(path: Sequence[str | int], nodes: Any = None) -> str:
    """``nodes[3] ('embed', embedding) config.num_embeddings``: a JSON path, with the node named."""
    text = ""
    for i, part in enumerate(path):
        if isinstance(part, int):
            text += f"[{part}]"
            if i == 1 and path[0] == "nodes" and isinstance(nodes, list) and 0 <= part < len(nodes):
                node = nodes[part]
                if isinstance(node, dict) and isinstance(node.get("name"), str):
                    kind = node.get("kind")
                    text += f" ({_clip(node['name'])!r}{', ' + _clip(kind) if isinstance(kind, str) else ''})"
        else:
            text += f"{'.' if text and not text.endswith(')') else ' ' if text else ''}{part}"
    return text or "top level"


def expectation(schema: Mapping[str, Any]) -> str:
    """What a schema accepts, in words: ``an integer from 1 to 1024``, ``one of "float", "int"``."""
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        values = schema["enum"]
        if len(values) > 8 and all(isinstance(v, str) for v in values):
            return f"one of the {len(values)} names {', '.join(values)}"
        return f"one of {', '.join(json.dumps(v) for v in values)}"
    if "anyOf" in schema and "description" in schema:
        return str(schema["description"])
    if "anyOf" in schema:
        return " or ".join(expectation(s) for s in schema["anyOf"])
    types = schema.get("type")
    names = [types] if isinstance(types, str) else list(types or [])
    text = " or ".join(_TYPE_NAMES.get(t, t) for t in names if t != "null") or (
        "a name" if "pattern" in schema else "a value"
    )
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        text += f" from {low} to {high}"
    elif low is not None:
        text += f" >= {low}"
    elif high is not None:
        text += f" <= {high}"
    details = []
    if "pattern" in schema:
        details.append("letters, digits and '_', starting with a letter")
    if "not" in schema and "const" in schema["not"]:
        details.append(f"not {json.dumps(schema['not']['const'])}")
    low_len, high_len = schema.get("minLength"), schema.get("maxLength")
    if high_len is not None:
        details.append(f"{low_len} to {high_len} characters" if low_len else f"at most {high_len} characters")
    if details:
        text += f" ({'; '.join(details)})"
    if "null" in names:
        text += " or null"
    return text


def _fix(kind: str, schema: Mapping[str, Any], found: Any) -> str:
    if kind == "enum" and isinstance(found, str):
        close = difflib.get_close_matches(found, [v for v in schema["enum"] if isinstance(v, str)], n=1)
        return f"; did you mean {close[0]!r}?" if close else ""
    if kind == "type" and isinstance(found, str) and {"integer", "number"} & set(_types(schema)):
        try:
            float(found)
        except ValueError:
            return ""
        return "; write the number without quotes"
    if kind == "maxLength":
        return "; shorten it"
    return ""


def _types(schema: Mapping[str, Any]) -> list[str]:
    types = schema.get("type", [])
    return [types] if isinstance(types, str) else list(types)


def _most_specific(error: SchemaViolation) -> SchemaViolation:
    """For an ``anyOf`` that failed, the alternative's error that got furthest into the value, when one of
    them matched its type (``optimizer: {"name": "adamw"}`` is about the name, not about null)."""
    while error.validator in ("anyOf", "oneOf") and error.context:
        deeper = [e for e in error.context if len(e.absolute_path) > len(error.absolute_path)]
        same_level = [e for e in error.context if e.validator not in ("type", "anyOf", "oneOf", "$ref")]
        candidates = deeper or same_level
        if not candidates:
            break
        error = max(candidates, key=lambda e: len(e.absolute_path))
    return error


def _description(error: SchemaViolation, root: Mapping[str, Any]) -> str | None:
    """The ``description`` that applies to the failing value: the one written beside a field (``"in_features":
    {"$ref": "#/$defs/size", "description": "width of the input"}``) before the shared definition's own.

    The error's schema path skips ``$ref`` hops, so the walk follows a reference wherever the next step is
    not in the referring schema itself.
    """
    specific = generic = None
    node: Any = root
    previous: Any = None
    for token in [*list(error.absolute_schema_path)[:-1], None]:
        while isinstance(node, dict) and "$ref" in node and (token is None or token not in node):
            specific = node.get("description", specific)
            node = _resolve(root, node["$ref"])
            generic = node.get("description") if isinstance(node, dict) else None
        if token is None:
            break
        try:
            node = node[token]
        except (KeyError, IndexError, TypeError):
            break
        deeper_value = previous in _CHILD_CONTAINERS or token in _CHILD_KEYWORDS
        if token not in _CHILD_CONTAINERS and isinstance(node, dict):
            if deeper_value:  # a schema for a value inside the previous one: forget what described the parent
                specific, generic = node.get("description"), None
            elif "description" in node:
                specific = node["description"]
        previous = token
    return specific or generic


_CHILD_CONTAINERS = ("properties", "prefixItems", "patternProperties")  # name -> schema maps (and a list)
_CHILD_KEYWORDS = ("items", "additionalProperties", "propertyNames")


def _resolve(root: Mapping[str, Any], ref: str) -> Any:
    node: Any = root
    for part in ref.removeprefix("#/").split("/"):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return node


def _show(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, str):
        return f"the string {_clip(value)!r}" + (f" ({len(value)} characters)" if len(value) > _MAX_SHOWN else "")
    if isinstance(value, (int, float)):
        text = str(value)
        return text if len(text) <= _MAX_SHOWN else f"a number of {len(text)} digits"
    if isinstance(value, dict):
        return f"an object with fields {_clip(', '.join(map(str, value)))}" if value else "an empty object {}"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'' if len(value) == 1 else 's'}" if value else "an empty list []"
    return type(value).__name__


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def nesting(value: Any, limit: int) -> int:
    """Levels of nested lists, tuples and dicts in ``value``, counted with an explicit stack (a recursive
    walk, like a validator's, would overflow first); stops looking deeper than ``limit + 1``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, (list, tuple)):
            deepest = max(deepest, depth)
            if depth <= limit:
                stack.extend((v, depth + 1) for v in item if isinstance(v, (list, tuple, dict)))
    return deepest


def bullet_list(lines: Iterable[str], limit: int = 50) -> str:
    """Messages as an indented list, at most ``limit`` of them (a file can break a rule thousands of times)."""
    lines = list(lines)
    shown = [f"  - {line}" for line in lines[:limit]]
    if len(lines) > limit:
        shown.append(f"  ... and {len(lines) - limit} more")
    return "\n".join(shown)
