"""An op's facts live on the op, declared once: the completeness guard.

Adding an op touches its own module, its ``Graph`` builder method and its tests. Everything else (its
config, its constructor's checks, the graph JSON Schema entry, the builder palette, the named groups, its
``amp.nn`` function and compiler handler, ``from_torch``) is derived from what the class declares. This guard
fails, saying what to add, when an op forgets a declaration that a runtime, the simulator or one of those
derived places would otherwise fill with a silent default (a missing table entry once made ``Sub`` free in
the simulator).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

from amp_notebook.ir import ops as O
from amp_notebook.ir.ops import OPS
from amp_notebook.ir.ops.base import BUNDLINGS, REGISTRY, Op
from amp_notebook.ir.ops.facts import SIZE, Field, NNForm, TorchForm, describe_op

GROUPS = ("io", "payload", "control", "aggregation", "loss")
DTYPES = ("float", "int", None)


def default_op(cls: type[Op]) -> Op:
    return cls(**{f.name: f.palette_default() for f in cls.fields})


def problems(cls: type[Op]) -> list[str]:
    """What the op class ``cls`` fails to declare, each with what to add (empty: complete)."""
    kind, found = cls.kind or cls.__name__, []
    if not cls.kind:
        found.append(f"{cls.__name__} declares no kind: set kind = 'snake_case_name' (the name in graph JSON)")
    if cls.group not in GROUPS:
        found.append(f"op {kind!r} declares group {cls.group!r}: set group to one of {GROUPS}")
    if cls.bundling not in BUNDLINGS:
        found.append(f"op {kind!r} declares bundling {cls.bundling!r}: set bundling to one of {BUNDLINGS}")
    elif cls.bundling == "rows" and cls.forward_bundle is Op.forward_bundle:
        found.append(
            f"op {kind!r} says bundling 'rows' but runs per message: override forward_bundle, or say 'per_message'"
        )
    if cls.element_flops is None and cls.flops is Op.flops:
        found.append(
            f"op {kind!r} declares no FLOP count: set element_flops = (forward, backward) per payload element, or "
            "override flops()"
        )
    for method in ("__init__", "config"):
        if method in cls.__dict__:
            found.append(
                f"op {kind!r} defines {method}(): declare its configuration as fields = (Field(name, type, doc, "
                "default=...), ...) (ir/ops/facts.py) and set derived attributes in setup(); both are derived"
            )
    for f in cls.fields:
        if not f.doc or "\n" in f.doc:
            found.append(f"op {kind!r} field {f.name!r} needs a one-line doc (Field(name, type, doc))")
        if f.from_width is not None and f.type is not SIZE:
            found.append(f"op {kind!r} field {f.name!r} is a width (from_width): its type must be SIZE")
    try:
        op = default_op(cls)
    except Exception as exc:
        required = [f.name for f in cls.fields if f.required]
        found.append(
            f"op {kind!r} cannot be built from its palette defaults ({exc}); give its required field(s) {required} an "
            "example= that builds it"
        )
        return found
    if bool(op.param_shapes()) != cls.parameterized:
        found.append(
            f"op {kind!r} declares parameterized = {cls.parameterized} but param_shapes() gives {op.param_shapes()}: "
            "set parameterized = True exactly when the op holds parameters"
        )
    if cls.nn_form is not None:
        found += _nn_problems(cls, op)
    if cls.torch_form is not None:
        found += _torch_problems(cls, op)
    return found


def _nn_problems(cls: type[Op], op: Op) -> list[str]:
    from amp_notebook.compiler.nn import argument

    form, kind, found = cls.nn_form, cls.kind, []
    assert form is not None
    expected = [argument(p) for p in op.input_ports()]
    if [arg for arg, _ in form.inputs] != expected:
        found.append(
            f"op {kind!r} nn_form inputs name {[a for a, _ in form.inputs]}; its input ports call for {expected}"
        )
    if any(dtype not in DTYPES for _, dtype in form.inputs):
        found.append(f"op {kind!r} nn_form inputs: say what each input holds, one of {DTYPES}")
    if cls.parameterized and len(form.inputs) != 1:
        found.append(
            f"op {kind!r} is parameterized with {len(form.inputs)} inputs: amp.nn derives one-input parameters only"
        )
    for f in cls.fields:
        if f.from_width is not None and f.from_width not in op.input_ports():
            found.append(f"op {kind!r} field {f.name!r} is the width of {f.from_width!r}, which is no input port")
    return found


def _torch_problems(cls: type[Op], op: Op) -> list[str]:
    form, kind, found = cls.torch_form, cls.kind, []
    assert form is not None
    if cls.nn_form is None:
        found.append(f"op {kind!r} declares torch_form but no nn_form: from_torch writes the model with amp.nn")
    if len(op.input_ports()) != 1 or len(op.output_ports()) != 1:
        found.append(f"op {kind!r} declares torch_form: from_torch imports layers of one input and one output")
    names = {f.name for f in cls.fields}
    if not set(form.fields) <= names:
        found.append(f"op {kind!r} torch_form reads fields {sorted(set(form.fields) - names)} that it does not declare")
    if set(form.params) != set(op.param_shapes()):
        found.append(f"op {kind!r} torch_form params {sorted(form.params)}: bind each of {sorted(op.param_shapes())}")
    return found


@pytest.mark.parametrize("kind", list(OPS))
def test_every_op_declares_what_the_derived_places_need(kind: str) -> None:
    assert problems(OPS[kind]) == []


def test_a_new_op_that_forgets_declarations_is_told_what_to_add() -> None:
    class Forgetful(Op, register=False):
        kind = "forgetful"
        group = "payload"
        bundling = "rows"
        fields = (Field("width", SIZE, "the width"),)

        def __init__(self, width: int) -> None:
            self.width = width

    said = "\n".join(problems(Forgetful))
    assert "bundling 'rows' but runs per message: override forward_bundle" in said
    assert "declares no FLOP count: set element_flops" in said
    assert "defines __init__(): declare its configuration as fields" in said
    assert "forgetful" not in REGISTRY  # register=False keeps a throwaway class out of the registry

    class Undeclared(Op, register=False):
        kind = "undeclared"
        group = "payload"
        bundling = "per_message"
        element_flops = (1.0, 1.0)
        fields = (Field("hidden", SIZE, "the width"), Field("scale", SIZE, ""))
        nn_form = NNForm("undeclared", "a test", (("a", "float"),))
        torch_form = TorchForm("Undeclared", params={"W": "weight"})

        def param_shapes(self) -> dict[str, tuple[int, ...]]:
            return {"W": (self.hidden, self.hidden)}

    said = "\n".join(problems(Undeclared))
    assert "field 'scale' needs a one-line doc" in said
    assert "declares parameterized = False but param_shapes() gives" in said
    assert "nn_form inputs name ['a']; its input ports call for ['x']" in said


def test_an_op_registers_itself_by_being_defined_and_a_kind_is_taken_once() -> None:
    assert list(OPS) == [kind for kind in REGISTRY if kind in OPS]
    assert all(REGISTRY[kind] is cls for kind, cls in OPS.items())
    with pytest.raises(TypeError, match="op kind 'relu' of Again is taken by ReLU"):

        class Again(Op):
            kind = "relu"


def test_the_named_groups_are_what_the_ops_declare() -> None:
    assert {"linear", "embedding"} <= O.PARAMETERIZED
    assert {"cond", "phi", "isu", "distribute"} == O.CONTROL_FLOW
    assert O.LOSSES - {"sink"} == O.TRAINING_LOSSES
    assert {"isu", "collect"} == O.STATE_UPDATING
    assert {"tree_lstm_leaf", "tree_lstm_branch", "gru_update", "lstm_start", "lstm_update"} == O.FUSED_CELLS
    assert O.HEAVY <= O.PARAMETERIZED
    for name in ("PARAMETERIZED", "HEAVY", "CONTROL_FLOW", "AGGREGATION", "LOSSES", "TRAINING_LOSSES"):
        assert getattr(O, name) <= set(OPS), name


def test_the_constructor_is_derived_from_the_fields() -> None:
    assert str(inspect.signature(O.Linear)) == "(in_features, out_features, bias=True)"
    assert O.Linear(4, 3, bias=False).config() == {"in_features": 4, "out_features": 3, "bias": False}
    with pytest.raises(O.OpError, match=r"Linear out_features: expected a positive int \(at most 16777216\), got 0"):
        O.Linear(4, 0)
    with pytest.raises(O.OpError, match=r"Cond predicate: .*not a valid expression"):
        O.Cond("t <")
    with pytest.raises(O.OpError, match="Concat match_on: expected a list of at most 64 distinct state field names"):
        O.Concat(2, match_on=["t", "t"])
    with pytest.raises(TypeError, match=r"Linear\(in_features, out_features, bias=True\): missing a required argument"):
        O.Linear(4)
    assert O.Linear(np.int64(4), 3).in_features == 4  # numpy integers are ints


def test_placement_cost_is_an_op_method() -> None:
    assert O.Linear(4, 3).placement_cost() == 12
    assert O.Embedding(10, 7).placement_cost() == 7
    assert O.ReLU().placement_cost() == 1


def test_describe_op_gives_the_facts_as_plain_data() -> None:
    import json

    facts: dict[str, Any] = describe_op(O.Collect)
    json.dumps(facts)  # plain data
    assert facts["kind"] == "collect" and facts["updates_state"] is True
    count = next(f for f in facts["fields"] if f["name"] == "count")
    assert count["expression"] is True and count["required"] is True and count["palette_type"] == "int|expr"
    axis = next(f for f in facts["fields"] if f["name"] == "axis")
    assert axis["default"] == -1 and axis["choices"] == [0, -1]
    for cls in OPS.values():
        json.dumps(describe_op(cls))


def test_elementwise_math_costs_something_and_routing_costs_nothing() -> None:
    for kind in ("relu", "tanh", "sigmoid", "add", "sub", "mul", "softmax_cross_entropy", "mse", "tree_lstm_leaf"):
        assert OPS[kind].element_flops is not None and OPS[kind].element_flops[0] > 0, kind
    for kind in ("cond", "phi", "isu", "concat", "split", "bcast", "collect", "flatmap", "gather"):
        assert OPS[kind].element_flops == (0.0, 0.0), kind
