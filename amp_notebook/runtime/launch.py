"""Settings to a running session: what ``train``, :func:`simulate` and ``autoplace`` share.

:func:`build_session` turns a graph, data and a :class:`~amp_notebook.runtime.config.RunConfig` into a
:class:`~amp_notebook.runtime.session.Session` (put at a checkpoint's state when one is given, its engine
chosen by ``config.engine``: :mod:`amp_notebook.engine.choice`);
:func:`backend_for` picks the backend ``config.backend`` names (for threads, the engine's); :func:`result_of` reads a
:class:`~amp_notebook.runtime.result.TrainResult` off a session and its backend. The public ``train`` adds
what belongs to one call (placement ``"auto"``, saving checkpoints, a background run); :func:`simulate`
and the placement search use these pieces directly, so nothing here calls ``train``.

``simulate(graph, data, config, costs)`` runs a session on the simulated backend (virtual time, no
threads) and returns its result: the same result, bit for bit, as ``train(..., backend="simulated")``
with the same settings, since both are these three steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.data.batch import Dataset
from amp_notebook.engine.choice import choose_engine
from amp_notebook.errors import SettingError
from amp_notebook.ir.graph import Graph
from amp_notebook.optim import Optimizer, make_optimizer
from amp_notebook.runtime.checkpoint import Checkpoint, restore
from amp_notebook.runtime.checkpoint_file import CheckpointError
from amp_notebook.runtime.config import AUTO, RunConfig
from amp_notebook.runtime.costs import CostModel
from amp_notebook.runtime.result import TrainResult
from amp_notebook.runtime.session import EpochStats, Session
from amp_notebook.trace.trace import Trace

if TYPE_CHECKING:
    from amp_notebook.runtime.autoplace import AutoPlacement
    from amp_notebook.runtime.backend import Backend
    from amp_notebook.runtime.controller import KeyInfo

Params = dict[str, dict[str, np.ndarray]]
SIMULATE_OPTIONS = ("costs", "params", "on_key_done", "on_epoch")  # simulate's keywords that are not settings


def build_session(
    graph: Graph, dataset: Dataset, config: RunConfig, params: Params | None = None, start: Checkpoint | None = None
) -> tuple[Session, Optimizer]:
    """A session of ``config`` (its placement a strategy or overrides, not ``"auto"``) and its run-wide
    optimizer; at the state of ``start`` when given (whose parameters ``params`` must then be)."""
    if config.placement == AUTO:
        raise SettingError(
            "placement", "placement 'auto' is chosen by train() before the session is built; pass a strategy or "
            "{node: worker} overrides (autoplace(...).placement)"
        )  # fmt: skip
    if start is not None:
        problems = start.problems(graph)  # before the session casts parameters of other shapes
        if problems:
            raise CheckpointError("resume", problems)
    optimizer = make_optimizer(config.optimizer)
    engine = choose_engine(graph, dataset, config)
    session = Session(graph, dataset, config, optimizer, params, engine=engine)
    if start is not None:
        restore(session, start)
    return session, optimizer


def backend_for(session: Session, costs: CostModel | None = None) -> Backend:
    """The backend ``session.config.backend`` names, ready to ``run()``; ``costs`` describe simulated hardware."""
    backend = session.config.backend
    if backend == "simulated":
        if session.engine.native:
            from amp_notebook.engine.simulated import NativeSimulatedBackend

            return NativeSimulatedBackend(session, costs)
        from amp_notebook.runtime.backends.simulated import SimulatedBackend

        return SimulatedBackend(session, costs)
    if backend == "ray":
        from amp_notebook.runtime.backends.ray import RayBackend

        return RayBackend(session, address=session.config.address)
    if session.engine.native:
        from amp_notebook.engine.backend import NativeBackend

        return NativeBackend(session)
    from amp_notebook.runtime.backends.threads import ThreadedBackend

    return ThreadedBackend(session)


def result_of(
    session: Session, runner: Backend, optimizer: Optimizer, auto: AutoPlacement | None = None
) -> TrainResult:
    """The result of ``session`` run on ``runner`` (finished, or so far for a running one)."""
    backend = session.config.backend
    return TrainResult(
        config=session.config,
        optimizer=optimizer.spec(),
        history=session.history,
        wall_s=runner.wall_s,
        train_instances=session.train_instances_done - session.instances_at_start,  # this run's own
        trace=Trace(session.buffers, session.plan.names, runner.origin),
        params=session.params(),
        placement={n: session.plan.owner[i] for i, n in enumerate(session.plan.names)},
        virtual=backend == "simulated",
        backend_stats=runner.stats(),
        session=session,
        nonfinite_skipped=session.nonfinite_skipped,
        auto_placement=auto,
        engine=session.engine.name,
        python_nodes=session.engine.python_nodes if session.engine.native else tuple(session.plan.names),
        restarts=tuple(session.restarts.made),
    )


def simulate(
    graph: Graph,
    data: Dataset,
    config: RunConfig | None = None,
    costs: CostModel | None = None,
    *,
    params: Params | None = None,
    on_key_done: Callable[[KeyInfo], None] | None = None,
    on_epoch: Callable[[EpochStats], bool | None] | None = None,
    **settings: Any,
) -> TrainResult:
    """Train ``graph`` on ``data`` on simulated hardware in virtual time and return the result.

    ``config`` (a :class:`~amp_notebook.runtime.config.RunConfig`, all defaults when None) with ``settings``
    changed by keyword, on the simulated backend whatever its ``backend`` says; ``costs`` describes the
    hardware (a :class:`~amp_notebook.runtime.costs.CostModel`, default the paper's 1 TFLOPS device).
    ``wall_s`` is then the virtual makespan. ``params``, ``on_key_done`` and ``on_epoch`` as for ``train``;
    the placement is a strategy or overrides (``train`` resolves ``"auto"``, by simulating candidates).
    """
    config = RunConfig.from_options(config, settings, "simulate", also=SIMULATE_OPTIONS)
    if config.backend != "simulated":
        config = config.replace(backend="simulated")
    session, optimizer = build_session(graph, data, config, params)
    session.on_key_done = on_key_done
    session.on_epoch = on_epoch
    runner = backend_for(session, costs)
    runner.run()
    return result_of(session, runner, optimizer)


__all__ = ["SIMULATE_OPTIONS", "backend_for", "build_session", "result_of", "simulate"]
