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
}


def kernel_spec(op: Op, slots: Mapping[str, int]) -> Spec:
    """The spec of ``op``'s node for the layout ``slots`` (field name -> slot); kinds without an encoder get
    the fields every spec has (the bridge needs only the port names)."""
    ints, expressions = ENCODERS.get(op.kind, _none)(op, slots)
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


__all__ = ["ENCODERS", "FITS", "Spec", "kernel_spec", "native_kernel"]
