"""What the browser may send the widgets: one JSON Schema per message kind, checked before anything acts.

The builder's canvas sends ``{"type": "intent", "intent": {...}}`` (and ``export``, ``train``); the
dashboard sends ``{"type": "control", "action": ..., "value": ...}`` (and ``ready``, ``export``,
``checkpoint``). A
message is checked against the schema of its kind (its ``type``, or a control's ``action``) before it
reaches the graph or the run: a missing field, a field of the wrong type, a value out of range or a field
that no such message has (junk) is refused whole, with a message naming the field, what was expected
and what was found, and nothing changes. The checks after this one (does the node exist, is the port
free, is the expression safe) stay with the code that knows the graph: :class:`BuilderModel` and the
:class:`Run`.

Python callers may pass tuples for lists and numpy integers for ints: the validator here treats them as
JSON arrays and numbers (the browser only ever sends JSON).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from functools import cache
from typing import Any

from amp_notebook.ir.schema import nesting, problems
from amp_notebook.ui import builder_schema as S

MAX_NAME = 256  # characters of a node, port or field name (the graph schema's limit)
MAX_TEXT = 10_000  # characters of a property value typed in the inspector
MAX_WORKERS = 256  # workers a builder may show lanes for
MAX_POSITIONS = 100_000  # nodes moved or laid out by one message
MAX_CONTROL_VALUE = 1_000_000  # max_active_keys or min_update_frequency from a slider
MAX_NESTING = 16  # levels of lists and objects in one message (an intent needs 4)

_NAME = {"type": "string", "minLength": 1, "maxLength": MAX_NAME, "description": "a node name"}
_PORT = {"type": "string", "minLength": 1, "maxLength": MAX_NAME, "description": "a port name"}
_POSITION = {
    "anyOf": [
        {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}], "items": False, "minItems": 2},
        {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
         "required": ["x", "y"], "additionalProperties": False},
    ],
    "description": "canvas coordinates [x, y] or {\"x\": ..., \"y\": ...}",
}  # fmt: skip
_POSITIONS = {
    "type": "object",
    "additionalProperties": _POSITION,
    "propertyNames": {"maxLength": MAX_NAME},
    "maxProperties": MAX_POSITIONS,
    "description": "node name -> [x, y]",
}
_INT_OR_TEXT = {
    "anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 64}, {"type": "null"}],
    "description": "a whole number (or its text from an input box)",
}
_OPTIMIZER = {
    "anyOf": [{"type": "null"}, {"type": "string", "maxLength": MAX_TEXT}, {"type": "object", "maxProperties": 16}],
    "description": "an optimizer name such as 'adam', its settings as an object or JSON text, or empty",
}
_VALUE = {
    "type": ["string", "number", "boolean", "null", "array", "object"],
    "maxLength": MAX_TEXT,
    "maxItems": 1024,
    "maxProperties": 64,
    "description": "the property's new value (text as typed, or a JSON value)",
}
_DIRECTION = {"enum": ["TB", "LR", None], "description": "the layout's direction (null: chosen by the graph's shape)"}
_ATTRS = {
    "min_update_frequency": _INT_OR_TEXT,
    "worker": _INT_OR_TEXT,
    "replicas": _INT_OR_TEXT,
    "optimizer": _OPTIMIZER,
}
_CELL_FIELDS = {field: _INT_OR_TEXT for cell in S.CELLS.values() for field in cell["fields"]}


def _intent(name: str, properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"type": {"const": name}, **properties},
        "required": ["type", *required],
        "additionalProperties": False,
    }


INTENTS: dict[str, dict[str, Any]] = {
    "add_node": _intent(
        "add_node",
        {"kind": {"type": "string", "minLength": 1, "maxLength": 64, "description": "an op kind or cell:<name>"},
         "name": {"anyOf": [_NAME, {"type": "null"}], "description": "the new node's name (empty: one is made up)"},
         "position": {"anyOf": [_POSITION, {"type": "null"}], "description": _POSITION["description"]},
         "config": {"type": ["object", "null"], "maxProperties": 64, "description": "op properties by name"},
         **_ATTRS},
        ("kind",),
    ),
    "add_cell": _intent(
        "add_cell",
        {"kind": {"type": "string", "minLength": 1, "maxLength": 64, "description": "a cell name"},
         "name": {"anyOf": [_NAME, {"type": "null"}], "description": "the cell's name (empty: one is made up)"},
         "position": {"anyOf": [_POSITION, {"type": "null"}], "description": _POSITION["description"]},
         **_CELL_FIELDS},
        ("kind",),
    ),
    "move": _intent("move", {"positions": _POSITIONS}, ("positions",)),
    "layout": _intent("layout", {"positions": _POSITIONS, "direction": _DIRECTION}, ("positions",)),
    "connect": _intent(
        "connect",
        {"src": _NAME, "src_port": _PORT, "dst": _NAME, "dst_port": _PORT},
        ("src", "src_port", "dst", "dst_port"),
    ),
    "disconnect": _intent("disconnect", {"dst": _NAME, "dst_port": _PORT}, ("dst", "dst_port")),
    "delete": _intent(
        "delete",
        {"nodes": {"type": "array", "items": _NAME, "maxItems": MAX_POSITIONS, "description": "node names"},
         "edges": {"type": "array", "maxItems": MAX_POSITIONS, "description": "edges as [dst, dst_port]",
                   "items": {"type": "array", "prefixItems": [_NAME, _PORT], "items": False, "minItems": 2}}},
    ),
    "set_property": _intent(
        "set_property",
        {"node": _NAME, "field": {"type": "string", "minLength": 1, "maxLength": 64, "description": "a property"},
         "value": _VALUE},
        ("node", "field", "value"),
    ),
    "undo": _intent("undo", {}),
    "redo": _intent("redo", {}),
    "auto_layout": _intent("auto_layout", {"direction": _DIRECTION}),
    "load_model": _intent(
        "load_model", {"model": {"type": "string", "maxLength": 64, "description": "a model-zoo name"}}, ("model",)
    ),
    "auto_place": _intent("auto_place", {"strategy": {"enum": ["round_robin", "balanced"]}}),
    "pin": _intent(
        "pin",
        {"nodes": {"anyOf": [_NAME, {"type": "array", "items": _NAME, "minItems": 1, "maxItems": MAX_POSITIONS}],
                   "description": "a node name or a non-empty list of them"},
         "worker": {**_INT_OR_TEXT, "description": "a worker index, or empty to unpin"}},
        ("nodes", "worker"),
    ),
    "set_workers": _intent(
        "set_workers",
        {"workers": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_WORKERS},
                               {"type": "string", "maxLength": 16}],
                     "description": f"the number of workers, 1 to {MAX_WORKERS}"}},
        ("workers",),
    ),
}  # fmt: skip

BUILDER_MESSAGES: dict[str, dict[str, Any]] = {
    "intent": _intent("intent", {"intent": {"type": "object", "description": "an intent such as {\"type\": \"undo\"}"}},
                      ("intent",)),
    "export": _intent("export", {"format": {"enum": ["json", "python"]}}),
    "train": _intent("train", {}),
}  # fmt: skip

CONTROL_ACTIONS = ("pause", "resume", "stop", "max_active_keys", "min_update_frequency", "max_bundle")
_SETTING = {"type": "integer", "minimum": 1, "maximum": MAX_CONTROL_VALUE, "description": "the slider's new value"}
CONTROLS: dict[str, dict[str, Any]] = {
    "pause": _intent("control", {"action": {"const": "pause"}}, ("action",)),
    "resume": _intent("control", {"action": {"const": "resume"}}, ("action",)),
    "stop": _intent("control", {"action": {"const": "stop"}}, ("action",)),
    "max_active_keys": _intent(
        "control", {"action": {"const": "max_active_keys"}, "value": _SETTING}, ("action", "value")
    ),
    "min_update_frequency": _intent(
        "control",
        {"action": {"const": "min_update_frequency"}, "value": _SETTING,
         "node": {"anyOf": [_NAME, {"type": "null"}], "description": "one node's name, or null for all"}},
        ("action", "value"),
    ),
    "max_bundle": _intent(
        "control",
        {"action": {"const": "max_bundle"}, "value": _SETTING,
         "node": {"anyOf": [_NAME, {"type": "null"}], "description": "one node's name, or null for all"}},
        ("action", "value"),
    ),
}  # fmt: skip
DASHBOARD_MESSAGES: dict[str, dict[str, Any]] = {
    "ready": _intent("ready", {}),
    "export": _intent("export", {"download": {"type": "boolean"}}),
    "checkpoint": _intent("checkpoint", {}),  # Save checkpoint: run.save to the dashboard's checkpoint_path
    "control": {"type": "object", "properties": {"action": {"enum": list(CONTROL_ACTIONS)}}, "required": ["action"]},
}


TABLES: dict[str, dict[str, dict[str, Any]]] = {
    "builder message": BUILDER_MESSAGES,
    "intent": INTENTS,
    "dashboard message": DASHBOARD_MESSAGES,
    "control": CONTROLS,
}


def refusal(what: str, message: Any, field: str = "type") -> str | None:
    """None when ``message`` fits the schema that its ``field`` picks from ``TABLES[what]``; otherwise one
    line saying why not: the field, what was expected and what was found."""
    schemas = TABLES[what]
    if not isinstance(message, Mapping):
        return f"{what} refused: expected an object with a {field!r}, found {type(message).__name__}"
    kind = message.get(field)
    if not isinstance(kind, str) or kind not in schemas:
        shown = repr(kind) if isinstance(kind, (str, int, float, bool, type(None))) else type(kind).__name__
        return f"unknown {what} {shown}; expected a {field!r} among {', '.join(sorted(schemas))}"
    if nesting(message, MAX_NESTING) > MAX_NESTING:
        return f"{what} {kind!r} refused: expected lists and objects nested at most {MAX_NESTING} deep, found more"
    found = problems(_validator(what, kind), message)
    if not found:
        return None
    return f"{what} {kind!r} refused: {'; '.join(found)}"


@cache
def _validator(what: str, kind: str) -> Any:
    schema = TABLES[what][kind]
    lenient = _lenient_validator()
    lenient.check_schema(schema)
    return lenient(schema)


def _is_array(_checker: Any, value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _is_integer(_checker: Any, value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer())


def _is_number(_checker: Any, value: Any) -> bool:
    """A real number that JSON could carry: not a bool, not NaN or infinite."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


@cache
def _lenient_validator() -> Any:
    """Draft 2020-12 with the type checks above (built on first use: importing jsonschema takes seconds)."""
    import jsonschema

    return jsonschema.validators.extend(
        jsonschema.Draft202012Validator,
        type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
            {"array": _is_array, "integer": _is_integer, "number": _is_number}
        ),
    )
