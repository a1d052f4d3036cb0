"""The paper's Table 1: epochs and time to a target validation accuracy, per model and max_active_keys.

Rows follow the paper's (:data:`~amp_notebook.reproduce.paper.TABLE1`): the MLP at max_active_keys 1 and
4; the RNN at 1, 4 and 16, with 2 replicas at 4 and with 4 replicas at 8; the Tree-LSTM at 1, 8 and 16; the
GG-NN at 4 and 16. Each run trains in mode ``amp`` from the seed's initial weights, validates after every
epoch and stops at the workload's :class:`~amp_notebook.reproduce.workloads.Target` or after
``MAX_EPOCHS``. Per run: epochs to the target, time to it (the end of that epoch's validation: validation
time counts, as in the paper), training throughput (training instances over the run's time, validation
included) and the final metric. A row reports the median over ``repeats`` runs, seeds ``seed``,
``seed + 1``, ...; a run that misses the target counts as slower than any that reaches it, so a row has a
median only when more than half of its runs reach the target (``reached`` says how many did).

**Diverged runs.** Asynchrony can make training diverge (the paper saw the MLP grow unstable as
max_active_keys rose). A run that stops at its first NaN or infinity has missed the target: it counts as
such, keeps the curve it had and the error's text in ``diverged``, and its row says how many runs diverged
(``diverged``); its throughput is left out of the row's median.

Backends, as in Table 2 (:mod:`~amp_notebook.reproduce.table2`): **threads** (this machine's 2 cores,
placement ``auto`` chosen before the timed runs, ``fifo`` inboxes; a model family's rows and its PyTorch
peer interleaved, the order flipping every round; the 1-minute load average kept before and after) and
**simulated** (the paper's 16 cores as 16 devices calibrated from this machine; round robin,
backward-first; times are virtual seconds).

The peer (``Workload.peer_to_target``) trains minibatches as the paper's TensorFlow baselines did (the
MLP and the RNN on minibatches of 100, the Tree-LSTM level by level on minibatches of 25 trees, as
TensorFlow Fold) until the same target, on the same data, with 2 intra-op threads.

Epochs are not the paper's epochs where the data is not the paper's: the generated digits hold 1,438
training images (MNIST 60,000), the generated trees 2,000 (the Treebank 8,544); the list reduction is the
paper's size. ``Workload.target.note`` says where a target is the paper's and where it was chosen here.
"""

from __future__ import annotations

import statistics
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from amp_notebook.bench.common import interleaved_runs
from amp_notebook.reproduce import paper
from amp_notebook.reproduce.machine import load_1min, loaded
from amp_notebook.reproduce.table2 import (
    SIMULATED,
    THREADS,
    calibrate,
    calibration_engine,
    families,
    thread_configs,
)
from amp_notebook.reproduce.workloads import DEFAULT_ENGINE, Workload, available
from amp_notebook.runtime.costs import CostModel
from amp_notebook.runtime.numerics import NonFiniteError
from amp_notebook.runtime.session import EpochStats
from amp_notebook.runtime.train import TrainResult, train

MODELS = ("mlp", "rnn", "rnn-2-replicas", "rnn-4-replicas", "tree-lstm", "ggsnn")
MAX_EPOCHS: dict[str, int] = {"mlp": 40, "rnn": 25, "rnn-2-replicas": 30, "rnn-4-replicas": 30, "tree-lstm": 8,
                              "ggsnn": 15}  # fmt: skip
QUICK_EPOCHS = 1
QUICK_SEARCH: dict[str, Any] = {"keys": 8, "max_evaluations": 2}


def run(
    quick: bool = False, repeats: int = 3, seed: int = 0, models: Sequence[str] = MODELS, *,
    data_root: str | Path | None = None, engine: str = DEFAULT_ENGINE,
) -> dict[str, Any]:  # fmt: skip
    """Every row of the paper's Table 1 for ``models`` on both backends; ``quick``: a few keys, 1 epoch, once."""
    if quick:
        repeats = 1
    rows: list[dict[str, Any]] = []
    notes: dict[str, str] = {}
    targets: dict[str, dict[str, Any]] = {}
    data: dict[str, str] = {}
    for family in families([m for m in models if paper.table1_keys(m)]):
        members = list(available(family, quick, seed, notes, data_root=data_root, engine=engine))
        members = [w for w in members if w.target is not None and paper.table1_keys(w.name)]
        if not members:
            continue
        costs: dict[str, CostModel] = {}
        for w in members:
            _progress(f"table1: {w.name} ({w.layout}) to {w.target.text}, {len(w.data.train)} keys")  # type: ignore[union-attr]
            costs[w.name] = calibrate(w, seed)
            targets[w.name] = {"text": w.target.text, "metric": w.target.metric, "value": w.target.value,  # type: ignore[union-attr]
                               "above": w.target.above, "note": w.target.note}  # type: ignore[union-attr]  # fmt: skip
            data[w.name] = w.data_source
        max_epochs = {w.name: QUICK_EPOCHS if quick else MAX_EPOCHS[w.name] for w in members}
        rows += threads_rows(members, costs, repeats, seed, max_epochs, QUICK_SEARCH if quick else {})
        rows += simulated_rows(members, costs, repeats, seed, max_epochs)
    return {
        "rows": rows,
        "targets": targets,
        "data": data,
        "max_epochs": {m: QUICK_EPOCHS if quick else MAX_EPOCHS[m] for m in targets},
        "repeats": repeats,
        "threads": {**THREADS, "placement": "auto"},
        "simulated": dict(SIMULATED),
        "engine": engine,
        "paper_source": paper.PAPER,
        "notes": notes,
        "quick": quick,
    }


def to_target(w: Workload, max_epochs: int, seed: int, **knobs: Any) -> dict[str, Any]:
    """One run until ``w``'s target or ``max_epochs``: epochs and time to the target, throughput, the curve."""
    curve: list[EpochStats] = []
    target = w.target
    assert target is not None

    def on_epoch(stats: EpochStats) -> bool:
        curve.append(stats)
        return target.reached(stats)

    with warnings.catch_warnings():  # 16 devices for a model with fewer heavy nodes leave some idle
        warnings.simplefilter("ignore", UserWarning)
        r: TrainResult | None = None
        diverged: str | None = None
        try:
            out = train(w.graph, w.data, mode="amp", epochs=max_epochs, trace=False, seed=seed,
                        optimizer=w.optimizer, on_epoch=on_epoch, **{**w.settings, **knobs})  # fmt: skip
            assert isinstance(out, TrainResult)
            r = out
        except NonFiniteError as exc:  # diverged before the target (on_epoch stops a run at it): a miss
            diverged = str(exc)
    values = [getattr(s, target.metric) for s in curve]
    hit = next((i for i, s in enumerate(curve) if target.reached(s)), None)
    return {
        "engine": None if r is None else r.engine,
        "epochs_to_target": None if hit is None else hit + 1,
        "time_to_target_s": None if hit is None else curve[hit].end_s,
        "train_per_s": None if r is None else r.train_instances_per_s,
        "final": values[-1] if values else None,
        "curve": values,
        "seed": seed,
        "diverged": diverged,
    }


def median_to_target(runs: list[dict[str, Any]], field: str) -> float | None:
    """The median of ``field`` over runs, a missed target counting as slower than any reached one; None unless
    more than half of the runs reached it."""
    values = sorted(r[field] for r in runs if r[field] is not None)
    if 2 * len(values) <= len(runs):
        return None
    padded = values + [float("inf")] * (len(runs) - len(values))
    return float(statistics.median(padded))


def row(model: str, backend: str, mak: int, engine: str, runs: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """One JSON row: ours (medians over ``runs``) beside the paper's figures for the same model and mak."""
    theirs = paper.table1_row(model, mak)
    rates = [r["train_per_s"] for r in runs if r["train_per_s"] is not None]  # a diverged run has none
    return {
        "model": model, "backend": backend, "mak": mak, "engine": engine,
        "epochs_to_target": median_to_target(runs, "epochs_to_target"),
        "time_to_target_s": median_to_target(runs, "time_to_target_s"),
        "train_per_s": statistics.median(rates) if rates else None,
        "reached": sum(r["epochs_to_target"] is not None for r in runs), "repeats": len(runs),
        "diverged": sum(r.get("diverged") is not None for r in runs),
        "paper_time_s": theirs.time_s if theirs else None, "paper_epochs": theirs.epochs if theirs else None,
        "paper_train_per_s": theirs.train_per_s if theirs else None, "runs": runs, **extra,
    }  # fmt: skip


def threads_rows(
    members: list[Workload], costs: dict[str, CostModel], repeats: int, seed: int, max_epochs: dict[str, int],
    search: dict[str, Any],
) -> list[dict[str, Any]]:  # fmt: skip
    """This machine: every row of a family and the base's peer, ``repeats`` interleaved rounds."""
    configs = {w.name: thread_configs(w, costs[w.name], paper.table1_keys(w.name), seed, search)
               for w in members}  # fmt: skip
    done: dict[str, int] = {}

    def side(name: str, once: Callable[[int], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
        def go() -> dict[str, Any]:  # each round of a side trains from the next seed
            run_seed = seed + done.setdefault(name, 0)
            done[name] += 1
            result = once(run_seed)
            _progress(f"  threads, {name}, seed {run_seed}: epochs to target {result['epochs_to_target']}, "
                      f"time {_fmt(result['time_to_target_s'])} s{_diverged(result)}")  # fmt: skip
            rate = result["train_per_s"]
            return {**result, "instances_per_s": float("nan") if rate is None else rate}

        return go

    sides: dict[str, Callable[[], dict[str, Any]]] = {}
    for w in members:
        for k in paper.table1_keys(w.name):
            knobs = {**THREADS, "max_active_keys": k, **configs[w.name][k]}
            sides[f"{w.name} mak={k}"] = side(
                f"{w.name} mak={k}", lambda s, w=w, knobs=knobs: to_target(w, max_epochs[w.name], s, **knobs)
            )
    base = members[0]
    peer_load: list[float] = []
    if base.peer_to_target is not None:
        peer_fn, cap = base.peer_to_target, max_epochs[base.name]

        def peer(s: int) -> dict[str, Any]:
            peer_load.append(load_1min())
            result = peer_fn(cap, s)
            peer_load.append(load_1min())
            return {"epochs_to_target": result.get("epochs_to_target"), "time_to_target_s": result.get(
                "time_to_target_s"), "train_per_s": result["instances_per_s"], "curve": result.get("val_accuracy"),
                "seed": s}  # fmt: skip

        sides["peer"] = side("peer", peer)
    load = [load_1min()]
    runs = interleaved_runs(repeats, sides)
    load.append(load_1min())
    out = []
    for w in members:
        for k in paper.table1_keys(w.name):
            is_base = w is base and k == paper.table1_keys(w.name)[0]
            peer_runs = runs.get("peer") if is_base else None
            extra: dict[str, Any] = {}
            if peer_runs:
                extra = {"peer": base.peer_to_target_name, "peer_runs": peer_runs,
                         "peer_epochs_to_target": median_to_target(peer_runs, "epochs_to_target"),
                         "peer_time_to_target_s": median_to_target(peer_runs, "time_to_target_s"),
                         "peer_train_per_s": statistics.median(r["train_per_s"] for r in peer_runs),
                         "peer_load_1min": peer_load, "peer_loaded": loaded(peer_load)}  # fmt: skip
            runs_k = runs[f"{w.name} mak={k}"]
            out.append(row(w.name, "threads", k, _engine(runs_k, w), runs_k, load_1min=load, **extra))
    return out


def simulated_rows(
    members: list[Workload], costs: dict[str, CostModel], repeats: int, seed: int, max_epochs: dict[str, int]
) -> list[dict[str, Any]]:
    """The paper's 16 cores, calibrated from this machine: ``repeats`` seeds per row (the runs are exact)."""
    out = []
    for w in members:
        for k in paper.table1_keys(w.name):
            runs = [to_target(w, max_epochs[w.name], seed + i, max_active_keys=k, backend="simulated",
                              costs=costs[w.name], **SIMULATED) for i in range(repeats)]  # fmt: skip
            _progress(f"  simulated 16 cores, {w.name}, max_active_keys {k}: epochs to target "
                      f"{[r['epochs_to_target'] for r in runs]}{_diverged(*runs)}")  # fmt: skip
            out.append(row(w.name, "simulated", k, _engine(runs, w), runs))
    return out


def _engine(runs: list[dict[str, Any]], w: Workload) -> str:
    """The engine a row ran on: its runs' (a diverged run does not say), else the one a run of ``w`` picks."""
    return next((r["engine"] for r in runs if r["engine"] is not None), None) or calibration_engine(w)


def _diverged(*runs: dict[str, Any]) -> str:
    n = sum(r.get("diverged") is not None for r in runs)
    return f" ({n} diverged: training reached NaN/inf before the target)" if n else ""


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


__all__ = ["MAX_EPOCHS", "MODELS", "median_to_target", "row", "run", "to_target"]
