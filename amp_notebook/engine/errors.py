"""Native failures as the Python op's own exceptions.

A kernel reports an :class:`~amp_notebook.ir.ops.OpError` as ``KernelError(message, port)``: it becomes an
OpError with that message and port name. An expression failure comes back as ``ExpressionFailure(program,
code)`` with no text: the message Python would give depends on Python's own formatting of the state, so the
failing messages are run through the *Python* op (pure for every op that evaluates expressions before any
side effect: Cond, Distribute, Isu, Ungroup, Group, Collect), which raises exactly the error the Python
engine raises. If the Python op succeeds the failure was the native engine's own limit (an intermediate
value beyond int64, where Python's ints grow), said as such.
"""

from __future__ import annotations

from typing import Any

from amp_notebook.ir.expr import ExpressionError
from amp_notebook.ir.message import State
from amp_notebook.ir.ops import NodeContext, Op, OpError

OVERFLOW = 3  # src/expr.h kOverflow


def from_native(
    exc: Exception, op: Op, forward: bool, port: str, payloads: list[Any], states: list[State], native: Any
) -> Exception:
    """The exception the Python op raises for what made the kernel fail with ``exc``."""
    if isinstance(exc, native.KernelError):
        message, port_index = exc.args
        ports = op.input_ports()
        return OpError(message, ports[port_index] if 0 <= port_index < len(ports) else None)
    if isinstance(exc, native.ExpressionFailure):
        program, code = exc.args
        ctx = NodeContext("replay")
        ctx.train = False
        try:
            call = op.forward_bundle if forward else op.backward_bundle
            call(ctx, port, payloads, states)
        except Exception as python_exc:  # the Python op's own error: exactly what the Python engine raises
            return python_exc
        if code == OVERFLOW:
            return ExpressionError(
                f"{type(op).__name__}: an expression gave a value beyond int64 on a state among {states} "
                "(Python's ints grow; the native engine's are 64-bit): keep state arithmetic small, or use "
                "engine='python'"
            )
        return RuntimeError(f"native expression failure {code} in program {program} that the Python op does not raise")
    return exc


__all__ = ["from_native"]
