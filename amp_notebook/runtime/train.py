"""``train(graph, dataset, ...)``: validate, place, compile, run on a backend, and report.

The result carries the per-epoch history (loss, accuracy), throughput, the staleness of every gradient,
each worker's utilization, the full trace and the final parameters.

Checkpoints (:mod:`amp_notebook.runtime.checkpoint`): ``train(..., checkpoint=path)`` saves one every
``checkpoint_every`` epochs and when the run ends; ``result.save_checkpoint(path)`` saves a finished run;
``train(graph, data, resume=checkpoint, ...)`` goes on from one with the settings given, and
``resume(checkpoint, data, epochs=...)`` with the checkpoint's own settings (``epochs`` counts the
checkpoint's epochs too).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.data.batch import Dataset
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.serialize import save_params
from amp_notebook.optim import DEFAULT_OPTIMIZER, Optimizer, make_optimizer
from amp_notebook.runtime.checkpoint import Checkpoint, capture, load_checkpoint, restore
from amp_notebook.runtime.costs import CostModel
from amp_notebook.runtime.session import EpochStats, RunConfig, Session, default_max_bundle
from amp_notebook.runtime.watchdog import DEFAULT_WATCHDOG_S, Watchdog
from amp_notebook.trace.buffers import DEFAULT_CAPACITY
from amp_notebook.trace.metrics import staleness_summary, utilization
from amp_notebook.trace.trace import Trace

if TYPE_CHECKING:
    from amp_notebook.runtime.autoplace import AutoPlacement
    from amp_notebook.runtime.run import Run
    from amp_notebook.ui.report import Report

BACKENDS = ("threads", "simulated", "ray")
BACKGROUND_BACKENDS = ("threads", "ray")


@dataclass
class TrainResult:
    config: RunConfig
    optimizer: dict[str, Any]
    history: list[EpochStats]
    wall_s: float
    train_instances: int
    trace: Trace
    params: dict[str, dict[str, np.ndarray]]
    placement: dict[str, int]
    virtual: bool = False  # wall_s is the simulated backend's virtual makespan, not measured time
    backend_stats: dict[str, Any] = field(default_factory=dict)  # simulated: messages, bytes per link, bandwidth
    session: Session | None = field(default=None, repr=False)  # the finished run's state, for checkpoints
    nonfinite_skipped: int = 0  # keys skipped for NaN/inf (on_nonfinite="skip"), over all epochs
    auto_placement: AutoPlacement | None = None  # placement="auto": the choice and what it was judged by

    @property
    def val_accuracy(self) -> list[float | None]:
        return [e.val_accuracy for e in self.history]

    @property
    def train_instances_per_s(self) -> float:
        return self.train_instances / self.wall_s if self.wall_s > 0 else 0.0

    def staleness(self) -> dict[str, float]:
        return staleness_summary(self.trace)

    def utilization(self) -> list[float]:
        return utilization(self.trace, self.wall_s)

    @property
    def placement_strategy(self) -> str:
        """``auto``, a strategy name, or ``overrides`` (a dict of node -> worker)."""
        if self.auto_placement is not None:
            return "auto"
        return self.config.placement_strategy if not self.config.placement else "overrides"

    def summary(self, **extra: Any) -> dict[str, Any]:
        """The JSON-ready summary the CLI prints (``amp-notebook train --json``)."""
        c = self.config
        st = self.staleness()
        return {
            **extra,
            "mode": c.mode,
            "workers": c.workers,
            "max_active_keys": 1 if c.mode == "sync" else c.max_active_keys,
            "min_update_frequency": c.min_update_frequency,
            "epochs": c.epochs,
            "seed": c.seed,
            "optimizer": self.optimizer,
            "wall_s": self.wall_s,
            "train_instances": self.train_instances,
            "train_instances_per_s": self.train_instances_per_s,
            "val_accuracy": self.val_accuracy,
            "val_loss": [e.val_loss for e in self.history],
            "train_loss": [e.train_loss for e in self.history],
            "staleness": {"mean": st["mean"], "p95": st["p95"], "max": st["max"]},
            "utilization": self.utilization(),
            "placement": self.placement,
            "placement_strategy": self.placement_strategy,
            "priority": c.priority,
            "order": c.order,
            "max_bundle": c.max_bundle,
            "nonfinite_skipped": self.nonfinite_skipped,
            **({"autoplace": {**self.auto_placement.summary(), "measured_per_s": self.train_instances_per_s}}
               if self.auto_placement else {}),
            **({"virtual": True, "bandwidth_bits_per_s": self.backend_stats.get("bandwidth_bits_per_s", 0.0)}
               if self.virtual else {}),
        }  # fmt: skip

    def save_params(self, path: str | Path) -> None:
        save_params(self.params, path)

    def checkpoint(self, meta: dict[str, Any] | None = None) -> Checkpoint:
        """The finished run's state: resume it with ``train(..., resume=...)`` or ``resume(...)``."""
        session = self.session
        if session is None or not session.controller.finished:
            raise RuntimeError(
                "checkpoint: this result is a view of a run still going; save a running run with run.save(path)"
            )
        return capture(session, meta)

    def save_checkpoint(self, path: str | Path, meta: dict[str, Any] | None = None) -> Path:
        """Write the finished run's checkpoint to ``path`` (an .npz, atomically); ``meta``: your notes (JSON)."""
        return self.checkpoint(meta).save(path)

    def write_trace(self, path: str | Path) -> None:
        self.trace.to_chrome(path)

    def report(self) -> Report:
        """Plotly figures and the summary table of this run; ``.write_html(path)`` makes one HTML file."""
        from amp_notebook.ui.report import Report

        return Report(self)

    def __repr__(self) -> str:
        return f"TrainResult({json.dumps(self.summary(), default=str)[:300]}...)"


def train(
    graph: Graph,
    dataset: Dataset,
    *,
    workers: int = 2,
    mode: str = "amp",
    max_active_keys: int = 4,
    min_update_frequency: int = 1,
    optimizer: Optimizer | dict[str, Any] | str = DEFAULT_OPTIMIZER,
    epochs: int = 1,
    seed: int = 0,
    dtype: str = "float32",
    trace: bool = True,
    validate: bool = True,
    shuffle: bool = True,
    params: dict[str, dict[str, np.ndarray]] | None = None,
    placement: dict[str, int] | str | None = None,
    priority: str = "backward_first",
    order: str = "oldest_key",
    max_bundle: int | dict[str, int] | None = None,
    backend: str = "threads",
    costs: Any = None,
    on_key_done: Callable[[Any], None] | None = None,
    on_epoch: Callable[[EpochStats], bool | None] | None = None,
    trace_capacity: int | None = DEFAULT_CAPACITY,
    background: bool = False,
    address: str | None = None,
    resume: Checkpoint | str | Path | None = None,
    checkpoint: str | Path | None = None,
    checkpoint_every: int = 1,
    watchdog_s: float | None = DEFAULT_WATCHDOG_S,
    on_nonfinite: str = "raise",
) -> TrainResult | Run:
    """Train ``graph`` on ``dataset`` and return a :class:`TrainResult`.

    ``mode`` is ``amp`` (asynchronous: keep ``max_active_keys`` keys in flight, nodes update locally
    after ``min_update_frequency`` gradients), ``sync`` (one key at a time, update after each) or
    ``pipeline`` (fill ``max_active_keys`` keys, drain, update all). ``params`` starts from given
    parameters (``graph.init_params(seed)`` otherwise). ``placement`` is a strategy (``"round_robin"``, the
    default, ``"balanced"``: contiguous cost-balanced stages, or ``"auto"``: the fastest of several candidates
    on the simulator, see :mod:`~amp_notebook.runtime.autoplace`; its search takes seconds before the run
    starts, background runs included) or a dict of node -> worker overrides.
    ``priority`` orders each worker's inbox across directions: ``"backward_first"`` (the paper) or ``"fifo"``;
    ``order`` within a direction: ``"oldest_key"`` (the key admitted earliest first) or ``"arrival"``.
    ``max_bundle`` lets a node take up to that many waiting messages (of different keys, same port and
    direction) and run them as one call: one int for every node or ``{node: int}``; 1 runs every message
    alone. Results are those of the messages one by one (to the rounding of a larger matrix product);
    staleness, credits and caches stay per message. By default (None) ``amp`` runs on threads or Ray bundle
    up to 16 messages, and ``sync``/``pipeline`` runs and the simulator none, so that those repeat bit for
    bit (:func:`~amp_notebook.runtime.session.default_max_bundle`).
    ``optimizer`` is a name (default ``"adam"``, learning rate 1e-3), a dict ``{"name": ..., "lr": ...,
    "clip_norm": ..., "lr_decay": ...}`` or an :class:`~amp_notebook.optim.Optimizer`.
    ``on_epoch(stats)`` is called after each epoch; returning True stops the run there.
    ``backend="simulated"`` runs on simulated hardware described by ``costs`` (a
    :class:`~amp_notebook.runtime.costs.CostModel`, default the paper's 1 TFLOPS device) in virtual time:
    then ``wall_s`` is the virtual makespan and ``virtual`` is True.
    ``trace_capacity`` bounds the trace rows kept per worker (the most recent; None keeps all); metrics
    stay exact over the whole run. ``background=True`` returns a :class:`~amp_notebook.runtime.run.Run`
    at once and trains in background threads: pause, resume, stop or retune it live, ``wait()`` for the result.
    ``backend="ray"`` runs each worker as a Ray actor (:mod:`amp_notebook.runtime.backends.ray`), on a local
    Ray started for the purpose or on the cluster at ``address`` (``"host:port"`` of ``ray start --head``).
    ``resume`` (a :class:`~amp_notebook.runtime.checkpoint.Checkpoint` or its path) goes on from a checkpoint:
    its parameters, node versions, optimizer state, data position, RNG and history, with the settings of this
    call (``epochs`` counts the checkpoint's epochs too); a checkpoint that does not fit the graph or data
    raises :class:`~amp_notebook.runtime.checkpoint_file.CheckpointError` listing every mismatch.
    ``checkpoint=path`` saves one there every ``checkpoint_every`` epochs and when the run ends.
    ``watchdog_s``: if keys are in flight and no message is handled for this long, the run stops with a
    :class:`~amp_notebook.runtime.watchdog.StuckRunError` that diagnoses it (None: wait forever).
    ``on_nonfinite``: a NaN or infinity in an input, a loss or a gradient raises a
    :class:`~amp_notebook.runtime.numerics.NonFiniteError` naming the node and key before any parameter is
    updated with it (``"raise"``), or skips the key and counts it (``"skip"``; ``nonfinite_skipped``), or is
    not looked for (``"ignore"``).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if costs is not None and backend != "simulated":
        raise ValueError(f"costs= describes simulated hardware; it needs backend='simulated', got {backend!r}")
    if address is not None and backend != "ray":
        raise ValueError(f"address= names a Ray cluster; it needs backend='ray', got {backend!r}")
    if background and backend not in BACKGROUND_BACKENDS:
        raise ValueError(
            f"background=True runs on the {' or '.join(BACKGROUND_BACKENDS)} backend; got backend={backend!r}, "
            "drop one of them"
        )
    if watchdog_s is not None:
        Watchdog(watchdog_s)  # checks the value here, in the caller's thread
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise ValueError(f"checkpoint_every: expected a number of epochs >= 1, got {checkpoint_every!r}")
    start: Checkpoint | None = None
    if resume is not None:
        start = resume if isinstance(resume, Checkpoint) else load_checkpoint(resume)
        if params is not None:
            raise ValueError("params= and resume= both give the parameters; pass one of them")
        params = start.params
    opt = make_optimizer(optimizer)
    if max_bundle is None:
        max_bundle = default_max_bundle(mode, backend)
    auto = None
    if placement == "auto":  # resolved to a placement dict before the session is built
        from amp_notebook.runtime.autoplace import autoplace

        auto = autoplace(
            graph, dataset, workers=workers, mode=mode, max_active_keys=max_active_keys,
            min_update_frequency=min_update_frequency, priority=priority, order=order, max_bundle=max_bundle,
            optimizer=opt.spec(), params=params, dtype=dtype, seed=seed,
            costs=(costs or CostModel()) if backend == "simulated" else None,
        )  # fmt: skip
        placement = auto.placement
    config = RunConfig(
        workers=workers, mode=mode, max_active_keys=max_active_keys, min_update_frequency=min_update_frequency,
        epochs=epochs, seed=seed, dtype=dtype, trace=trace, validate=validate, shuffle=shuffle,
        placement=dict(placement) if isinstance(placement, dict) else {},
        placement_strategy=placement if isinstance(placement, str) else "round_robin", priority=priority,
        order=order, max_bundle=dict(max_bundle) if isinstance(max_bundle, dict) else max_bundle,
        watchdog_s=watchdog_s, on_nonfinite=on_nonfinite,
    )  # fmt: skip
    config.trace_capacity = trace_capacity
    if start is not None:
        problems = start.problems(graph)  # before the session casts parameters of other shapes
        if problems:
            from amp_notebook.runtime.checkpoint_file import CheckpointError

            raise CheckpointError("resume", problems)
    session = Session(graph, dataset, config, opt, params)
    if start is not None:
        restore(session, start)
    session.on_key_done = on_key_done
    session.on_epoch = (
        on_epoch if checkpoint is None else _saving_every(session, on_epoch, checkpoint, checkpoint_every)
    )
    runner: Any
    if backend == "simulated":
        from amp_notebook.runtime.backends.simulated import SimulatedBackend

        runner = SimulatedBackend(session, costs)
    elif backend == "ray":
        from amp_notebook.runtime.backends.ray import RayBackend

        runner = RayBackend(session, address=address)
    else:
        from amp_notebook.runtime.backends.threads import ThreadedBackend

        runner = ThreadedBackend(session)

    def result() -> TrainResult:
        return TrainResult(
            config=config,
            optimizer=opt.spec(),
            history=session.history,
            wall_s=runner.wall_s,
            train_instances=session.train_instances_done - session.instances_at_start,  # this run's own
            trace=Trace(session.buffers, session.plan.names, runner.origin),
            params=session.params(),
            placement={n: session.plan.owner[i] for i, n in enumerate(session.plan.names)},
            virtual=backend == "simulated",
            backend_stats=runner.stats() if backend in ("simulated", "ray") else {},
            session=session,
            nonfinite_skipped=session.nonfinite_skipped,
            auto_placement=auto,
        )

    def finished(done: TrainResult) -> None:
        if checkpoint is not None:
            done.save_checkpoint(checkpoint)

    if background:
        from amp_notebook.runtime.run import Run

        return Run(session, runner, result, finished)
    runner.run()
    done = result()
    finished(done)
    return done


def _saving_every(
    session: Session, on_epoch: Callable[[EpochStats], bool | None] | None, path: str | Path, every: int
) -> Callable[[EpochStats], bool | None]:
    """The user's epoch callback, then a checkpoint every ``every`` epochs (no key is in flight at an epoch end)."""

    def on_epoch_then_save(stats: EpochStats) -> bool | None:
        stop = on_epoch(stats) if on_epoch is not None else None
        if (stats.epoch + 1) % every == 0:
            capture(session).save(path)
        return stop

    return on_epoch_then_save


def resume(checkpoint: Checkpoint | str | Path, dataset: Dataset, *, epochs: int, **changes: Any) -> TrainResult | Run:
    """Go on training a checkpoint's run on ``dataset`` until ``epochs`` epochs in all, with the checkpoint's
    graph and settings (mode, workers, optimizer, dtype, ...) except those in ``changes`` (any ``train``
    keyword, ``background=True`` included)."""
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    options = {**ckpt.train_options(), **changes, "epochs": epochs}
    return train(ckpt.graph, dataset, resume=ckpt, **options)
