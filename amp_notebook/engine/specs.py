"""Per op kind: what the native kernel of a node needs from its op's configuration (a ``KernelSpec``).

A spec is plain data: the kind, its port names (for error messages), a list of ints whose meaning each
kernel documents in its C++ file, the op's expressions compiled to stack code, and how its joins match.
Every kind that has a native kernel (``src/kernels/*.cc``, registered with ``AMP_REGISTER_KERNEL``) has
an encoder here, and nothing else does: ``tests/engine/test_kernels.py`` checks both directions. A kind
with no kernel runs through the bridge (its Python op under the GIL).

Adding a kernel: see ``src/kernels/README.md``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from amp_notebook.engine.expressions import compile_expression
from amp_notebook.ir.expr import Expression
from amp_notebook.ir.ops import OPS, Cond, Isu, LayerNorm, Linear, Op, Split

Spec = dict[str, Any]
Encoder = Callable[[Op, Mapping[str, int]], tuple[list[int], list[Expression]]]


def _none(op: Op, slots: Mapping[str, int]) -> tuple[list[int], list[Expression]]:
    return [], []


def _linear(op: Op, slots: Mapping[str, int]) -> tuple[list[int], list[Expression]]:
    assert isinstance(op, Linear)
    return [int(op.bias)], []


def _cond(op: Op, slots: Mapping[str, int]) -> tuple[list[int], list[Expression]]:
    """[branches, index mode]: a Distribute, or a Cond of more than two branches, takes the value as an index."""
    assert isinstance(op, Cond)  # Distribute is a Cond
    return [op.branches, int(op.kind == "distribute" or op.branches > 2)], [op.predicate]


def _isu(op: Op, slots: Mapping[str, int]) -> tuple[list[int], list[Expression]]:
    """[n, (slot, program or -1) * n] forward, then backward, then whether each touches ``key``."""
    assert isinstance(op, Isu)
    ints: list[int] = []
    programs: list[Expression] = []
    for updates in (op.forward_updates, op.backward_updates):
        ints.append(len(updates))
        for name, expr in updates.items():
            ints.append(slots[name])
            if expr is None:
                ints.append(-1)
            else:
                ints.append(len(programs))
                programs.append(expr)
    ints += [int("key" in op.forward_updates), int("key" in op.backward_updates)]
    return ints, programs


def _split(op: Op, slots: Mapping[str, int]) -> tuple[list[int], list[Expression]]:
    assert isinstance(op, Split)
    return list(op.sizes), []


def _hidden(op: Op, slots: Mapping[str, int]) -> tuple[list[int], list[Expression]]:
    """[hidden]: the fused cells (src/kernels/fused.cc)."""
    return [int(op.hidden)], []  # type: ignore[attr-defined]


def _layer_norm(op: Op, slots: Mapping[str, int]) -> tuple[list[int], list[Expression]]:
    """[width, eps as the bits of a float64]."""
    assert isinstance(op, LayerNorm)
    return [op.width, struct.unpack("<q", struct.pack("<d", float(op.eps)))[0]], []


def _ungroup(op: Op, slots: Mapping[str, int]) -> tuple[list[int], list[Expression]]:
    """[counter slot, chunk mode (0 rows, 1 a fixed chunk, 2 an expression), fixed chunk]."""
    chunk, counter = op.chunk, slots[op.counter]  # type: ignore[attr-defined]
    if isinstance(chunk, Expression):
        return [counter, 2, 0], [chunk]
    return [counter, 0 if chunk is None else 1, chunk or 1], []


def _group(op: Op, slots: Mapping[str, int]) -> tuple[list[int], list[Expression]]:
    return [slots[op.counter]], [op.count]  # type: ignore[attr-defined]


def _row_split(op: Op, slots: Mapping[str, int]) -> tuple[list[int], list[Expression]]:
    """Flatmap [field slot, keep_2d]; Partition adds its size field's slot (-1: none)."""
    ints = [slots[op.field], int(op.keep_2d)]  # type: ignore[attr-defined]
    if op.kind == "partition":
        ints.append(slots[op.size_field] if op.size_field else -1)  # type: ignore[attr-defined]
    return ints, []


def _collect(op: Op, slots: Mapping[str, int]) -> tuple[list[int], list[Expression]]:
    """[field slot or -1, axis, count mode (0 fixed, 1 an expression), fixed count, n_drop, drop slots...];
    programs [key, index, (count)]. A dropped field outside the layout is never present: nothing to drop."""
    count, field = op.count, op.field  # type: ignore[attr-defined]
    by_expression = isinstance(count, Expression)
    drops = [slots[f] for f in op.drop if f in slots]  # type: ignore[attr-defined]
    ints = [slots[field] if field is not None else -1, 0 if op.axis == 0 else -1, int(by_expression),  # type: ignore[attr-defined]
            0 if by_expression else int(count), len(drops), *drops]  # fmt: skip
    return ints, [op.key, op.index, *([count] if by_expression else [])]  # type: ignore[attr-defined]


def _typed_edge_sum(op: Op, slots: Mapping[str, int]) -> tuple[list[int], list[Expression]]:
    return [op.types], []  # type: ignore[attr-defined]


def _dropout(op: Op, slots: Mapping[str, int], node: str | None = None) -> tuple[list[int], list[Expression]]:
    """[bits of p, prefix bytes, n fields, (slot, repr bytes) per field by name]: the text that
    ``dropout.message_base`` hashes is ``repr((seed, node, sorted(state.items())))``; its start
    ``"(seed, 'node', "`` and each field's ``repr(name)`` come from Python (its reprs), the kernel writes the
    items' values. Texts are given as their length, then one int per UTF-8 byte."""
    if node is None:
        raise ValueError("a Dropout's native kernel hashes its node's name into the masks: give kernel_spec the node")

    def text(value: str) -> list[int]:
        data = value.encode("utf-8")
        return [len(data), *data]

    p, seed = float(op.p), op.seed  # type: ignore[attr-defined]
    ints = [struct.unpack("<q", struct.pack("<d", p))[0], *text(repr((seed, node, []))[:-3])]
    ints.append(len(slots))
    for name in sorted(slots):  # sorted(state.items()) orders the items by field name
        ints += [slots[name], *text(repr(name))]
    return ints, []


ENCODERS: dict[str, Encoder] = {
    "input": _none,
    "identity": _none,
    "linear": _linear,
    "embedding": _none,
    "concat": _none,
    "split": _split,
    "bcast": _none,
    "discard": _none,
    "relu": _none,
    "tanh": _none,
    "sigmoid": _none,
    "add": _none,
    "sub": _none,
    "mul": _none,
    "cond": _cond,
    "distribute": _cond,
    "phi": _none,
    "isu": _isu,
    "softmax_cross_entropy": _none,
    "sink": _none,
    "tree_lstm_leaf": _hidden,
    "tree_lstm_branch": _hidden,
    "gru_update": _hidden,
    "lstm_start": _hidden,
    "lstm_update": _hidden,
    "layer_norm": _layer_norm,
    "ungroup": _ungroup,
    "group": _group,
    "flatmap": _row_split,
    "partition": _row_split,
    "collect": _collect,
    "gather": _none,
    "select_rows": _none,
    "scatter_sum": _none,
    "scatter_mean": _none,
    "typed_edge_sum": _typed_edge_sum,
    "sum_rows": _none,
    "mean_rows": _none,
    "mse": _none,
    "segment_softmax_cross_entropy": _none,
    "dropout": _dropout,
}
BY_NODE = frozenset({"dropout"})  # kinds whose spec depends on the node's name too (the encoder's `node`)


def kernel_spec(op: Op, slots: Mapping[str, int], node: str | None = None) -> Spec:
    """The spec of ``op``'s node (named ``node``) for the layout ``slots`` (field name -> slot); kinds without an
    encoder get the fields every spec has (the bridge needs only the port names)."""
    encoder = ENCODERS.get(op.kind, _none)
    ints, expressions = encoder(op, slots, node=node) if op.kind in BY_NODE else encoder(op, slots)  # type: ignore[call-arg]
    match_on = getattr(op, "match_on", None)
    return {
        "kind": op.kind,
        "param_shapes": [list(shape) for shape in op.param_shapes().values()],
        "in_names": list(op.input_ports()),
        "out_names": list(op.output_ports()),
        "ints": ints,
        "programs": [np.asarray(compile_expression(e, slots), dtype=np.int64).reshape(-1, 3) for e in expressions],
        "match_full": match_on is None,
        "match_slots": [slots[f] for f in match_on if f in slots] if match_on is not None else [],
    }


# Limits of the native kernels' fixed-size entries (src/kernels/kernel.h kMaxJoinPorts, aggregate.cc
# kMaxFanOut): a node beyond them runs through the bridge.
FITS: dict[str, Callable[[Op], bool]] = {
    "concat": lambda op: len(op.input_ports()) <= 4,
    "split": lambda op: len(op.output_ports()) <= 8,
    "bcast": lambda op: len(op.output_ports()) <= 8,
}


def native_kernel(op: Op) -> bool:
    """Whether ``op``'s node runs a native kernel (else it runs through the bridge): its kind has one and the op
    is that kind's own class (a user's subclass may change what it computes, so it runs as written)."""
    return op.kind in ENCODERS and type(op) is OPS.get(op.kind) and FITS.get(op.kind, lambda _: True)(op)


__all__ = ["BY_NODE", "ENCODERS", "FITS", "Spec", "kernel_spec", "native_kernel"]
