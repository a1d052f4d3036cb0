"""Assemble a native run from a session: the engine's nodes, their memory, optimizers and trace buffers.

The compile step (:mod:`amp_notebook.engine.plan`) gives the tables (state layout, kernel specs, routes by
port index, gradient masks); this module hands them to ``_native.Engine`` node by node, with what the session
owns and Python reads when the run is quiescent:

* a node's parameters and gradient accumulators: the arrays of its ``NodeContext`` (the kernel writes them in
  place; checkpoints, replica averaging and ``result.params`` read them);
* its optimizer: SGD, momentum and Adam run natively (``src/optim.cc``, equal to :mod:`amp_notebook.optim`),
  on the optimizer memory in ``ctx.opt_state`` (created here as ``optim.py`` creates it on the first step:
  zeros shaped like each parameter), with the learning rate the optimizer has now (Python lowers it at epoch
  ends, ``lr_decay``: the backend hands the new rate over). A node whose optimizer is another class, or whose
  op runs in Python (bridged: its accumulators live in Python), updates through the Python worker's
  ``apply_update`` under the GIL;
* its version, held gradient count and keys (a resumed run's), its live ``min_update_frequency`` and
  ``max_bundle``;
* the bridge for a node with no native kernel: its op and its ``NodeContext`` (the Python op keeps its caches
  there, where a diagnosis and a checkpoint look).

Each worker writes the session's native trace buffers (``engine/trace.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.engine import native
from amp_notebook.engine.choice import dataset_fields
from amp_notebook.engine.plan import compile_tables
from amp_notebook.ir.message import State
from amp_notebook.optim import SCRATCH, SGD, Adam, Momentum, Optimizer

if TYPE_CHECKING:
    from amp_notebook.ir.ops import NodeContext
    from amp_notebook.runtime.session import Session

NUMERICS = {"ignore": 0, "raise": 1, "skip": 2}  # src/engine.h EngineConfig.numerics
# how long an idle worker watches its mailbox before it sleeps, in us: each worker adapts its own spin between
# the two from how its sleeps end (src/worker.cc Worker::idle)
SPIN_US = (25.0, 400.0)
NATIVE_OPTIMIZERS: dict[type, str] = {SGD: "sgd", Momentum: "momentum", Adam: "adam"}


def assemble(session: Session) -> Any:
    """A ``_native.Engine`` for ``session``, not started."""
    plan, config, knobs = session.plan, session.config, session.knobs
    tables = compile_tables(plan, dataset_fields(session.dataset))
    module = native()
    codec = module.StateCodec(list(tables.layout), State)
    engine = module.Engine(
        codec, len(plan.names), config.workers, config.inbox_priority, config.order, config.mode == "amp",
        NUMERICS[config.on_nonfinite], config.trace, *SPIN_US, config.bundle_budget_s or 0.0,
    )  # fmt: skip
    bridged = set(tables.bridged)
    python_updates = False
    for i, ctx in enumerate(session.contexts):
        op = plan.ops[i]
        names = list(op.param_shapes())
        for arrays in (ctx.params, ctx.grads):
            for k in names:
                arrays[k] = shareable(arrays[k])
        optimizer = plan.optimizers[i]
        python_update = plan.parameterized[i] and (i in bridged or type(optimizer) not in NATIVE_OPTIMIZERS)
        python_updates |= python_update
        engine.add_node(
            i, plan.owner[i], tables.specs[i], [ctx.params[k] for k in names], [ctx.grads[k] for k in names],
            tables.grad_inputs[i], tables.grad_outputs[i], tables.fwd_route[i], tables.bwd_route[i],
            plan.parameterized[i], plan.receives_backward[i], (op, ctx) if i in bridged else None,
            None if optimizer is None or python_update else optimizer_spec(optimizer, ctx, names), python_update,
            ctx.version, ctx.n_grads, sorted(ctx.grad_keys), knobs.min_update_frequency[i], knobs.max_bundle[i],
        )  # fmt: skip
    engine.set_inputs(session.dtype.name, admitted_inputs(session))
    for w, buffer in enumerate(session.buffers):
        engine.set_trace(w, buffer.native)
    if python_updates:
        engine.set_python_update(_python_update(session))
    return engine


def admitted_inputs(session: Session) -> list[tuple[str, int, str, int, bool]]:
    """The engine's table for admitting a key in one call (``src/admission.h``): per Input node, in the plan's
    order (``Session.input_messages``'), its name, index, port, the width of the zeros it fills itself with
    (-1: its payload comes from the batch; ``Input`` refuses zeros without a width) and whether it is a float
    Input (its payload cast to the run's dtype)."""
    table = []
    for name, node in session.plan.inputs.items():
        op = session.plan.ops[node]
        table.append((name, node, "in", op.width if op.fill == "zeros" else -1, op.dtype == "float"))
    return table


def shareable(array: np.ndarray) -> np.ndarray:
    """``array`` if the engine can write it in place (C-contiguous, writeable), else such a copy of it: a
    parameter imported from torch may be a transposed (Fortran-ordered) view."""
    if array.flags.c_contiguous and array.flags.writeable:
        return array
    return np.array(array, order="C")


def optimizer_spec(optimizer: Optimizer, ctx: NodeContext, names: list[str]) -> dict[str, Any]:
    """What the native optimizer of a node reads: its kind and settings, Adam's step count, and its memory
    (arrays of ``ctx.opt_state``, made as ``optim.py`` makes them when absent)."""
    state = ctx.opt_state
    kind = NATIVE_OPTIMIZERS[type(optimizer)]

    def memory(suffix: str) -> list[np.ndarray]:
        arrays = []
        for name in names:
            key = name + suffix
            state[key] = shareable(state[key]) if key in state else np.zeros_like(ctx.params[name])
            arrays.append(state[key])
        return arrays

    spec: dict[str, Any] = {
        "kind": kind, "lr": optimizer.lr, "clip_norm": optimizer.clip_norm or 0.0, "t": int(state.get("t", 0)),
        "momentum": getattr(optimizer, "momentum", 0.0), "beta1": getattr(optimizer, "beta1", 0.0),
        "beta2": getattr(optimizer, "beta2", 0.0), "eps": getattr(optimizer, "eps", 0.0),
        "norm_order": [names.index(k) for k in ctx.grads],  # the clip norm sums in the grads dict's order
    }  # fmt: skip
    if kind == "momentum":
        spec["velocity"] = memory("")
    elif kind == "adam":
        spec.update(m=memory(".m"), v=memory(".v"), scratch=memory(SCRATCH))
    return spec


def _python_update(session: Session) -> Any:
    """The update of a node whose optimizer runs in Python: the Python worker's ``apply_update`` (numerics
    check, optimizer step, a NodeError naming the node on failure) on the node's context, brought up to the
    native counts first. Called by a worker thread with the GIL held; returns whether it updated."""
    contexts, workers, owner = session.contexts, session.workers, session.plan.owner

    def update(node: int, n_grads: int, keys: list[int], version: int) -> bool:
        ctx = contexts[node]
        ctx.n_grads, ctx.grad_keys, ctx.version = n_grads, set(keys), version
        return workers[owner[node]].apply_update(node)

    return update


__all__ = ["NATIVE_OPTIMIZERS", "admitted_inputs", "assemble", "optimizer_spec", "shareable"]
