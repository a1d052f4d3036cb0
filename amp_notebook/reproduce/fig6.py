"""The paper's Fig. 6: validation accuracy against training time, synchronous vs asynchronous, per model.

Each model of :mod:`amp_notebook.reproduce.workloads` trains twice on this machine's 2 worker threads, from
the same initial weights, for the same number of epochs, validating after each: mode ``sync`` (one key in
flight, every node updating after each key: plain SGD) and mode ``amp`` (``AMP_KEYS[model]`` keys in
flight, nodes updating locally after ``min_update_frequency`` gradients, as the paper runs them). Both use
``placement="auto"`` and ``fifo`` inboxes (the placement search is not in the timed wall clock). A curve
is the validation accuracy (the GG-NN's regression: the validation loss) after each epoch against the wall
time at that epoch's end; ``time_to_target_s`` is the first epoch end that meets the model's target
(``Workload.target``), or None.

What the paper shows is that AMP reaches the target in about as many epochs as sync, each epoch shorter.
Here the second half holds with 2 cores at most 2x; the first depends on how much staleness the model
tolerates (``staleness`` per run). This machine is shared: times are single runs and noisy (the median
of several runs is Table 2's business); the curves' shapes, not their last digits, are the result.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from amp_notebook.reproduce.workloads import DEFAULT_ENGINE, Workload, available
from amp_notebook.runtime.session import EpochStats
from amp_notebook.runtime.train import TrainResult, train

MODELS = ("mlp", "rnn", "rnn-2-replicas", "tree-lstm", "ggsnn", "bilstm-tagger")
AMP_KEYS: dict[str, int] = {"mlp": 4, "rnn": 4, "rnn-2-replicas": 4, "tree-lstm": 16, "ggsnn": 8, "bilstm-tagger": 16}
EPOCHS: dict[str, int] = {"mlp": 20, "rnn": 6, "rnn-2-replicas": 6, "tree-lstm": 4, "ggsnn": 4, "bilstm-tagger": 4}
QUICK_EPOCHS = 2
SETTINGS: dict[str, Any] = {"workers": 2, "placement": "auto", "priority": "fifo"}


def run(
    quick: bool = False, seed: int = 0, models: Sequence[str] = MODELS, *, data_root: str | Path | None = None,
    engine: str = DEFAULT_ENGINE,
) -> dict[str, Any]:  # fmt: skip
    """Sync and AMP curves for every model; ``quick``: a few keys and 2 epochs (a smoke test)."""
    curves: dict[str, dict[str, Any]] = {}
    notes: dict[str, str] = {}
    data: dict[str, str] = {}
    for w in available([m for m in models if m in AMP_KEYS], quick, seed, notes, data_root=data_root, engine=engine):
        data[w.name] = w.data_source
        name = w.name
        epochs = QUICK_EPOCHS if quick else EPOCHS[name]
        params = w.graph.init_params(seed, np.dtype("float32"))
        settings = {**SETTINGS, "placement": "balanced"} if quick else SETTINGS  # --quick: no placement search
        curves[name] = {
            "target": None if w.target is None else w.target.value,
            "metric": "val_accuracy" if w.target is None else w.target.metric,
            "layout": w.layout,
            "epochs": epochs,
            "sync": _curve(w, "sync", 1, epochs, params, seed, settings),
            "amp": _curve(w, "amp", AMP_KEYS[name], epochs, params, seed, settings),
        }
    return {"curves": curves, "settings": {**SETTINGS, "amp_max_active_keys": AMP_KEYS}, "notes": notes,
            "data": data, "quick": quick}  # fmt: skip


def _curve(
    w: Workload, mode: str, keys: int, epochs: int, params: Any, seed: int, settings: dict[str, Any]
) -> dict[str, Any]:
    points: list[EpochStats] = []

    def on_epoch(stats: EpochStats) -> None:
        points.append(stats)
        acc = "n/a" if stats.val_accuracy is None else f"{stats.val_accuracy:.3f}"
        print(f"fig6: {w.name} {mode} epoch {stats.epoch + 1}: val accuracy {acc} at {stats.end_s:.1f}s",
              file=sys.stderr, flush=True)  # fmt: skip

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        r = train(w.graph, w.data, mode=mode, max_active_keys=keys, epochs=epochs, seed=seed, optimizer=w.optimizer,
                  params=params, trace=True, on_epoch=on_epoch, **{**w.settings, **settings})  # fmt: skip
    assert isinstance(r, TrainResult)
    time_s = [p.end_s for p in points]
    accuracy = [p.val_accuracy for p in points]
    reached = next((p.end_s for p in points if w.target is not None and w.target.reached(p)), None)
    return {
        "mode": mode, "engine": r.engine, "max_active_keys": keys, "time_s": time_s, "val_accuracy": accuracy,
        "val_loss": [p.val_loss for p in points],
        "train_loss": [p.train_loss for p in points], "time_to_target_s": reached,
        "epochs_to_target": None if reached is None else time_s.index(reached) + 1,
        "train_instances_per_s": r.train_instances_per_s, "staleness": r.staleness(),
        "placement": r.auto_placement.chosen.name if r.auto_placement else None,
    }  # fmt: skip


__all__ = ["AMP_KEYS", "EPOCHS", "run"]
