"""Small runs for the fault harnesses: a model, its data and settings, started with hooks installed, and a
census of what a clean run of it does.

:func:`start` builds a session and its threaded backend and lets an ``install(session, backend)`` hook
change them (wrap an op, an optimizer, a worker's step or inbox) before any thread starts;
:func:`wrap_deliveries` routes every message a run moves through a wrapper, at the ``deliver`` argument of
:meth:`~amp_notebook.runtime.worker.Worker.step` (the seam every backend shares) and at the controller's
injections; :func:`census` counts, once per setup, the messages per node and direction (and those with
float payloads), the updates per node and the steps per worker of a clean run, so that a fault can be
placed where a run will reach it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from amp_notebook.data.batch import Dataset
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.message import Message
from amp_notebook.optim import make_optimizer
from amp_notebook.runtime.backends.threads import ThreadedBackend
from amp_notebook.runtime.run import Run
from amp_notebook.runtime.session import RunConfig, Session

MODES = ("amp", "sync", "pipeline")
WATCHDOG_S = 1.0  # the drop and vanish faults are found by the watchdog: keep the campaigns short


@dataclass(frozen=True)
class Setup:
    """A small training run to break: the model (mlp or rnn) and the mode."""

    model: str  # mlp | rnn
    mode: str

    def __str__(self) -> str:
        return f"{self.model}/{self.mode}"

    def build(self) -> tuple[Graph, Dataset, RunConfig, dict[str, Any]]:
        """The graph, data, settings (``WATCHDOG_S`` read now) and optimizer of this setup."""
        from amp_notebook import models
        from amp_notebook.data import list_reduction_dataset

        config = RunConfig(workers=2, mode=self.mode, max_active_keys=4, epochs=1, seed=0, watchdog_s=WATCHDOG_S)
        if self.model == "mlp":
            return models.mlp(input_width=64, hidden=16), _digits(), config, {"name": "sgd", "lr": 0.05}
        data = list_reduction_dataset(n_train=300, n_val=60, bucket_size=50, seed=0, max_len=6)
        return models.rnn(hidden=16, embedding_dim=8), data, config, {"name": "adam", "lr": 3e-3}


@cache
def _digits() -> Dataset:
    from amp_notebook.data import load_digits_dataset

    return load_digits_dataset(batch_size=50, seed=0)


def start(
    setup: Setup, install: Callable[[Session, ThreadedBackend], None] | None = None, **changes: Any
) -> tuple[Run, Session]:
    """A background run of ``setup`` (its settings with ``changes``) with ``install(session, backend)`` applied
    before its threads start."""
    graph, data, config, optimizer = setup.build()
    config = config.replace(**changes) if changes else config
    session = Session(graph, data, config, make_optimizer(optimizer))
    backend = ThreadedBackend(session)
    if install is not None:
        install(session, backend)
    return Run(session, backend, lambda: session), session  # type: ignore[arg-type,return-value]


@dataclass
class Census:
    """What a clean run of a setup does: messages handled per (node, direction) and updates per node."""

    messages: Counter[tuple[str, int]]  # (node, direction): delivered or injected messages
    floats: Counter[tuple[str, int]]  # the same, counting only float payloads (where a NaN can go)
    updates: dict[str, int]
    steps: list[int]  # messages handled per worker thread


@cache
def census(setup: Setup) -> Census:
    messages: Counter[tuple[str, int]] = Counter()
    floats: Counter[tuple[str, int]] = Counter()
    backend_of: list[ThreadedBackend] = []

    def count(session: Session, backend: ThreadedBackend) -> None:
        backend_of.append(backend)
        names = session.plan.names

        def counting(real: Callable[..., None]) -> Callable[..., None]:
            def deliver(msgs: list[Message], *at: float) -> None:  # a step's deliver has a time, inject not
                for m in msgs:
                    messages[names[m.node], m.direction] += 1
                    if is_float(m.payload):
                        floats[names[m.node], m.direction] += 1
                real(msgs, *at)

            return deliver

        wrap_deliveries(backend, counting)

    run, session = start(setup, count)
    run.wait()
    plan = session.plan
    updates = {plan.names[i]: session.contexts[i].version for i, p in enumerate(plan.parameterized) if p}
    return Census(messages, floats, updates, [loop.handled for loop in backend_of[0].loops])


def wrap_deliveries(backend: ThreadedBackend, wrap: Callable[[Callable[..., None]], Callable[..., None]]) -> None:
    """Route every message a run moves through ``wrap(deliver)``: those each worker's step hands on (the
    ``deliver`` argument of :meth:`~amp_notebook.runtime.worker.Worker.step`, the one seam every backend
    shares) and those the controller injects."""
    for loop in backend.loops:
        real_step = loop.worker.step

        def step(
            bundle: list[Message], depth: int, timer: Any, ledger: Any, deliver: Any, _real: Any = real_step
        ) -> Any:
            return _real(bundle, depth, timer, ledger, wrap(deliver))

        loop.worker.step = step  # type: ignore[method-assign]
    backend.inject = wrap(backend.inject)  # type: ignore[method-assign]


def is_float(payload: Any) -> bool:
    return isinstance(payload, np.ndarray) and payload.dtype.kind == "f"


__all__ = ["MODES", "WATCHDOG_S", "Census", "Setup", "census", "start", "wrap_deliveries"]
