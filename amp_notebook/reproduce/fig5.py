"""The paper's Fig. 5: the 8-replica RNN over a grid of min_update_frequency x max_active_keys.

For every grid point the list-reduction RNN with its step Linear replicated 8 times (behind Cond on
``key % 8`` and Phi; the replicas average their parameters at each epoch's end) trains on the simulated
backend until its validation accuracy reaches ``TARGET`` (96%) or ``MAX_EPOCHS`` pass, from the same
initial weights and the same data. Reported per point: epochs to the target, simulated time to the
target (the virtual time at the end of that epoch), the final validation accuracy, gradient staleness
(mean and p95) and training throughput (instances per virtual second).

The simulator runs the real numpy math on a virtual clock, so every point is exact and deterministic:
the same settings give the same curve, bit for bit, on any machine and under any load. The hardware is
the paper's 16 cores, ``COSTS``: each device runs at one core of this project's machine, as measured
once by :func:`~amp_notebook.runtime.costs.calibrate_cpu` (float32 matmul FLOP/s with BLAS on one thread,
and the per-message Python glue of a worker) and frozen here, so that the grid does not move with the
load of the machine that runs it; links are free (shared memory). Placement: round robin, one heavy node
(embedding, the 8 step replicas, the output layer) per device; backward-first inboxes (the paper).

Replicas learn slowly per epoch here. The replicas of a node average their parameters once, at each
epoch's end, so between averages each sees an eighth of the keys and makes an eighth of the updates: in
sync mode (plain SGD, no staleness) the 8-replica RNN reached 56% validation accuracy after 8 epochs of
20,000 lists where the 1-replica RNN reached 85% (simulated, same data and optimizer). 96% then takes far
more epochs than this grid can afford on a 2-core machine (each point runs the real math; ``MAX_EPOCHS``
caps it), so the grid also reports epochs and time to lower accuracies (``THRESHOLDS``, from the same
curves): the comparison across the grid, which is the figure's point, holds at each of them.

The points are independent (each starts from the same weights and data, built from the seed), so the
grid parallelises over processes: ``run(processes=N)`` (``amp-notebook reproduce fig5 --processes N``)
trains N points at once with the same results, and ``run(engine=...)`` trains them on another engine
once one runs the simulated backend's math.

What to look for (the paper's finding): a larger max_active_keys shortens each epoch until the devices
are busy and then only adds staleness; a small min_update_frequency updates often but with stale,
noisy gradients, a large one updates rarely (fewer, staler-in-time steps per epoch), so epochs to the
target rise at both ends: min_update_frequency must be "neither too large nor too small". Time to target
is epochs times epoch length: asynchrony pays while the shorter epochs outweigh the extra epochs.
"""

from __future__ import annotations

import functools
import multiprocessing
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from amp_notebook.data.list_reduction import list_reduction_dataset
from amp_notebook.models.rnn import rnn
from amp_notebook.reproduce.workloads import engine_settings
from amp_notebook.runtime.costs import CostModel
from amp_notebook.runtime.session import EpochStats
from amp_notebook.runtime.train import TrainResult, train

REPLICAS, DEVICES, TARGET = 8, 16, 0.96
THRESHOLDS = (0.5, 0.6, 0.7, TARGET)  # epochs and time to each, from the same curves
MAX_ACTIVE_KEYS = (4, 16, 64)
MIN_UPDATE_FREQUENCY = (1, 10, 50)
MAX_EPOCHS = 20
N_TRAIN, N_VAL = 20_000, 1_000
OPTIMIZER: dict[str, Any] = {"name": "adam", "lr": 3e-3, "clip_norm": 5.0}
# one core of this project's 2-vCPU machine, measured with calibrate_cpu() (median of 5 calls) and frozen
CORE_FLOPS, CORE_OVERHEAD_S = 8.7e10, 1.2e-6
COSTS = CostModel(flops=CORE_FLOPS, message_overhead_s=CORE_OVERHEAD_S)
QUICK: dict[str, Any] = {"max_active_keys": (4, 16), "min_update_frequency": (1, 10), "max_epochs": 2,
                         "n_train": 1_000, "n_val": 200}  # fmt: skip


def run(quick: bool = False, seed: int = 0, *, engine: str = "python", processes: int = 1) -> dict[str, Any]:
    """The grid (row-major: max_active_keys outer); ``quick``: a 2 x 2 grid on a few keys for 2 epochs.

    The points are independent runs from the same initial weights: ``processes`` > 1 trains them in that many
    worker processes at once (each builds the data and the graph from the seed), with the same results as
    one process, point for point. ``engine`` names the engine the points train on (``workloads.ENGINES``)."""
    ks, ms = (QUICK["max_active_keys"], QUICK["min_update_frequency"]) if quick else (MAX_ACTIVE_KEYS,
                                                                                      MIN_UPDATE_FREQUENCY)  # fmt: skip
    max_epochs = QUICK["max_epochs"] if quick else MAX_EPOCHS
    n_train, n_val = (QUICK["n_train"], QUICK["n_val"]) if quick else (N_TRAIN, N_VAL)
    engine_settings(engine)  # refuse an unknown engine before any point runs
    specs = [GridPoint(n_train, n_val, seed, k, m, max_epochs, engine) for k in ks for m in ms]
    if processes > 1:
        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
            grid = list(pool.map(train_point, specs))
    else:
        grid = [train_point(spec) for spec in specs]
    return {
        "grid": grid,
        "max_active_keys": list(ks),
        "min_update_frequency": list(ms),
        "target": TARGET,
        "thresholds": list(THRESHOLDS),
        "max_epochs": max_epochs,
        "settings": {
            "replicas": REPLICAS,
            "devices": DEVICES,
            "n_train": n_train,
            "n_val": n_val,
            "optimizer": OPTIMIZER,
            "placement": "round_robin",
            "priority": "backward_first",
            "costs": COSTS.spec(),
            "engine": engine,
            "processes": processes,
        },
        "quick": quick,
    }


@dataclass(frozen=True)
class GridPoint:
    """One point of the grid, as a process other than the one that planned it can train it."""

    n_train: int
    n_val: int
    seed: int
    max_active_keys: int
    min_update_frequency: int
    max_epochs: int
    engine: str = "python"


@functools.cache
def _setup(n_train: int, n_val: int, seed: int) -> tuple[Any, Any, Any]:
    """The data, the 8-replica graph and the initial weights every point of a grid starts from (once per process)."""
    data = list_reduction_dataset(n_train=n_train, n_val=n_val, seed=seed)
    graph = rnn(replicas=REPLICAS)
    return graph, data, graph.init_params(seed, np.dtype("float32"))


def train_point(spec: GridPoint) -> dict[str, Any]:
    """Train one grid point (:func:`point`) from its spec."""
    graph, data, params = _setup(spec.n_train, spec.n_val, spec.seed)
    return point(graph, data, params, spec.max_active_keys, spec.min_update_frequency, spec.max_epochs, spec.seed,
                 engine=spec.engine)  # fmt: skip


def point(
    graph: Any, data: Any, params: Any, keys: int, frequency: int, max_epochs: int, seed: int, engine: str = "python"
) -> dict[str, Any]:
    """One grid point: train until the target or ``max_epochs``; epochs and virtual time to the target."""
    curve: list[EpochStats] = []

    def on_epoch(stats: EpochStats) -> bool:
        curve.append(stats)
        return (stats.val_accuracy or 0.0) >= TARGET

    with warnings.catch_warnings():  # 16 devices, 10 heavy nodes: some devices idle
        warnings.simplefilter("ignore", UserWarning)
        r = train(graph, data, workers=DEVICES, mode="amp", max_active_keys=keys, min_update_frequency=frequency,
                  optimizer=OPTIMIZER, epochs=max_epochs, seed=seed, params=params, trace=True, backend="simulated",
                  costs=COSTS, on_epoch=on_epoch, **engine_settings(engine))  # fmt: skip
    assert isinstance(r, TrainResult)
    accuracy = [s.val_accuracy for s in curve]
    to: dict[str, dict[str, Any]] = {}
    for threshold in THRESHOLDS:
        i = next((i for i, a in enumerate(accuracy) if a is not None and a >= threshold), None)
        to[f"{threshold:g}"] = {"epochs": None if i is None else i + 1, "time_s": None if i is None else curve[i].end_s}
    st = r.staleness()
    out = {
        "max_active_keys": keys, "min_update_frequency": frequency,
        "epochs_to_target": to[f"{TARGET:g}"]["epochs"], "time_to_target_s": to[f"{TARGET:g}"]["time_s"],
        "to_threshold": to,
        "final_val_accuracy": accuracy[-1] if accuracy else None, "epochs_run": len(curve),
        "staleness": {"mean": st["mean"], "p95": st["p95"]}, "train_instances_per_s": r.train_instances_per_s,
        "curve": {"time_s": [s.end_s for s in curve], "val_accuracy": accuracy},
    }  # fmt: skip
    print(f"fig5: max_active_keys {keys}, min_update_frequency {frequency}: epochs to {TARGET:.0%} "
          f"{out['epochs_to_target']}, time {out['time_to_target_s']}, final {out['final_val_accuracy']}, "
          f"staleness mean {st['mean']:.2f}", file=sys.stderr, flush=True)  # fmt: skip
    return out


__all__ = ["COSTS", "MAX_ACTIVE_KEYS", "MIN_UPDATE_FREQUENCY", "TARGET", "GridPoint", "point", "run", "train_point"]
