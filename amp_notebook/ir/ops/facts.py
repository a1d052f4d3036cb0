"""What an op declares about itself, once: its configuration fields, and how ``amp.nn`` and torch write it.

Each op class lists its configuration as ``fields``, a tuple of :class:`Field` (name, type, default, a
one-line doc). Everything else that used to repeat an op's settings is derived from that tuple:

* the constructor: ``Linear(4, 3, bias=False)`` binds its arguments to the fields, checks each value
  against its type (range, choices, expression syntax) and keeps it as an attribute
  (``base.Op.__init__``); cross-field rules live in the op's ``setup()``;
* ``op.config()``, the JSON-ready configuration that rebuilds the op;
* the graph JSON Schema's ``config_<kind>`` entry (``ir/graph_schema.py`` writes ``graph.schema.json``);
* the graph builder's palette: each field's type code, default and choices (``ui/builder_schema.py``);
* the compiler's handler and the signature of its ``amp.nn`` function, for an op that declares
  :class:`NNForm` (``compiler/nn.py``), and ``amp.from_torch``'s import of the torch layer an op declares
  as :class:`TorchForm` (``interop/torch.py``).

A field type knows four things: the JSON Schema of its values, how to check a Python value (and what it
keeps: an :class:`~amp_notebook.ir.expr.Expression` for an expression field, a tuple for a list), how to
write the kept value back as JSON, and the palette's type code (how the builder parses typed text). The
limits that JSON files, the builder and constructors share (``MAX_SIZE``, ``MAX_COUNT``, the pattern of a
state field name) are written here and nowhere else.

A native engine reads the same declarations: :func:`describe_op` gives an op kind's facts and fields as
plain JSON data.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
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
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        if ok:
            ok = (value > self.low if self.open_low else value >= self.low) and (
                self.high is None or value <= self.high
            )
        if not ok:
            bound = f"> {self.low}" if self.open_low else f">= {self.low}"
            what = f"from {self.low} to {self.high}" if self.high is not None and not self.open_low else bound
            if self.high is not None and self.open_low:
                what += f" and <= {self.high}"
            raise FieldValueError(f"expected a number {what}, got {value!r}")
        return float(value)


class Bool(FieldType):
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
    fallback = {"t": "t + 1"}  # noqa: RUF012 - never mutated: palette defaults are deep-copied
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


@dataclass(frozen=True)
class Field:
    """One configuration field of an op.

    ``default`` is REQUIRED for a field the caller must give; ``example`` is then the value a palette drop
    gives it (else the type's fallback). ``attr`` names the attribute the op keeps the value in when it is
    not the field's name (``Isu`` keeps ``forward`` as ``forward_updates``: ``forward`` is a method).
    ``from_width`` names the input port whose width the field is (a LayerNorm's ``width``): the compiler and
    ``from_torch`` fill it from the width of what feeds that port.
    """

    name: str
    type: FieldType
    doc: str
    default: Any = REQUIRED
    example: Any = REQUIRED
    attr: str = ""
    from_width: str | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def attribute(self) -> str:
        return self.attr or self.name

    @property
    def expression(self) -> bool:
        return self.type.expression

    @property
    def choices(self) -> list[Any] | None:
        return list(self.type.values) if isinstance(self.type, Choice) else None

    def palette_default(self) -> Any:
        """The value a node dropped from the palette starts with (JSON data)."""
        if not self.required:
            value = self.default
        elif self.example is not REQUIRED:
            value = self.example
        else:
            value = self.type.fallback
        return self.type.to_json(self.type.check(value)) if value is not None else None

    def schema(self) -> dict[str, Any]:
        """This field's entry in the graph JSON Schema's ``config_<kind>``."""
        return {**self.type.schema(), "description": self.doc}

    def describe(self) -> dict[str, Any]:
        """The field as plain data (what a native engine or another tool reads)."""
        out: dict[str, Any] = {"name": self.name, **self.type.describe(), "doc": self.doc, "required": self.required}
        if not self.required:
            out["default"] = self.type.to_json(self.type.check(self.default)) if self.default is not None else None
        out.update(expression=self.expression, palette_type=self.type.code)
        if self.choices is not None:
            out["choices"] = self.choices
        if self.from_width:
            out["from_width"] = self.from_width
        return out


MATCH_ON = Field(
    "match_on", STATE_FIELDS, "state fields (besides key) on which the inputs' messages are joined, or null for the "
    "whole state", default=None,
)  # fmt: skip
HIDDEN = Field("hidden", SIZE, "the cell's hidden width")


@dataclass(frozen=True)
class NNForm:
    """How a model function given to ``amp.compile`` writes the op: ``amp.nn.<name>(inputs..., fields...)``.

    ``inputs`` gives, per input port in order, the argument's name and what it must hold (``"float"``,
    ``"int"``, or None for either). The op's fields follow as arguments (with their defaults), except
    ``match_on`` (the compiler joins on the state fields the inputs share) and fields ``from_width`` (the
    width of the input that feeds that port). A parameterized op's call takes ``name=`` (one node per name,
    its weights shared by every call site with that name) and a loss's call is the model's objective.
    """

    name: str
    doc: str
    inputs: tuple[tuple[str, str | None], ...] = (("x", "float"),)


@dataclass(frozen=True)
class TorchForm:
    """The ``torch.nn`` layer that ``amp.from_torch`` imports as this op (one input, one output).

    ``fields`` maps an op field to the layer attribute it is read from (``{"eps": "eps"}``), ``params`` an op
    parameter to the layer parameter that holds it in the same layout (``{"g": "weight"}``).
    """

    module: str
    fields: Mapping[str, str] = dataclass_field(default_factory=dict)
    params: Mapping[str, str] = dataclass_field(default_factory=dict)


def describe_op(cls: Any) -> dict[str, Any]:
    """An op class's declared facts as plain JSON data: what a native engine or another tool reads to know
    the op's kind, group, how it bundles, its cost declaration and every configuration field."""
    return {
        "kind": cls.kind, "class": cls.__name__, "group": cls.group, "bundling": cls.bundling,
        "parameterized": cls.parameterized, "heavy": cls.heavy, "objective": cls.objective,
        "updates_state": cls.updates_state, "training_dependent": cls.training_dependent,
        "element_flops": None if cls.element_flops is None else list(cls.element_flops),
        "nondiff_inputs": sorted(cls.nondiff_inputs), "fields": [f.describe() for f in cls.fields],
        "nn": None if cls.nn_form is None else cls.nn_form.name,
        "torch": None if cls.torch_form is None else cls.torch_form.module,
    }  # fmt: skip
