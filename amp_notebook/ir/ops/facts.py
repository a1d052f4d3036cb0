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

A field's type (``field_types.py``: ``SIZE``, ``EXPR``, ``Choice("float", "int")``, ...) says what values it
accepts, what the op keeps, how the value is written as JSON and published as JSON Schema, and how the
palette parses typed text; the shared limits (``MAX_SIZE``, ``MAX_COUNT``) live there too.

A native engine reads the same declarations: :func:`describe_op` gives an op kind's facts and fields as
plain JSON data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from amp_notebook.ir.ops.field_types import (
    BOOL,
    COUNT,
    EXPR,
    MAX_COUNT,
    MAX_SIZE,
    REQUIRED,
    SHARED_TYPES,
    SIZE,
    STATE_FIELD,
    STATE_FIELDS,
    UPDATES,
    Choice,
    FieldType,
    FieldValueError,
    Int,
    Number,
    SizeOrExpr,
    Sizes,
    StateField,
)


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
        "updates_state": cls.updates_state, "fused_cell": cls.fused_cell, "training_dependent": cls.training_dependent,
        "element_flops": None if cls.element_flops is None else list(cls.element_flops),
        "nondiff_inputs": sorted(cls.nondiff_inputs), "fields": [f.describe() for f in cls.fields],
        "nn": None if cls.nn_form is None else cls.nn_form.name,
        "torch": None if cls.torch_form is None else cls.torch_form.module,
    }  # fmt: skip


__all__ = [
    "BOOL", "COUNT", "EXPR", "HIDDEN", "MATCH_ON", "MAX_COUNT", "MAX_SIZE", "REQUIRED", "SHARED_TYPES", "SIZE",
    "STATE_FIELD", "STATE_FIELDS", "UPDATES", "Choice", "Field", "FieldType", "FieldValueError", "Int", "NNForm",
    "Number", "SizeOrExpr", "Sizes", "StateField", "TorchForm", "describe_op",
]  # fmt: skip
