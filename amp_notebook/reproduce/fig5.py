"""The paper's Fig. 5: the 8-replica RNN over a grid of min_update_frequency x max_active_keys.

For every grid point the list-reduction RNN with its step Linear replicated 8 times (behind Cond on
``key % 8`` and Phi; the replicas average their parameters at each epoch's end) trains on the simulated
backend until its validation accuracy reaches ``TARGET`` (96%) or ``MAX_EPOCHS`` pass, from the same
initial weights and the same data. Reported per point: epochs to the target, simulated time to the
target (the virtual time at the end of that epoch), the final validation accuracy, gradient staleness
(mean and p95) and training throughput (instances per virtual second). Validation measures the model an
epoch hands over: the replicas average before the epoch's validation keys run (the runtime does so for
every graph with replicas), not the eight replicas as they drifted apart over the epoch.

The optimizer is Adam at ``OPTIMIZER``'s learning rate, decayed by ``lr_decay`` at each epoch's end (the
paper does not state the RNN's optimizer). Between averages each replica of the step Linear sees an eighth
of the keys, so a constant rate leaves the averaged model jittering below 96%: at 3e-3 with no decay the
middle point (16 keys, min_update_frequency 10) reached 0.948 after 20 epochs and first 0.96 at epoch 30.
The replicas average Adam's moments with their parameters (:func:`~amp_notebook.optim.average_parameters`).
Measured on the full grid at 5e-3 decayed by 0.9: 4 of the 9 points reached 96% within 30 epochs while the
replicas averaged their parameters alone, each keeping the moments of its own eighth of the keys, and 5
with the moments averaged too. At a decay of 0.92 with the moments averaged, 6 did.

The simulator runs the real numpy math on a virtual clock, so every point is exact and deterministic:
the same settings give the same curve, bit for bit, on any machine and under any load. The hardware is
the paper's 16 cores, ``COSTS``: each device runs at one core of this project's machine, as measured
once by :func:`~amp_notebook.runtime.costs.calibrate_cpu` (float32 matmul FLOP/s with BLAS on one thread,
and the per-message Python glue of a worker) and frozen here, so that the grid does not move with the
load of the machine that runs it; links are free (shared memory). Placement: round robin, one heavy node
(embedding, the 8 step replicas, the output layer) per device; backward-first inboxes (the paper).

Scale. The paper trained 100,000 lists and validated on 10,000; ``scale`` (``--scale``) trains that
fraction of both (default 1: the paper's sizes) for at most ``max_epochs`` epochs. Replicas average their
parameters at each epoch's end, so between averages each replica sees an eighth of the keys; with fewer
lists an epoch holds fewer updates per replica and 96% takes more epochs (at 20,000 lists the 8-replica
RNN reached 56% after 8 epochs where the 1-replica RNN reached 85%). The grid also reports epochs and time
to lower accuracies (``THRESHOLDS``, from the same curves), so a grid whose points miss 96% still shows the
comparison.

Averaging more often. The paper "also tried to synchronize more frequently but this did not help". Beside
the grid, the column at the middle min_update_frequency runs again with ``average_every=AVERAGE_EVERY``
(the replicas average after every that many training keys, the keys in flight drained first, besides each
epoch's end); ``findings`` compares the two.

The points are independent (each starts from the same weights and data, built from the seed), so they
run in parallel across processes: ``run(processes=N)`` (``amp-notebook reproduce fig5 --processes N``)
trains N points at once with the same results, point for point. The simulated backend steps the native
engine's workers wherever it is built (the Python engine's otherwise: the same results, event for event);
processes are how the grid uses more cores.

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
from amp_notebook.errors import SettingError
from amp_notebook.models.rnn import rnn
from amp_notebook.runtime.costs import CostModel
from amp_notebook.runtime.session import EpochStats
from amp_notebook.runtime.train import TrainResult, train

REPLICAS, DEVICES, TARGET = 8, 16, 0.96
THRESHOLDS = (0.5, 0.6, 0.7, 0.9, TARGET)  # epochs and time to each, from the same curves
MAX_ACTIVE_KEYS = (4, 16, 64)
MIN_UPDATE_FREQUENCY = (1, 10, 50)
AVERAGE_EVERY = 25  # training keys between averages in the comparison column (an epoch of 100,000 lists: ~1,000)
MAX_EPOCHS = 30
PAPER_N_TRAIN, PAPER_N_VAL = 100_000, 10_000
OPTIMIZER: dict[str, Any] = {"name": "adam", "lr": 5e-3, "clip_norm": 5.0, "lr_decay": 0.92}
# one core of this project's 2-vCPU machine, measured with calibrate_cpu() (median of 5 calls) and frozen
CORE_FLOPS, CORE_OVERHEAD_S = 8.7e10, 1.2e-6
COSTS = CostModel(flops=CORE_FLOPS, message_overhead_s=CORE_OVERHEAD_S)
QUICK: dict[str, Any] = {"max_active_keys": (4, 16), "min_update_frequency": (1, 10), "max_epochs": 2,
                         "scale": 0.01, "average_every": 3}  # fmt: skip


def run(
    quick: bool = False, seed: int = 0, *, processes: int = 1, scale: float = 1.0, max_epochs: int = MAX_EPOCHS
) -> dict[str, Any]:
    """The grid (row-major: max_active_keys outer) and the averaging column; ``quick``: a 2 x 2 grid on 1% of
    the lists for 2 epochs. ``scale``: the fraction of the paper's 100,000 training and 10,000 validation
    lists. ``processes`` > 1 trains that many points at once in worker processes (each builds the data and
    the graph from the seed), with the same results as one process, point for point."""
    if not 0 < scale <= 1:
        raise SettingError("scale", f"reproduce fig5: scale is a fraction of the paper's lists, in (0, 1]; got {scale}")
    ks, ms = (QUICK["max_active_keys"], QUICK["min_update_frequency"]) if quick else (MAX_ACTIVE_KEYS,
                                                                                      MIN_UPDATE_FREQUENCY)  # fmt: skip
    if quick:
        scale, max_epochs = QUICK["scale"], QUICK["max_epochs"]
    every = QUICK["average_every"] if quick else AVERAGE_EVERY
    n_train, n_val = max(100, round(PAPER_N_TRAIN * scale)), max(100, round(PAPER_N_VAL * scale))
    middle = ms[len(ms) // 2]
    specs = [GridPoint(n_train, n_val, seed, k, m, max_epochs) for k in ks for m in ms]
    specs += [GridPoint(n_train, n_val, seed, k, middle, max_epochs, every) for k in ks]
    if processes > 1:
        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
            points = list(pool.map(train_point, specs))
    else:
        points = [train_point(spec) for spec in specs]
    grid, averaged = points[: len(ks) * len(ms)], points[len(ks) * len(ms) :]
    result = {
        "grid": grid,
        "averaging": averaged,
        "max_active_keys": list(ks),
        "min_update_frequency": list(ms),
        "average_every": every,
        "target": TARGET,
        "thresholds": list(THRESHOLDS),
        "max_epochs": max_epochs,
        "settings": {
            "replicas": REPLICAS,
            "devices": DEVICES,
            "n_train": n_train,
            "n_val": n_val,
            "scale": scale,
            "optimizer": OPTIMIZER,
            "placement": "round_robin",
            "priority": "backward_first",
            "costs": COSTS.spec(),
            "processes": processes,
        },
        "quick": quick,
    }
    result["findings"] = findings(result)
    return result


@dataclass(frozen=True)
class GridPoint:
    """One point of the grid, as a process other than the one that planned it can train it."""

    n_train: int
    n_val: int
    seed: int
    max_active_keys: int
    min_update_frequency: int
    max_epochs: int
    average_every: int | None = None


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
                 average_every=spec.average_every)  # fmt: skip


def point(
    graph: Any,
    data: Any,
    params: Any,
    keys: int,
    frequency: int,
    max_epochs: int,
    seed: int,
    average_every: int | None = None,
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
                  costs=COSTS, on_epoch=on_epoch, average_every=average_every)  # fmt: skip
    assert isinstance(r, TrainResult)
    accuracy = [s.val_accuracy for s in curve]
    to: dict[str, dict[str, Any]] = {}
    for threshold in THRESHOLDS:
        i = next((i for i, a in enumerate(accuracy) if a is not None and a >= threshold), None)
        to[f"{threshold:g}"] = {"epochs": None if i is None else i + 1, "time_s": None if i is None else curve[i].end_s}
    st = r.staleness()
    out = {
        "max_active_keys": keys, "min_update_frequency": frequency, "average_every": average_every,
        "epochs_to_target": to[f"{TARGET:g}"]["epochs"], "time_to_target_s": to[f"{TARGET:g}"]["time_s"],
        "to_threshold": to,
        "final_val_accuracy": accuracy[-1] if accuracy else None, "epochs_run": len(curve),
        "staleness": {"mean": st["mean"], "p95": st["p95"]}, "train_instances_per_s": r.train_instances_per_s,
        "curve": {"time_s": [s.end_s for s in curve], "val_accuracy": accuracy},
    }  # fmt: skip
    averaging = f", average_every {average_every}" if average_every else ""
    print(f"fig5: max_active_keys {keys}, min_update_frequency {frequency}{averaging}: epochs to {TARGET:.0%} "
          f"{out['epochs_to_target']}, time {out['time_to_target_s']}, final {out['final_val_accuracy']}, "
          f"staleness mean {st['mean']:.2f}", file=sys.stderr, flush=True)  # fmt: skip
    return out


def findings(result: dict[str, Any]) -> dict[str, Any]:
    """The paper's findings read off the grid: per max_active_keys, the min_update_frequency with the least
    time to the highest accuracy every point of the grid reached (``neither too large nor too small`` holds
    where it is an inner one); throughput against max_active_keys at each min_update_frequency; and, per
    max_active_keys, time to that accuracy with and without ``average_every``."""
    ks, ms = result["max_active_keys"], result["min_update_frequency"]
    cell = {(p["max_active_keys"], p["min_update_frequency"]): p for p in result["grid"]}
    reached = [t for t in result["thresholds"] if all(p["to_threshold"][f"{t:g}"]["time_s"] is not None
                                                      for p in result["grid"])]  # fmt: skip
    common = f"{max(reached):g}" if reached else None

    def time_to(p: dict[str, Any]) -> float | None:
        return None if common is None else p["to_threshold"][common]["time_s"]

    best = {k: min(ms, key=lambda m, k=k: time_to(cell[(k, m)]) or float("inf")) for k in ks}
    throughput = {m: {k: cell[(k, m)]["train_instances_per_s"] for k in ks} for m in ms}
    averaging = {p["max_active_keys"]: {"without": time_to(cell[(p["max_active_keys"], p["min_update_frequency"])]),
                                        "with": time_to(p)} for p in result["averaging"]}  # fmt: skip
    helps = {k: v["with"] is not None and (v["without"] is None or v["with"] < v["without"])
             for k, v in averaging.items()}  # fmt: skip
    return {
        "accuracy_compared": None if common is None else float(common),
        "points_reaching_target": sum(p["epochs_to_target"] is not None for p in result["grid"]),
        "best_min_update_frequency": best,
        "inner_best": {k: ms[0] < m < ms[-1] for k, m in best.items()},
        "throughput_per_s": throughput,
        "averaging_time_s": averaging,
        "averaging_helps": helps,
    }


__all__ = [
    "COSTS",
    "MAX_ACTIVE_KEYS",
    "MIN_UPDATE_FREQUENCY",
    "TARGET",
    "GridPoint",
    "findings",
    "point",
    "run",
    "train_point",
]
