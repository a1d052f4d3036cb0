"""``train(graph, dataset, config, **settings)``: validate, place, compile, run on a backend, and report.

The run's settings are a :class:`~amp_notebook.runtime.config.RunConfig` (every one of them also a keyword
of ``train``); the result (:class:`~amp_notebook.runtime.result.TrainResult`) carries the per-epoch history
(loss, accuracy), throughput, the staleness of every gradient, each worker's utilization, the full trace
and the final parameters. ``train`` adds to :mod:`~amp_notebook.runtime.launch` (settings to a session on
a backend) what belongs to one call: placement ``"auto"``, saving checkpoints, running in the background.

Checkpoints (:mod:`amp_notebook.runtime.checkpoint`): ``train(..., checkpoint=path)`` saves one every
``checkpoint_every`` epochs and when the run ends; ``result.save_checkpoint(path)`` saves a finished run;
``train(graph, data, resume=checkpoint, ...)`` goes on from one with the settings given, and
``resume(checkpoint, data, epochs=...)`` with the checkpoint's own settings (``epochs`` counts the
checkpoint's epochs too).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.data.batch import Dataset
from amp_notebook.errors import SettingError
from amp_notebook.ir.graph import Graph
from amp_notebook.runtime.autoplace import autoplace
from amp_notebook.runtime.checkpoint import Checkpoint, capture, load_checkpoint
from amp_notebook.runtime.config import AUTO, BACKENDS, RunConfig
from amp_notebook.runtime.costs import CostModel
from amp_notebook.runtime.launch import backend_for, build_session, result_of
from amp_notebook.runtime.result import TrainResult
from amp_notebook.runtime.session import EpochStats, Session

if TYPE_CHECKING:
    from amp_notebook.runtime.controller import KeyInfo
    from amp_notebook.runtime.run import Run

BACKGROUND_BACKENDS = ("threads", "ray")


def train(
    graph: Graph,
    dataset: Dataset,
    config: RunConfig | None = None,
    *,
    params: dict[str, dict[str, np.ndarray]] | None = None,
    costs: CostModel | None = None,
    on_key_done: Callable[[KeyInfo], None] | None = None,
    on_epoch: Callable[[EpochStats], bool | None] | None = None,
    background: bool = False,
    resume: Checkpoint | str | Path | None = None,
    checkpoint: str | Path | None = None,
    **settings: Any,
) -> TrainResult | Run:
    """Train ``graph`` on ``dataset`` and return a :class:`TrainResult`.

    The run's settings are ``config`` (a :class:`~amp_notebook.runtime.config.RunConfig`, all defaults when
    None) with any of them changed by keyword: ``train(g, data, mode="sync", epochs=3)`` and
    ``train(g, data, config, epochs=3)`` both work; every setting is listed below. The other keywords
    belong to this call:

    ``params`` starts from given parameters (``graph.init_params(seed)`` otherwise).
    ``costs`` (a :class:`~amp_notebook.runtime.costs.CostModel`, default the paper's 1 TFLOPS device)
    describes the hardware of ``backend="simulated"``, which runs in virtual time: then ``wall_s`` is the
    virtual makespan and ``virtual`` is True (:func:`~amp_notebook.runtime.launch.simulate` does the same).
    ``on_key_done(info)`` is called as each key completes; ``on_epoch(stats)`` after each epoch, and
    returning True stops the run there.
    ``background=True`` returns a :class:`~amp_notebook.runtime.run.Run` at once and trains in background
    threads: pause, resume, stop or retune it live, ``wait()`` for the result.
    ``resume`` (a :class:`~amp_notebook.runtime.checkpoint.Checkpoint` or its path) goes on from a checkpoint:
    its parameters, node versions, optimizer state, data position, RNG and history, with the settings of this
    call (``epochs`` counts the checkpoint's epochs too); a checkpoint that does not fit the graph or data
    raises :class:`~amp_notebook.runtime.checkpoint_file.CheckpointError` listing every mismatch.
    ``checkpoint=path`` saves one there every ``checkpoint_every`` epochs and when the run ends.

    Notes on some settings. ``mode`` is ``amp`` (asynchronous: keep ``max_active_keys`` keys in flight,
    nodes update locally after ``min_update_frequency`` gradients), ``sync`` (one key at a time, update after
    each) or ``pipeline`` (fill ``max_active_keys`` keys, drain, update all). ``placement`` is a strategy
    (``"round_robin"``, the default, ``"balanced"``: contiguous cost-balanced stages, or ``"auto"``: the
    fastest of several candidates on the simulator, see :mod:`~amp_notebook.runtime.autoplace`; its search
    takes seconds before the run starts, background runs included) or a dict of node -> worker overrides.
    ``priority`` orders each worker's inbox across directions: ``"backward_first"`` (the paper), ``"fifo"``,
    or ``"light_first"`` (messages of nodes without parameters first, then backward first; the default with 2
    or more workers on threads or Ray, backward_first otherwise); ``order`` within a direction:
    ``"oldest_key"`` (the key admitted earliest first) or ``"arrival"``.
    ``max_bundle`` lets a node take up to that many waiting messages (of different keys, same port and
    direction) and run them as one call: one int for every node or ``{node: int}``; 1 (the default) runs
    every message alone. Results are those of the messages one by one (to the rounding of a larger matrix
    product); staleness, credits and caches stay per message.
    ``trace_capacity`` bounds the trace rows kept per worker (the most recent; None keeps all); metrics
    stay exact over the whole run. ``backend="ray"`` runs each worker as a Ray actor
    (:mod:`amp_notebook.runtime.backends.ray`), on a local Ray started for the purpose or on the cluster at
    ``address`` (``"host:port"`` of ``ray start --head``).
    ``watchdog_s``: if keys are in flight and no message is handled for this long, the run stops with a
    :class:`~amp_notebook.runtime.watchdog.StuckRunError` that diagnoses it (None: wait forever).
    ``on_nonfinite``: a NaN or infinity in an input, a loss or a gradient raises a
    :class:`~amp_notebook.runtime.numerics.NonFiniteError` naming the node and key before any parameter is
    updated with it (``"raise"``), or skips the key and counts it (``"skip"``; ``nonfinite_skipped``), or is
    not looked for (``"ignore"``).
    """
    config = RunConfig.from_options(config, settings, "train", also=CALL_OPTIONS)
    backend = config.backend
    if costs is not None and backend != "simulated":
        raise SettingError(
            "backend", f"costs= describes simulated hardware; it needs backend='simulated', got {backend!r}"
        )
    if background and backend not in BACKGROUND_BACKENDS:
        raise SettingError(
            "backend",
            f"background=True runs on the {' or '.join(BACKGROUND_BACKENDS)} backend; got backend={backend!r}, "
            "drop one of them",
        )
    start: Checkpoint | None = None
    if resume is not None:
        start = resume if isinstance(resume, Checkpoint) else load_checkpoint(resume)
        if params is not None:
            raise SettingError("params", "params= and resume= both give the parameters; pass one of them")
        params = start.params
    auto = None
    if config.placement == AUTO:  # resolved to a placement dict before the session is built
        simulated = (costs or CostModel()) if backend == "simulated" else None
        auto = autoplace(graph, dataset, config, params=params, costs=simulated)
        config = config.replace(placement=auto.placement)
    session, optimizer = build_session(graph, dataset, config, params, start)
    session.on_key_done = on_key_done
    session.on_epoch = (
        on_epoch if checkpoint is None else _saving_every(session, on_epoch, checkpoint, config.checkpoint_every)
    )
    runner = backend_for(session, costs)

    def result() -> TrainResult:
        return result_of(session, runner, optimizer, auto)

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


# train's own keywords (the rest are settings); an unknown keyword is refused with both lists
CALL_OPTIONS = tuple(name for name in inspect.signature(train).parameters if name not in ("graph", "dataset",
                     "config", "settings"))  # fmt: skip


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


def _settings_doc() -> str:
    """The settings list appended to ``train``'s docstring, from the declarations."""
    lines = ["", "    Settings (:class:`~amp_notebook.runtime.config.RunConfig` fields; keyword = default):", ""]
    for s in RunConfig.settings():
        lines.append(f"    * ``{s.name}={s.default!r}``: {s.describe()}; {s.doc}.")
    return "\n".join(lines) + "\n"


train.__doc__ = (train.__doc__ or "") + _settings_doc()

__all__ = ["BACKENDS", "BACKGROUND_BACKENDS", "CALL_OPTIONS", "TrainResult", "resume", "train"]
