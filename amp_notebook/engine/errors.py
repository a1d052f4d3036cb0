"""Native failures as the Python op's own exceptions.

A kernel reports an :class:`~amp_notebook.ir.ops.OpError` as ``KernelError(message, port)``: it becomes an
OpError with that message and port name. An expression failure comes back as ``ExpressionFailure(program,
code)`` with no text: the message Python would give depends on Python's own formatting of the state, so the
failing messages are run through the *Python* op (pure for every op that evaluates expressions before any
side effect: Cond, Distribute, Isu, Ungroup, Group, Collect), which raises exactly the error the Python
engine raises. If the Python op succeeds the failure was the native engine's own limit (an intermediate
value beyond int64, where Python's ints grow), said as such.

A native run's failure (:func:`failure_exception`) becomes the exception the Python engine raises for the
same message: a NodeError naming node, direction, port and state around the op's own exception, or the
numerics guard's NonFiniteError; a failure of the engine's own code in a worker (not an op's) is a lost
worker, a :class:`~amp_notebook.runtime.restart.WorkerLostError`, which ``max_failures`` may restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amp_notebook.ir.expr import ExpressionError
from amp_notebook.ir.message import BWD, FWD, PHASES, UPDATE, State
from amp_notebook.ir.ops import LOSS_PORT, NodeContext, Op, OpError

if TYPE_CHECKING:
    from amp_notebook.runtime.session import Session

OVERFLOW = 3  # src/expr.h kOverflow
LOSS_INDEX = -1  # src/common.h kLossPort


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
        return replay(op, forward, port, payloads, states, program, code)
    return exc


def replay(
    op: Op, forward: bool, port: str, payloads: list[Any], states: list[State], program: int, code: int
) -> Exception:
    """The exception the Python op raises on the messages whose expression ``program`` failed natively."""
    python_exc = python_raises(op, forward, port, payloads, states)
    if python_exc is not None:  # the Python op's own error: exactly what the Python engine raises
        return python_exc
    if code == OVERFLOW:
        return ExpressionError(
            f"{type(op).__name__}: an expression gave a value beyond int64 on a state among {states} "
            "(Python's ints grow; the native engine's are 64-bit): keep state arithmetic small, or use "
            "engine='python'"
        )
    return RuntimeError(f"native expression failure {code} in program {program} that the Python op does not raise")


def python_raises(op: Op, forward: bool, port: str, payloads: list[Any], states: list[State]) -> Exception | None:
    """What the (pure) Python op raises on these messages, if anything: run with a fresh context, caching nothing."""
    ctx = NodeContext("replay")
    ctx.train = False
    try:
        (op.forward_bundle if forward else op.backward_bundle)(ctx, port, payloads, states)
    except Exception as exc:
        return exc
    return None


def failure_exception(failure: dict[str, Any], session: Session) -> BaseException:
    """The exception a native run's first failure (``Engine.failure()``) raises, as the Python engine raises
    it: a :class:`~amp_notebook.runtime.worker.NodeError` naming the node, direction, port and state, caused by
    the op's own exception (a kernel's OpError, the Python op's error replayed for an expression, a bridged
    op's exception); a NaN/inf as the :class:`~amp_notebook.runtime.numerics.NonFiniteError` the numerics
    guard raises; a NodeError raised by Python (a bridged update) unchanged. The session's contexts must be
    synced (the backend does it before calling this)."""
    from amp_notebook.runtime.worker import NodeError

    plan = session.plan
    kind, node = failure["kind"], failure["node"]
    if kind == "internal" and failure["worker"] >= 0:  # the engine's own code failed in a worker: it is lost
        from amp_notebook.runtime.restart import WorkerLostError

        w = failure["worker"]
        nodes = [plan.names[i] for i in range(len(plan.names)) if plan.owner[i] == w]
        return WorkerLostError(w, nodes, f"native worker thread amp-native-{w}", f"the native engine failed: "
                               f"{failure['message']}")  # fmt: skip
    if kind == "python" and node < 0:  # a Python error outside any node (a simulation's cost model): as it is
        return failure["python"]
    if node < 0:  # the loop's own failure, no message in hand
        return RuntimeError(f"the native engine failed: {failure['message']}")
    op, direction, states = plan.ops[node], failure["direction"], failure["states"]
    if kind in ("nonfinite_loss", "nonfinite_gradient") and session.numerics is not None:
        try:
            if kind == "nonfinite_loss":
                session.numerics.loss_ok(node, failure["report"])
            else:
                session.numerics.gradients_ok(node, session.contexts[node])
        except NodeError as exc:
            return exc
    cause: BaseException
    if kind == "python":
        cause = failure["python"]
        if isinstance(cause, NodeError):
            return cause
    elif kind == "op":
        ports = op.input_ports()
        port_index = failure["op_port"]
        cause = OpError(failure["message"], ports[port_index] if 0 <= port_index < len(ports) else None)
    elif kind == "expression":
        port, payloads = port_name(op, direction, failure["port"]), failure["payloads"]
        for i in range(len(states) if len(states) > 1 else 0):  # the message of a bundle that fails alone
            if python_raises(op, direction == FWD, port, payloads[i : i + 1], states[i : i + 1]) is not None:
                states, payloads = states[i : i + 1], payloads[i : i + 1]
                break
        cause = replay(op, direction == FWD, port, payloads, states, failure["program"], failure["code"])
    else:
        cause = RuntimeError(failure["message"] or f"native failure of kind {kind}")
    if direction == UPDATE:
        state: Any = State(keys=tuple(failure["keys"])) if failure["keys"] else ""
    elif len(states) == 1:
        state = states[0]
    else:
        keys = sorted({s.get("key") for s in states if s.get("key") is not None})
        state = f"{states[0]} (in a bundle of {len(states)} messages, keys {keys})"
    error = NodeError(plan.names[node], type(op).__name__, PHASES[direction],
                      port_name(op, direction, failure["port"]), state, cause)  # fmt: skip
    error.__cause__ = cause
    return error


def port_name(op: Op, direction: int, port: int) -> str:
    """A message's port name from its index: an input port forward, an output port backward (``loss`` for a
    loss's pseudo-output), none for an update."""
    if direction == FWD:
        return op.input_ports()[port]
    if direction == BWD:
        return LOSS_PORT if port == LOSS_INDEX else op.output_ports()[port]
    return ""


__all__ = ["failure_exception", "from_native", "port_name", "python_raises", "replay"]
