"""Drive a native kernel (or the bridge) through the Python op interface, so the op tests run it unchanged.

:class:`NativeOp` is an :class:`~amp_notebook.ir.ops.Op` whose ``forward``/``backward`` (and bundle forms) go
through ``_native.KernelProbe``: payloads and states cross the boundary as they will in a run, the kernel
keeps its caches natively, parameters and gradient accumulators are the very numpy arrays of the
NodeContext (the kernel writes the accumulators in place), and reports come back into ``ctx.reports``.
With ``bridge=True`` the probe runs the Python op through the native bridge instead of a native kernel
(the path of every op without one). One probe per NodeContext: a context is one node's runtime state.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from amp_notebook import engine
from amp_notebook.engine.errors import from_native
from amp_notebook.engine.plan import state_layout
from amp_notebook.engine.specs import kernel_spec
from amp_notebook.ir.message import State
from amp_notebook.ir.ops import LOSS_PORT, NodeContext, Op

LOSS_INDEX = -1  # src/common.h kLossPort


class NativeOp(Op):
    def __init__(self, op: Op, fields: set[str], bridge: bool = False) -> None:
        self.op = op
        self.kind = op.kind  # type: ignore[misc]
        self.bundling = op.bundling  # type: ignore[misc]
        self.nondiff_inputs = op.nondiff_inputs  # type: ignore[misc]
        self.bridge = bridge
        self.native = engine.native()
        layout = state_layout([op], fields)
        self.codec = self.native.StateCodec(list(layout), State)
        self.slots = {n: i for i, n in enumerate(layout)}
        self.spec = kernel_spec(op, self.slots, node="node")
        self._ins = list(op.input_ports())
        self._outs = list(op.output_ports())
        self._probes: dict[int, tuple[NodeContext, Any]] = {}
        self.hold = False  # leave held-back gradients in the kernel after a backward, until settle()

    def input_ports(self) -> tuple[str, ...]:
        return self.op.input_ports()

    def output_ports(self) -> tuple[str, ...]:
        return self.op.output_ports()

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.op.param_shapes()

    def probe(self, ctx: NodeContext) -> Any:
        entry = self._probes.get(id(ctx))
        if entry is None or entry[0] is not ctx:
            names = list(self.op.param_shapes())
            gin = sum(1 << i for i, p in enumerate(self._ins) if p in ctx.grad_inputs)
            gout = sum(1 << i for i, p in enumerate(self._outs) if p in ctx.grad_outputs)
            bridge = (self.op, ctx) if self.bridge else None
            spec = kernel_spec(self.op, self.slots, node=ctx.name)  # Dropout hashes the node's name
            probe = self.native.KernelProbe(self.codec, spec, [ctx.params[n] for n in names],
                                            [ctx.grads[n] for n in names], gin, gout, bridge)  # fmt: skip
            entry = self._probes[id(ctx)] = (ctx, probe)
        return entry[1]

    def held(self, ctx: NodeContext) -> int:
        return int(self.probe(ctx).held())

    def settle(self, ctx: NodeContext) -> None:
        """Write the kernel's held-back gradients into ``ctx.grads`` (what the engine does before an update)."""
        self.probe(ctx).settle()

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> list:
        return self.forward_bundle(ctx, port, [x], [state])

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> list:
        return self.backward_bundle(ctx, port, [g], [state])

    def forward_bundle(self, ctx: NodeContext, port: str, xs: list[Any], states: list[State]) -> list:
        probe = self.probe(ctx)
        try:
            emitted = probe.forward(self._ins.index(port), list(xs), list(states), ctx.train, ctx.n_grads)
        except (self.native.KernelError, self.native.ExpressionFailure) as exc:
            raise from_native(exc, self.op, True, port, list(xs), list(states), self.native) from None
        ctx.reports.extend(probe.take_reports())
        return [(LOSS_PORT if p == LOSS_INDEX else self._outs[p], y, s) for p, y, s in emitted]

    def backward_bundle(self, ctx: NodeContext, port: str, gs: list[Any], states: list[State]) -> list:
        probe = self.probe(ctx)
        index = LOSS_INDEX if port == LOSS_PORT else self._outs.index(port)
        try:
            emitted = probe.backward(index, list(gs), list(states), ctx.n_grads, hold=self.hold)
        except (self.native.KernelError, self.native.ExpressionFailure) as exc:
            raise from_native(exc, self.op, False, port, list(gs), list(states), self.native) from None
        ctx.reports.extend(probe.take_reports())  # a bridged op's reports pass through the native side
        return [(self._ins[p], g, s) for p, g, s in emitted]


def native_case(case: Any, bridge: bool = False, dtype: Any = None) -> Any:
    """``case`` (tests/ir/test_op_gradients.py Case) with its op run natively (or through the bridge), and
    its float payloads and parameters cast to ``dtype`` if given."""
    fields = {f for _, _, s in case.feeds for f in s}
    feeds, params = case.feeds, case.params
    if dtype is not None:
        feeds = [(p, x.astype(dtype) if x.dtype.kind == "f" else x, s) for p, x, s in feeds]
        params = {k: v.astype(dtype) for k, v in params.items()}
    return dataclasses.replace(case, op=NativeOp(case.op, fields, bridge), feeds=feeds, params=params)


def as_float(y: Any) -> np.ndarray:
    return np.asarray(y, dtype=float)
