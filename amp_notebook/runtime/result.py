"""``TrainResult``: what a finished run leaves (``train`` returns it, ``Run.wait()`` too).

The result carries the run's settings (a :class:`~amp_notebook.runtime.config.RunConfig`), the per-epoch
history (loss, accuracy), throughput, the staleness of every gradient, each worker's utilization, the full
trace and the final parameters; a finished run's session stays attached so that it can be checkpointed.

The report hook. A result's figures and HTML report are drawn by :mod:`amp_notebook.ui.report` (plotly,
an optional dependency). The runtime never imports the UI at module level: :meth:`TrainResult.report` is
the one place in the runtime that reaches it, importing it when a report is asked for (``Run.report``
goes through it too).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.errors import RunStateError
from amp_notebook.ir.serialize import save_params
from amp_notebook.runtime.checkpoint import Checkpoint, capture
from amp_notebook.runtime.config import RunConfig
from amp_notebook.runtime.restart import Restart
from amp_notebook.runtime.session import EpochStats, Session
from amp_notebook.trace.metrics import staleness_summary, utilization
from amp_notebook.trace.trace import Trace

if TYPE_CHECKING:
    from amp_notebook.runtime.autoplace import AutoPlacement
    from amp_notebook.ui.report import Report


@dataclass
class TrainResult:
    """What a finished run leaves: its settings, per-epoch history, trace, final parameters and placement.

    Owns plain data, computed once the run has ended, plus the finished session (to checkpoint the run) and
    backend figures. It never runs anything: metrics are read from the trace when asked, and the report is
    drawn by the UI through :meth:`report`, the runtime's one reach into it (module docstring)."""

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
    engine: str = "python"  # what ran the workers: "native" worker loops or the Python engine
    python_nodes: tuple[str, ...] = ()  # nodes whose op ran in Python (every node on the Python engine)
    restarts: tuple[Restart, ...] = ()  # max_failures: each restart after a lost worker (runtime/restart.py)

    @property
    def val_accuracy(self) -> list[float | None]:
        """Validation accuracy per epoch (None where the loss counts no correct answers or nothing validated)."""
        return [e.val_accuracy for e in self.history]

    @property
    def val_loss(self) -> list[float | None]:
        """Validation loss per epoch, the mean over instances (None where nothing validated)."""
        return [e.val_loss for e in self.history]

    @property
    def train_instances_per_s(self) -> float:
        return self.train_instances / self.wall_s if self.wall_s > 0 else 0.0

    def staleness(self) -> dict[str, float]:
        return staleness_summary(self.trace)

    def utilization(self) -> list[float]:
        return utilization(self.trace, self.wall_s)

    @property
    def worker_time(self) -> list[dict[str, Any]] | None:
        """Where each worker thread's time went, on the native engine (None on the others): per worker
        ``loop_s`` (its life), ``ops_s`` (inside ops), ``engine_s`` (the engine's own work between them),
        ``waiting_s`` (nothing to take: spinning or asleep), ``asleep_s``, ``sleeps``, ``bundles``,
        ``messages``, ``cpu_s`` (the thread's CPU time) and ``no_core_s`` (neither asleep nor on a core: another
        thread had its core, or it waited for a lock; part of the other shares; both None in a report of a run
        still going). Counted by the worker loops themselves, with or without a trace."""
        return self.backend_stats.get("worker_time")

    @property
    def steal_share(self) -> float | None:
        """The share of the CPUs' time the host of this (virtual) machine took while the run went, 0 to 1
        (:mod:`~amp_notebook.runtime.steal`); None where it is unknown: off Linux, on simulated hardware or Ray,
        or a run shorter than a clock tick."""
        return self.backend_stats.get("steal_share")

    @property
    def placement_strategy(self) -> str:
        """``auto``, a strategy name, or ``overrides`` (a dict of node -> worker)."""
        if self.auto_placement is not None:
            return "auto"
        return self.config.placement_strategy if not self.config.placement_overrides else "overrides"

    def summary(self, **extra: Any) -> dict[str, Any]:
        """The JSON-ready summary the CLI prints (``amp-notebook train --json``): ``extra``, every setting of
        the run, then what the run did. ``placement`` is where each node ran, ``optimizer`` the full spec,
        ``priority_used`` the inbox priority the workers used (``priority``, or its default for the worker count)."""
        c = self.config
        st = self.staleness()
        settings = c.as_json(lambda s: s.name != "placement")
        return {
            **extra,
            **settings,
            "max_active_keys": 1 if c.mode == "sync" else c.max_active_keys,
            "optimizer": self.optimizer,
            "wall_s": self.wall_s,
            "train_instances": self.train_instances,
            "train_instances_per_s": self.train_instances_per_s,
            "val_accuracy": self.val_accuracy,
            "val_loss": self.val_loss,
            "train_loss": [e.train_loss for e in self.history],
            "staleness": {"mean": st["mean"], "p95": st["p95"], "max": st["max"]},
            "utilization": self.utilization(),
            "worker_time": self.worker_time,
            "steal_share": self.steal_share,
            "placement": self.placement,
            "placement_strategy": self.placement_strategy,
            "priority_used": c.inbox_priority,
            "nonfinite_skipped": self.nonfinite_skipped,
            "restarts": len(self.restarts),
            "restart_causes": [r.as_dict() for r in self.restarts],
            "engine_used": self.engine,
            "python_nodes": list(self.python_nodes),
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
            raise RunStateError(
                "checkpoint: this result is a view of a run still going; save a running run with run.save(path)"
            )
        return capture(session, meta)

    def save_checkpoint(self, path: str | Path, meta: dict[str, Any] | None = None) -> Path:
        """Write the finished run's checkpoint to ``path`` (an .npz, atomically); ``meta``: your notes (JSON)."""
        return self.checkpoint(meta).save(path)

    def write_trace(self, path: str | Path) -> None:
        self.trace.to_chrome(path)

    def report(self) -> Report:
        """Plotly figures and the summary table of this run; ``.write_html(path)`` makes one HTML file.
        The runtime's one hook into the UI (module docstring)."""
        from amp_notebook.ui.report import Report

        return Report(self)

    def __repr__(self) -> str:
        return f"TrainResult({json.dumps(self.summary(), default=str)[:300]}...)"


def worker_time_text(times: list[dict[str, Any]]) -> str:
    """One line for the native workers' own time split (:attr:`TrainResult.worker_time`): per worker the shares
    of its life in ops, in the engine's own work and waiting for messages, how often it fell asleep, and the
    share of its life it spent without a core (part of the other three: time another thread had its core)."""
    parts = []
    for t in times:
        life = t["loop_s"] or 1.0
        no_core = f", no core {t['no_core_s'] / life:.0%}" if t.get("no_core_s") is not None else ""
        parts.append(f"w{t['worker']} ops {t['ops_s'] / life:.0%} engine {t['engine_s'] / life:.0%} "
                     f"waiting {t['waiting_s'] / life:.0%} ({t['sleeps']} sleeps){no_core}")  # fmt: skip
    return "; ".join(parts)


__all__ = ["TrainResult", "worker_time_text"]
