"""What the graph builder knows about each op kind: its palette entry, its typed properties and defaults.

Everything here is derived from the closed list ``OPS`` (amp_notebook/ir/ops/__init__.py): the palette
groups follow the op's ``group``, and the properties of an op are its declared ``fields``
(amp_notebook/ir/ops/facts.py), each with its type code, default (a required field's ``example``), choices
and one-line doc. A new op kind therefore shows up in the palette without a change here.

Values typed in the browser arrive as text; :func:`coerce` turns text (or an already typed Python value)
into the field's type or raises :class:`PropertyError` naming the node, the field, what was expected, what
was found and how to fix it. Nothing is evaluated: numbers are parsed, expressions are checked by
:class:`~amp_notebook.ir.expr.Expression` (via the op's constructor) and JSON goes through ``json.loads``.
"""

from __future__ import annotations

import copy
import json
import math
import numbers
import re
from collections.abc import Mapping
from typing import Any

from amp_notebook.errors import AmpError
from amp_notebook.ir import ops as O
from amp_notebook.ir.expr import Expression, ExpressionError
from amp_notebook.ir.ops.base import Op, OpError


class BuilderError(AmpError, ValueError):
    """An intent the graph builder refused; the message says why and how to fix it."""


class PropertyError(BuilderError):
    """A property value of the wrong type or out of range; the message says what was expected."""


# Field types: the palette type codes of the field types in amp_notebook/ir/ops/facts.py (``FieldType.code``).
INT, OPT_INT, BOOL, NUMBER, TEXT, OPT_TEXT, EXPR, INT_OR_EXPR, OPT_INT_OR_EXPR, INTS, NAMES, UPDATES, JSON = (
    "int", "int?", "bool", "number", "text", "text?", "expr", "int|expr", "int|expr?", "ints", "names?", "updates",
    "json",
)  # fmt: skip

# Palette groups, in the order the palette shows them.
GROUPS = ("io", "payload", "control flow", "aggregation", "loss", "cells")
_GROUP_OF_OP_GROUP = {"io": "io", "payload": "payload", "control": "control flow", "aggregation": "aggregation",
                      "loss": "loss"}  # fmt: skip

# Compound cells (amp_notebook/ir/cells.py): builder functions, not ops. The builder adds their nodes behind
# Identity "port" nodes named ``{name}_in_{input}`` so the cell can be dropped before it is wired. Their palette
# kinds are ``cell:<function>`` (some fused op kinds share the functions' names).
CELL_PREFIX = "cell:"
CELLS: dict[str, dict[str, Any]] = {
    "lstm_cell": {"label": "LSTM cell", "inputs": ["x", "h", "c"], "outputs": ["h", "c"],
                  "fields": {"hidden": 32, "in_features": 32}},
    "gru_cell": {"label": "GRU cell", "inputs": ["x", "h"], "outputs": ["h"],
                 "fields": {"hidden": 32, "in_features": 32}},
    "tree_lstm_leaf": {"label": "Tree-LSTM leaf", "inputs": ["x"], "outputs": ["hc"],
                       "fields": {"hidden": 32, "in_features": 32}},
    "tree_lstm_branch": {"label": "Tree-LSTM branch", "inputs": ["children"], "outputs": ["hc"],
                         "fields": {"hidden": 32}},
}  # fmt: skip


def palette_group(kind: str) -> str:
    return _GROUP_OF_OP_GROUP.get(O.OPS[kind].group, "payload")


def label(kind: str) -> str:
    return O.OPS[kind].__name__ if kind in O.OPS else CELLS[kind.removeprefix(CELL_PREFIX)]["label"]


def fields(kind: str) -> list[dict[str, Any]]:
    """The typed properties of op ``kind``: name, type code, default, choices (when fixed) and a one-line doc."""
    out = []
    for f in O.OPS[kind].fields:
        entry: dict[str, Any] = {"name": f.name, "type": f.type.code, "default": f.palette_default(), "doc": f.doc}
        if f.choices is not None:
            entry["choices"] = f.choices
        out.append(entry)
    return out


def default_config(kind: str) -> dict[str, Any]:
    """A fresh copy of op ``kind``'s default configuration (the caller may change it: the defaults stay)."""
    return copy.deepcopy({f["name"]: f["default"] for f in fields(kind)})


def make_op(kind: str, config: Mapping[str, Any], where: str = "") -> Op:
    """``OPS[kind](**config)``, with a message naming ``where`` (the node) when the config is refused."""
    if kind not in O.OPS:
        raise PropertyError(f"unknown op kind {kind!r}; the palette has {sorted(O.OPS)}")
    where = where or O.OPS[kind].__name__
    try:
        return O.OPS[kind](**config)
    except (OpError, TypeError, ValueError) as exc:
        raise PropertyError(f"{where}: {exc}") from None


def palette() -> list[dict[str, Any]]:
    """Every op kind and compound cell, with its group, ports (of the default config) and properties."""
    entries = []
    for kind in O.OPS:
        try:
            op = make_op(kind, default_config(kind))
            ports = {"inputs": list(op.input_ports()), "outputs": list(op.output_ports())}
        except PropertyError:
            ports = {"inputs": [], "outputs": []}
        entries.append(
            {"kind": kind, "label": label(kind), "group": palette_group(kind), "heavy": O.OPS[kind].heavy,
             "parameterized": kind in O.PARAMETERIZED, "fields": fields(kind), **ports}
        )  # fmt: skip
    for kind, cell in CELLS.items():
        entries.append(
            {"kind": CELL_PREFIX + kind, "label": cell["label"], "group": "cells", "heavy": True, "parameterized": True,
             "inputs": cell["inputs"], "outputs": cell["outputs"],
             "fields": [{"name": k, "type": INT, "default": v} for k, v in cell["fields"].items()]}
        )  # fmt: skip
    return sorted(entries, key=lambda e: GROUPS.index(e["group"]))


def coerce(ftype: str, value: Any, where: str) -> Any:
    """``value`` (text from the browser, or a Python value) as a ``ftype`` value; PropertyError otherwise."""
    text = value.strip() if isinstance(value, str) else None
    if ftype in (OPT_INT, OPT_TEXT, OPT_INT_OR_EXPR, NAMES, JSON) and (value is None or text in ("", "None", "null")):
        return None
    if ftype in (INT, OPT_INT):
        return _int(value, text, where)
    if ftype == NUMBER:
        return _number(value, text, where)
    if ftype == BOOL:
        if isinstance(value, bool):
            return value
        if text in ("true", "True", "1", "false", "False", "0"):
            return text in ("true", "True", "1")
        raise PropertyError(f"{where}: expected true or false, got {value!r}")
    if ftype in (INT_OR_EXPR, OPT_INT_OR_EXPR):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if text is not None and re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        return _expression(value, where)
    if ftype == EXPR:
        return _expression(value, where)
    if ftype in (TEXT, OPT_TEXT):
        if not isinstance(value, str):
            raise PropertyError(f"{where}: expected text, got {type(value).__name__} {value!r}")
        return value.strip()
    if ftype == INTS:
        items = [s for s in re.split(r"[,\s]+", text.strip("[]()")) if s] if text is not None else value
        if not isinstance(items, (list, tuple)) or not items:
            raise PropertyError(f"{where}: expected a list of ints such as '32, 32', got {value!r}")
        return [_int(v, v.strip() if isinstance(v, str) else None, where) for v in items]
    if ftype == NAMES:
        items = [s for s in re.split(r"[,\s]+", text.strip("[]()")) if s] if text is not None else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) and v.isidentifier() for v in items):
            raise PropertyError(f"{where}: expected state field names such as 'key, t', got {value!r}")
        return [v.strip("'\"") for v in items]
    if ftype == UPDATES:
        return _updates(value, text, where)
    if text is not None:  # JSON: parsed, never evaluated
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise PropertyError(f"{where}: expected JSON, got {value!r} ({exc.msg})") from None
    return value


def format_value(ftype: str, value: Any) -> str:
    """The text the inspector shows for a value (what :func:`coerce` reads back)."""
    if value is None:
        return ""
    if ftype == UPDATES:
        return "; ".join(f"{k} = {'None' if v is None else v}" for k, v in value.items())
    if ftype in (INTS, NAMES):
        return ", ".join(str(v) for v in value)
    if ftype == BOOL:
        return "true" if value else "false"
    if ftype == JSON:
        return json.dumps(value)
    return str(value)


def _int(value: Any, text: str | None, where: str) -> int:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):  # numpy integers too
        return int(value)
    if text is not None and re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    found = f"{type(value).__name__} {value!r}" if not isinstance(value, str) else repr(value)
    raise PropertyError(f"{where}: expected an int, got {found}; type a whole number such as 64")


def _number(value: Any, text: str | None, where: str) -> float:
    number: Any = value
    if text is not None:
        try:
            number = float(text)
        except ValueError:
            number = None
    if isinstance(number, numbers.Real) and not isinstance(number, bool) and math.isfinite(number):
        return float(number)
    found = f"{type(value).__name__} {value!r}" if not isinstance(value, str) else repr(value)
    raise PropertyError(f"{where}: expected a number, got {found}; type a number such as 0.5 or 1e-5")


def _expression(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise PropertyError(f"{where}: expected an expression over state fields, got {type(value).__name__}")
    try:
        Expression(value)
    except ExpressionError as exc:
        raise PropertyError(f"{where}: {exc}") from None
    return value.strip()


def _updates(value: Any, text: str | None, where: str) -> dict[str, str | None]:
    """Isu updates: a mapping, or text ``t = t + 1; length = None`` (None deletes the field)."""
    if text is not None:
        pairs: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in re.split(r"[;\n]", text))):
            name, sep, source = part.partition("=")
            if not sep or source.startswith("="):
                raise PropertyError(f"{where}: expected 'field = expression; ...', got {part!r}")
            pairs[name.strip()] = None if source.strip() == "None" else source.strip()
        value = pairs
    if not isinstance(value, Mapping):
        raise PropertyError(f"{where}: expected field updates such as 't = t + 1', got {value!r}")
    out: dict[str, str | None] = {}
    for name, source in value.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise PropertyError(f"{where}: field names must be identifiers not starting with '_', got {name!r}")
        out[name] = None if source is None else _expression(source, f"{where} field {name!r}")
    return out
