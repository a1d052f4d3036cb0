"""The types of op configuration fields: what each accepts, keeps, writes as JSON and publishes as JSON Schema.

A field type (:class:`FieldType`) knows four things about the values of a field (``facts.Field``): the JSON
Schema of its values (written inline, or as a reference to a shared definition of the graph schema, such as
``#/$defs/size``), how to check a Python value and what to keep (an
:class:`~amp_notebook.ir.expr.Expression` for an expression, a tuple for a list), how to write the kept value
back as JSON, and the palette's type code (how the graph builder parses what a user types). The limits that
graph files, the builder and op constructors share (``MAX_SIZE``, ``MAX_COUNT``, the pattern of a state field
name) are written here and nowhere else.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from amp_notebook.errors import AmpError
from amp_notebook.ir.expr import MAX_LENGTH, Expression, ExpressionError

MAX_SIZE = 2**24  # a width or size
MAX_COUNT = 1024  # a number of ports (inputs, outputs, branches, pieces)
MAX_NAME = 64  # characters of a state field name
MAX_NAMES = 64  # state field names in a list (match_on, drop) or updates in an Isu
FIELD_NAME = r"^[A-Za-z][A-Za-z0-9_]*$"
_FIELD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class FieldValueError(AmpError, ValueError):
    """A value a field type refuses; the op's constructor raises it again as an ``OpError`` naming the op and
    the field (``base.Op.__init__``)."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # the default of a field the caller must give


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/$defs/{name}"}


class FieldType:
    """A kind of configuration value. ``code`` is the palette's type code, ``fallback`` the value a palette
    drop gives a required field that declares no ``example``; ``ref`` names the shared JSON Schema
    definition the type's values point to (None: the schema is written inline)."""

    code = "json"
    fallback: Any = None
    ref: str | None = None
    expression = False  # holds (or may hold) an expression over state fields

    def definition(self) -> dict[str, Any]:
        """The JSON Schema of the values (the shared definition, for a type with a ``ref``)."""
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        """The JSON Schema a field of this type writes: a reference to the shared definition, or inline."""
        return _ref(self.ref) if self.ref else self.definition()

    def check(self, value: Any) -> Any:
        """The value the op keeps, or :class:`FieldValueError` saying what was expected."""
        raise NotImplementedError

    def to_json(self, kept: Any) -> Any:
        return kept

    def describe(self) -> dict[str, Any]:
        """The type as plain data for other implementations (``describe_op``)."""
        return {"type": type(self).__name__.lower(), "schema": self.definition()}


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class Int(FieldType):
    """A whole number from ``low`` to ``high`` (None too, when ``nullable``)."""

    def __init__(self, low: int, high: int, ref: str | None = None, nullable: bool = False, doc: str = "") -> None:
        self.low, self.high, self.ref, self.nullable, self.doc = low, high, ref, nullable, doc
        self.code = "int?" if nullable else "int"
        self.fallback = None if nullable else low

    def definition(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": ["integer", "null"] if self.nullable else "integer"}
        schema.update({"minimum": self.low, "maximum": self.high})
        if self.doc:
            schema["description"] = self.doc
        return schema

    def check(self, value: Any) -> Any:
        if value is None and self.nullable:
            return None
        if not _is_int(value) or not self.low <= value <= self.high:
            what = (
                f"a positive int (at most {self.high})" if self.low == 1 else f"an int from {self.low} to {self.high}"
            )
            raise FieldValueError(f"expected {what}{' or None' if self.nullable else ''}, got {value!r}")
        return int(value)


class Number(FieldType):
    """A finite real number within bounds (``open_low``: the low bound itself is excluded)."""

    code = "number"
    fallback = 0.0

    def __init__(self, low: float, high: float | None = None, open_low: bool = False) -> None:
        self.low, self.high, self.open_low = low, high, open_low

    def definition(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "number", "exclusiveMinimum" if self.open_low else "minimum": self.low}
        if self.high is not None:
            schema["maximum"] = self.high
        return schema

    def check(self, value: Any) -> Any:
        real = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        above = real and (value > self.low if self.open_low else value >= self.low)
        if not above or (self.high is not None and value > self.high):
            what = f"a number {'>' if self.open_low else '>='} {self.low}"
            if self.high is not None:
                what += f" and <= {self.high}"
            raise FieldValueError(f"expected {what}, got {value!r}")
        return float(value)


class Bool(FieldType):
    """A true/false field."""

    code = "bool"
    fallback = False

    def definition(self) -> dict[str, Any]:
        return {"type": "boolean"}

    def check(self, value: Any) -> Any:
        if not isinstance(value, bool) and type(value).__name__ != "bool_":  # numpy's bool too
            raise FieldValueError(f"expected True or False, got {value!r}")
        return bool(value)


class Choice(FieldType):
    """One of a fixed list of values (None among them makes the field optional)."""

    def __init__(self, *values: Any) -> None:
        self.values = values
        named = [v for v in values if v is not None]
        self.code = ("text" if all(isinstance(v, str) for v in named) else "int") + ("?" if None in values else "")
        self.fallback = values[0]

    def definition(self) -> dict[str, Any]:
        return {"enum": list(self.values)}

    def check(self, value: Any) -> Any:
        for v in self.values:
            if v is None and value is None:
                return None
            if v is not None and type(value) is not bool and isinstance(value, type(v)) and value == v:
                return v
            if isinstance(v, int) and _is_int(value) and value == v:
                return v
        raise FieldValueError(f"expected one of {', '.join(map(repr, self.values))}, got {value!r}")


class Expr(FieldType):
    """An expression over state fields in the safe expression language (kept compiled)."""

    code = "expr"
    fallback = "t"
    ref = "expression"
    expression = True

    def definition(self) -> dict[str, Any]:
        return {
            "type": "string", "minLength": 1, "maxLength": MAX_LENGTH,
            "description": "an expression over state fields in the safe expression language",
        }  # fmt: skip

    def check(self, value: Any) -> Any:
        if isinstance(value, Expression):
            return value
        try:
            return Expression(value)
        except ExpressionError as exc:
            raise FieldValueError(str(exc)) from None

    def to_json(self, kept: Any) -> Any:
        return kept.source


class StateField(FieldType):
    """The name of a state field that the op sets or reads (None too, when ``nullable``); never ``key``."""

    ref = "field_name"

    def __init__(self, nullable: bool = False) -> None:
        self.nullable = nullable
        self.code = "text?" if nullable else "text"
        self.fallback = None if nullable else "t"

    def definition(self) -> dict[str, Any]:
        return {
            "type": "string", "pattern": FIELD_NAME, "maxLength": MAX_NAME, "not": {"const": "key"},
            "description": "a state field name: letters, digits and '_', not 'key' (the controller's)",
        }  # fmt: skip

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [_ref("field_name"), {"type": "null"}]} if self.nullable else _ref("field_name")

    def check(self, value: Any) -> Any:
        if value is None and self.nullable:
            return None
        if not _field_name(value) or value == "key":
            raise FieldValueError(
                f"expected a state field name other than 'key' (letters, digits and '_', starting with a letter)"
                f"{' or None' if self.nullable else ''}, got {value!r}"
            )
        return value


def _field_name(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME and _FIELD_NAME.fullmatch(value) is not None


class StateFields(FieldType):
    """A list of distinct state field names, or None (``match_on``, ``drop``); kept as a tuple."""

    code = "names?"
    ref = "match_on"

    def definition(self) -> dict[str, Any]:
        return {
            "type": ["array", "null"], "items": {"type": "string", "pattern": FIELD_NAME, "maxLength": MAX_NAME},
            "maxItems": MAX_NAMES, "uniqueItems": True,
        }  # fmt: skip

    def check(self, value: Any) -> Any:
        if value is None:
            return None
        names = () if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__") else tuple(value)
        if (
            (names == () and not isinstance(value, (list, tuple)))
            or not all(_field_name(v) for v in names)
            or len(set(names)) != len(names)
            or len(names) > MAX_NAMES
        ):
            raise FieldValueError(
                f"expected a list of at most {MAX_NAMES} distinct state field names (letters, digits and '_'), "
                f"or None, got {value!r}"
            )
        return names

    def to_json(self, kept: Any) -> Any:
        return None if kept is None else list(kept)


class Updates(FieldType):
    """An Isu's state updates: field name -> expression, or None to remove the field; kept compiled."""

    code = "updates"
    fallback = MappingProxyType({"t": "t + 1"})  # read-only: a palette default is rebuilt from it
    ref = "updates"
    expression = True

    def definition(self) -> dict[str, Any]:
        return {
            "type": "object", "maxProperties": MAX_NAMES,
            "propertyNames": {"pattern": FIELD_NAME, "maxLength": MAX_NAME},
            "additionalProperties": {
                "anyOf": [{"type": "null"}, _ref("expression")],
                "description": "an expression such as 't + 1', or null to drop the field",
            },
        }  # fmt: skip

    def check(self, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise FieldValueError(f"expected a mapping of field -> expression, got {type(value).__name__}")
        if len(value) > MAX_NAMES:
            raise FieldValueError(f"expected at most {MAX_NAMES} field updates, got {len(value)}")
        kept: dict[str, Expression | None] = {}
        for name, source in value.items():
            if not _field_name(name):
                raise FieldValueError(
                    f"field names must be identifiers not starting with '_' (letters, digits and '_'), got {name!r}"
                )
            try:
                kept[name] = None if source is None else Expr().check(source)
            except FieldValueError as exc:
                raise FieldValueError(f"field {name!r}: {exc}") from None
        return kept

    def to_json(self, kept: Any) -> Any:
        return {k: None if v is None else v.source for k, v in kept.items()}


class Sizes(FieldType):
    """A list of at least ``min_items`` sizes (``item_doc`` describes one); kept as a tuple."""

    code = "ints"
    fallback = (1,)

    def __init__(self, item_doc: str, min_items: int = 2) -> None:
        self.item_doc, self.min_items = item_doc, min_items

    def definition(self) -> dict[str, Any]:
        return {
            "type": "array", "items": {**SIZE.schema(), "description": self.item_doc},
            "minItems": self.min_items, "maxItems": MAX_COUNT,
        }  # fmt: skip

    def check(self, value: Any) -> Any:
        if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__"):
            raise FieldValueError(f"expected a list of sizes, got {value!r}")
        if not self.min_items <= len(value) <= MAX_COUNT:
            raise FieldValueError(f"expected {self.min_items} to {MAX_COUNT} pieces, got {list(value)}")
        return tuple(SIZE.check(v) for v in value)

    def to_json(self, kept: Any) -> Any:
        return list(kept)


class SizeOrExpr(FieldType):
    """A size, or an expression over state fields that gives one per message (None too, when ``nullable``).

    ``size_doc`` and ``expr_doc`` describe the two alternatives in the schema."""

    expression = True

    def __init__(self, size_doc: str, expr_doc: str, nullable: bool = False) -> None:
        self.size_doc, self.expr_doc, self.nullable = size_doc, expr_doc, nullable
        self.code = "int|expr?" if nullable else "int|expr"
        self.fallback = None if nullable else 1

    def definition(self) -> dict[str, Any]:
        alternatives = [
            {**SIZE.schema(), "description": self.size_doc},
            {**EXPR.schema(), "description": self.expr_doc},
        ]
        return {"anyOf": alternatives + ([{"type": "null"}] if self.nullable else [])}

    def check(self, value: Any) -> Any:
        if value is None and self.nullable:
            return None
        if isinstance(value, (str, Expression)):
            return EXPR.check(value)
        if not _is_int(value) or not 1 <= value <= MAX_SIZE:
            raise FieldValueError(
                f"expected a positive int (at most {MAX_SIZE}) or an expression over state fields"
                f"{' or None' if self.nullable else ''}, got {value!r}"
            )
        return int(value)

    def to_json(self, kept: Any) -> Any:
        return kept.source if isinstance(kept, Expression) else kept


SIZE = Int(1, MAX_SIZE, ref="size", doc="a width or size: a whole number from 1 to 2**24")
COUNT = Int(1, MAX_COUNT, ref="count", doc="a number of ports: a whole number from 1 to 1024")
EXPR = Expr()
BOOL = Bool()
STATE_FIELD = StateField()
STATE_FIELDS = StateFields()
UPDATES = Updates()
# the shared definitions of the graph JSON Schema ("$defs"), by the name their references use
SHARED_TYPES: tuple[FieldType, ...] = (SIZE, COUNT, EXPR, STATE_FIELD, STATE_FIELDS, UPDATES)
