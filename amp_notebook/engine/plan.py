"""The compile step: a :class:`~amp_notebook.runtime.plan.Plan` plus its dataset's facts -> the plain tables the
native engine reads, or the exact reasons a graph cannot run natively.

**State layout.** Every field name a state of the graph can hold gets a fixed slot: ``key`` and ``flush``
(the controller's), the dataset's batch fields, and each field an op writes (an Isu's updates, the
counter of an Ungroup or Group, the field of a Flatmap, Partition or Collect, Partition's size field),
plus every name an expression reads (a name no message ever holds just stays absent: reading it is a
missing field, as in Python). Slots are ``key``, ``flush``, then the rest by name. A state is then an
int64 per slot and two bit masks (present, bool): see ``src/state.h``.

**What keeps a graph on the Python engine** (each reason names the node and what to change):

* an expression the native form cannot evaluate: ``/`` (a float), a float constant, an int beyond int64
  (``engine/expressions.py``); it may put a float into a state, and the native state holds ints;
* more distinct state fields than the native state has slots (``MAX_SLOTS``).

A node whose op kind has no native kernel does *not* keep the graph off the engine: it runs through the
bridge (its Python op, under the GIL), and :attr:`Support.bridged` lists it, so the summary can say which
nodes went through Python. (A user's op that adds a state field of its own is an error when it does so:
its fields are not in the layout.)

**Tables** (:class:`NativeTables`): per node its kernel spec (``engine/specs.py``), its routes by port
index (forward: output port -> (node, input port); backward: input port -> (node, output port); -1 where
nothing is connected or no gradient flows), and the bit masks of the ports that carry gradients.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from amp_notebook.engine.expressions import NotNativeError, compile_expression
from amp_notebook.engine.specs import Spec, kernel_spec, native_kernel
from amp_notebook.ir.expr import Expression
from amp_notebook.ir.ops import LOSS_PORT, Op
from amp_notebook.ir.ops.facts import Field
from amp_notebook.ir.ops.field_types import StateField, StateFields, Updates
from amp_notebook.runtime.plan import Plan

MAX_SLOTS = 16  # src/common.h kMaxSlots
RESERVED = ("key", "flush")


def _declared(op: Op) -> list[tuple[Field, Any]]:
    """``op``'s declared configuration fields (``ir/ops/facts.py``) with the values it holds."""
    return [(f, getattr(op, f.attribute, None)) for f in type(op).fields]


def expressions_of(op: Op) -> list[tuple[str, Expression]]:
    """Every expression of ``op`` with the field it sits in (``predicate``, ``forward['t']``, ...): its
    expression fields (Cond/Distribute predicates, Ungroup chunk, Group count, Collect key/index/count) and
    the updates of its update fields (Isu)."""
    found: list[tuple[str, Expression]] = []
    for f, value in _declared(op):
        if isinstance(value, Expression):
            found.append((f.name, value))
        elif isinstance(f.type, Updates) and isinstance(value, Mapping):
            found += [(f"{f.name}[{k!r}]", v) for k, v in value.items() if isinstance(v, Expression)]
    return found


def fields_written(op: Op) -> set[str]:
    """State fields ``op`` may add or change, from its declarations: the values of its state-field fields
    (an Ungroup's or Group's counter, a Flatmap's, Partition's or Collect's field, Partition's size field)
    and the names its update fields assign (Isu). A user's op that declares none is not known here."""
    names: set[str] = set()
    for f, value in _declared(op):
        if isinstance(f.type, StateField) and value:
            names.add(value)
        elif isinstance(f.type, Updates) and isinstance(value, Mapping):
            names |= set(value)
    return names


def fields_read(op: Op) -> set[str]:
    """State fields ``op`` reads: the names in its expressions and its state-field lists (``match_on``)."""
    names: set[str] = set()
    for _, expr in expressions_of(op):
        names |= expr.names
    for f, value in _declared(op):
        if isinstance(f.type, StateFields) and value:
            names |= set(value)
    return names


def state_layout(ops: Iterable[Op], dataset_fields: Iterable[str] = ()) -> tuple[str, ...]:
    """The slot names: ``key``, ``flush``, then every other field the graph's states can hold, by name."""
    names = set(dataset_fields)
    for op in ops:
        names |= fields_written(op) | fields_read(op)
    return (*RESERVED, *sorted(names - set(RESERVED)))


@dataclass
class Support:
    """Whether a graph can run on the native engine: ``reasons`` (empty: it can), its layout, and the nodes
    whose ops run through the bridge (in Python)."""

    layout: tuple[str, ...]
    reasons: list[str] = field(default_factory=list)
    bridged: list[str] = field(default_factory=list)

    @property
    def native(self) -> bool:
        return not self.reasons


def check(names: list[str], ops: list[Op], dataset_fields: Iterable[str] = ()) -> Support:
    """Every reason the graph (node ``names[i]`` runs ``ops[i]``) cannot run natively, and which nodes bridge."""
    layout = state_layout(ops, dataset_fields)
    support = Support(layout)
    slots = {n: i for i, n in enumerate(layout)}
    if len(layout) > MAX_SLOTS:
        support.reasons.append(
            f"the graph's states hold {len(layout)} distinct fields {list(layout)}; the native state has "
            f"{MAX_SLOTS} slots: remove fields with an Isu ({{'field': None}}) once they are no longer read"
        )
    for name, op in zip(names, ops, strict=True):
        for where, expr in expressions_of(op):
            try:
                compile_expression(expr, slots)
            except NotNativeError as exc:
                support.reasons.append(f"{type(op).__name__} {name!r} {where}: {exc}")
        if not native_kernel(op):
            support.bridged.append(name)
    return support


def check_plan(plan: Plan, dataset_fields: Iterable[str] = ()) -> Support:
    return check(plan.names, plan.ops, dataset_fields)


@dataclass
class NativeTables:
    """What the engine reads about a graph (module docstring)."""

    layout: tuple[str, ...]
    specs: list[Spec]
    fwd_route: list[list[tuple[int, int]]]  # [node][output port] -> (node, input port), (-1, -1) if none
    bwd_route: list[list[tuple[int, int]]]  # [node][input port] -> (node, output port), (-1, -1) if none
    grad_inputs: list[int]  # [node] bit mask of input ports whose gradient is sent back
    grad_outputs: list[int]  # [node] bit mask of output ports that send one back
    bridged: list[int]  # nodes whose op runs in Python


def compile_tables(plan: Plan, dataset_fields: Iterable[str] = ()) -> NativeTables:
    """The tables of ``plan``; raises :class:`NotNativeError` with every reason when it cannot run natively."""
    support = check_plan(plan, dataset_fields)
    if not support.native:
        raise NotNativeError("; ".join(support.reasons))
    slots = {n: i for i, n in enumerate(support.layout)}
    specs, fwd, bwd, gin, gout, bridged = [], [], [], [], [], []
    for i, op in enumerate(plan.ops):
        ins, outs = list(op.input_ports()), list(op.output_ports())
        in_index = {p: k for k, p in enumerate(ins)}
        out_index = {p: k for k, p in enumerate(outs)}
        specs.append(kernel_spec(op, slots, node=plan.names[i]))
        fwd.append([_route(plan.fwd_route[i].get(p), plan.ops, "in") for p in outs])
        bwd.append([_route(plan.bwd_route[i].get(p), plan.ops, "out") for p in ins])
        gin.append(sum(1 << in_index[p] for p in plan.grad_inputs[i] if p in in_index))
        gout.append(sum(1 << out_index[p] for p in plan.grad_outputs[i] if p in out_index and p != LOSS_PORT))
        if not native_kernel(op):
            bridged.append(i)
    return NativeTables(support.layout, specs, fwd, bwd, gin, gout, bridged)


def _route(dst: tuple[int, str] | None, ops: list[Op], side: str) -> tuple[int, int]:
    if dst is None:
        return (-1, -1)
    node, port = dst
    ports = ops[node].input_ports() if side == "in" else ops[node].output_ports()
    return (node, list(ports).index(port))


__all__ = [
    "MAX_SLOTS", "NativeTables", "NotNativeError", "Support", "check", "check_plan", "compile_tables", "expressions_of",
    "fields_read", "fields_written", "state_layout",
]  # fmt: skip
