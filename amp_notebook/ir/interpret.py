"""The reference interpreter: a single-threaded, deterministic executor of a graph; the oracle.

It shares the ops (their math is checked separately, against finite differences and torch) but none
of the runtime: no workers, no placement, no priorities, no credit counting. It runs one key at a time to
completion with a plain FIFO worklist, and checks the IR's invariants as it goes:

* every forward message a node emits for a training key gets exactly one backward message back;
* when a key completes, every cache and join of every node is empty (memory bounded by what is in flight);
* every Isu's backward inverts its forward on the states it saw.

``gradients(batch)`` gives the parameter gradients of one key (for comparisons with torch), and
``train(dataset, ...)`` is plain synchronous SGD in the same key order as the runtime's ``sync`` mode, so
every backend can be checked against it.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

import numpy as np

from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.errors import AmpError
from amp_notebook.ir import ops as O
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.message import BWD, FWD, State
from amp_notebook.ir.ops import LOSS_PORT, NodeContext
from amp_notebook.runtime.controller import Admit, Controller, EpochEnd, Finish, Flush
from amp_notebook.runtime.optim import Optimizer, make_optimizer
from amp_notebook.runtime.plan import average_replicas, compile_plan, end_epoch_optimizers


class InvariantError(AmpError, AssertionError):
    """The graph or an op broke one of the IR's invariants."""


class Interpreter:
    def __init__(
        self,
        graph: Graph,
        params: dict[str, dict[str, np.ndarray]] | None = None,
        seed: int = 0,
        dtype: Any = np.float64,
        optimizer: Optimizer | dict[str, Any] | str = "sgd",
    ) -> None:
        graph.validate()
        self.graph = graph
        self.dtype = np.dtype(dtype)
        self.plan = compile_plan(graph, dict.fromkeys(graph.nodes, 0), 1, 1, make_optimizer(optimizer))
        initial = params if params is not None else graph.init_params(seed, self.dtype)
        self.contexts = []
        for i, name in enumerate(self.plan.names):
            ctx = NodeContext(name, {k: np.array(v, dtype=self.dtype) for k, v in initial.get(name, {}).items()})
            ctx.grad_inputs = self.plan.grad_inputs[i]
            ctx.grad_outputs = self.plan.grad_outputs[i]
            self.contexts.append(ctx)
        self.reports: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ one key
    def run_key(self, batch: Batch, key: int = 0, train: bool = True) -> list[dict[str, Any]]:
        """Run one key to completion (forward, and backward when ``train``); gradients accumulate in
        the contexts. Returns the loss reports of this key."""
        plan = self.plan
        state = State(key=key, **batch.fields)
        work: deque[tuple[int, str, int, Any, State]] = deque()
        for name, node in plan.inputs.items():
            op = plan.ops[node]
            if op.fill == "zeros":
                payload = np.zeros((batch.size, op.width), dtype=self.dtype)
            else:
                payload = batch.inputs[name]
                if op.dtype == "float":
                    payload = np.asarray(payload, dtype=self.dtype)
            work.append((node, "in", FWD, payload, state))
        owed: Counter[tuple[int, str, State]] = Counter()  # backward messages still owed, by (node, out_port, state)
        reports: list[dict[str, Any]] = []
        while work:
            node, port, direction, payload, s = work.popleft()
            ctx, op = self.contexts[node], plan.ops[node]
            if direction == FWD:
                ctx.train = train and plan.receives_backward[node]
                for out_port, y, s2 in op.forward(ctx, port, payload, s):
                    self._check_isu(node, s, s2)
                    if out_port == LOSS_PORT:
                        if ctx.train:
                            self._emit_back(node, op.backward(ctx, LOSS_PORT, 1.0, s2), work, owed)
                        continue
                    dst, dst_port = plan.fwd_route[node][out_port]
                    if train and dst_port in plan.grad_inputs[dst]:
                        owed[(node, out_port, s2)] += 1
                    work.append((dst, dst_port, FWD, y, s2))
                for r in ctx.reports:
                    reports.append(r)
                ctx.reports.clear()
            else:
                if owed[(node, port, s)] <= 0:
                    raise InvariantError(
                        f"{plan.describe(node)} received a backward message at output {port!r} with state {s} "
                        "that it never sent forward (or received it twice)"
                    )
                owed[(node, port, s)] -= 1
                emitted = op.backward(ctx, port, payload, s)  # sees n_grads before this gradient
                if plan.parameterized[node]:
                    ctx.n_grads += 1
                    ctx.grad_keys.add(key)
                self._emit_back(node, emitted, work, owed)
        missing = +owed
        if missing:
            (node, port, s), _ = next(iter(missing.items()))
            raise InvariantError(
                f"{plan.describe(node)} sent a forward message from {port!r} with state {s} whose backward never came"
            )
        for i, ctx in enumerate(self.contexts):
            if ctx.cache or ctx.joins:
                left = list(ctx.cache)[:3] + list(ctx.joins)[:3]
                raise InvariantError(
                    f"{plan.describe(i)} still holds cache/join entries after key {key} completed: {left}; "
                    "something it waits for never arrived"
                )
        self.reports.extend(reports)
        return reports

    def _emit_back(self, node: int, emitted: list, work: deque, owed: Counter) -> None:
        route = self.plan.bwd_route[node]
        for in_port, g, s in emitted:
            if in_port in route:
                src, src_port = route[in_port]
                work.append((src, src_port, BWD, g, s))

    def _check_isu(self, node: int, before: State, after: State) -> None:
        op = self.plan.ops[node]
        if isinstance(op, O.Isu):
            back = op.apply(op.backward_updates, after)
            if back != before:
                raise InvariantError(
                    f"{self.plan.describe(node)} is not invertible: forward maps {before} to {after}, "
                    f"but backward maps that back to {back}"
                )

    # ----------------------------------------------------------------- helpers
    def zero_grads(self) -> None:
        for ctx in self.contexts:
            ctx.zero_grads()

    def gradients(self, batch: Batch, key: int = 0) -> dict[str, dict[str, np.ndarray]]:
        """The gradient of the key's mean loss with respect to every parameter (a copy)."""
        self.zero_grads()
        self.run_key(batch, key=key, train=True)
        return {
            self.plan.names[i]: {k: v.copy() for k, v in self.contexts[i].grads.items()}
            for i, p in enumerate(self.plan.parameterized)
            if p
        }

    def params(self) -> dict[str, dict[str, np.ndarray]]:
        return {
            self.plan.names[i]: {k: v.copy() for k, v in self.contexts[i].params.items()}
            for i, p in enumerate(self.plan.parameterized)
            if p
        }

    def update(self) -> None:
        """Every parameterized node steps its optimizer on what it holds (the mean over keys)."""
        for i, p in enumerate(self.plan.parameterized):
            ctx = self.contexts[i]
            if p and ctx.n_grads:
                opt = self.plan.optimizers[i]
                assert opt is not None
                opt.step(ctx.params, ctx.grads, ctx.opt_state, 1.0 / len(ctx.grad_keys))
                ctx.reset_grads()
                ctx.version += 1

    def train(
        self, dataset: Dataset, epochs: int = 1, seed: int = 0, shuffle: bool = True, validate: bool = True
    ) -> list[dict[str, Any]]:
        """Synchronous SGD, one key at a time in the runtime's ``sync`` order; returns per-epoch reports."""
        controller = Controller(dataset, "sync", 1, epochs, seed, shuffle, validate)
        actions = controller.start()
        epoch_reports: list[dict[str, Any]] = []
        current: list[dict[str, Any]] = []
        while actions:
            action = actions.pop(0)
            if isinstance(action, Admit):
                info = action.info
                for r in self.run_key(info.batch, key=info.key, train=info.train):
                    current.append({**r, "train": info.train, "epoch": info.epoch})
                actions += controller.on_complete(info.key)
            elif isinstance(action, Flush):
                self.update()
                actions += controller.on_complete(action.flush_id)
            elif isinstance(action, EpochEnd):
                self.average_replicas()
                end_epoch_optimizers(self.plan)
                epoch_reports.append({"epoch": action.epoch, "reports": current})
                current = []
                actions += controller.on_epoch_end()
            elif isinstance(action, Finish):
                break
        return epoch_reports

    def average_replicas(self) -> None:
        average_replicas(self.plan, self.contexts)
