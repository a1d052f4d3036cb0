"""Helpers shared by the benchmarks."""

from __future__ import annotations

import functools
import os
import statistics
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from amp_notebook.data.batch import Batch, Dataset

T = TypeVar("T")
DIVERGE_TRIES = 8  # runs a timed figure may take when its training diverges (retry_diverged)


def retry_diverged(run: Callable[[int], T], seed: int, diverged: list[int] | None = None) -> T:
    """``run(seed)``, run again from the next seed while its training diverges (a NaN or infinity stops it with
    :class:`~amp_notebook.runtime.numerics.NonFiniteError`), at most ``DIVERGE_TRIES`` runs in all; each
    diverged run's seed goes into ``diverged``. Asynchronous training can diverge where synchronous training
    would not, and whether it does can depend on the threads' timing, not only on the seed: a throughput
    figure is then the run that finished, and the diverged seeds are reported beside it. ``DIVERGE_TRIES``
    diverged runs in a row raise the last error."""
    from amp_notebook.runtime.numerics import NonFiniteError

    tries = 0
    while True:
        try:
            return run(seed + tries)
        except NonFiniteError:
            if diverged is not None:
                diverged.append(seed + tries)
            tries += 1
            if tries == DIVERGE_TRIES:
                raise


def diverged_note(seeds: list[int]) -> str:
    """What a report says of a figure's diverged runs ("" when none diverged)."""
    if not seeds:
        return ""
    return f"{len(seeds)} run(s) diverged (NaN/inf) and ran again from the next seed (seeds {seeds})"


def median_of(repeats: int, fn: Callable[[], float]) -> tuple[float, list[float]]:
    values = [fn() for _ in range(repeats)]
    return statistics.median(values), values


def interleaved_medians(
    repeats: int, fns: dict[str, Callable[[], float]], swap: bool = True
) -> dict[str, tuple[float, list[float]]]:
    """Run the contenders alternately so drifting machine load hits all alike; the order flips every round
    (a, b, b, a, ...) so none always runs first (on this VM the first run of a round measured slower);
    ``swap=False`` keeps one fixed order."""
    values: dict[str, list[float]] = {name: [] for name in fns}
    for i in range(repeats):
        order = list(fns.items())
        if swap and i % 2:
            order.reverse()
        for name, fn in order:
            values[name].append(fn())
    return {name: (statistics.median(v), v) for name, v in values.items()}


def paired_ratios(rounds: Sequence[float], base: Sequence[float]) -> tuple[float | None, list[float | None]]:
    """Each round's figure over the base's figure of the same round (both sides interleaved, as
    :func:`interleaved_medians` runs them), and their median: the machine's drift between rounds, which moves
    both sides of one round together, leaves it, where it moves the ratio of two medians. A round whose base is
    not positive has no ratio (None), and the median is over the others (None if none)."""
    ratios = [a / b if b > 0 else None for a, b in zip(rounds, base, strict=True)]
    kept = [r for r in ratios if r is not None]
    return (statistics.median(kept) if kept else None), ratios


def kept_rounds_ratio(
    rounds: Sequence[float], base: Sequence[float], keep: Sequence[bool], keep_base: Sequence[bool]
) -> dict[str, Any]:
    """The paired ratios (:func:`paired_ratios`) of the rounds where both runs are kept (little stolen, near
    links): ``rounds`` (how many), ``median`` (theirs; None when no round was kept), ``of`` (all rounds)."""
    kept = [a / b for a, b, k, kb in zip(rounds, base, keep, keep_base, strict=True) if k and kb and b > 0]
    return {"rounds": len(kept), "of": len(rounds), "median": statistics.median(kept) if kept else None}


def fastest_placement(
    candidates: dict[str, T], rate: Callable[[T], float], trials: int
) -> tuple[str, dict[str, float]]:
    """Time each distinct placement (or configuration: anything ``rate`` runs) ``trials`` runs on this machine,
    interleaved (:func:`interleaved_medians`); returns the name of the fastest by median and each timed name's
    median. A candidate equal to an earlier one is not timed again, and a tie goes to the earlier name (list the
    default first)."""
    distinct: dict[str, T] = {}
    for name, placement in candidates.items():
        if placement not in distinct.values():
            distinct[name] = placement
    if len(distinct) == 1:
        return next(iter(distinct)), {}
    medians = interleaved_medians(trials, {n: functools.partial(rate, p) for n, p in distinct.items()})
    rates = {n: value for n, (value, _) in medians.items()}
    return max(rates, key=rates.__getitem__), rates  # max keeps the first of equals


def interleaved_runs(repeats: int, sides: dict[str, Callable[[], dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Every run of each side (a training that returns its figures, ``instances_per_s`` among them), the
    sides interleaved as in :func:`interleaved_medians`."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}

    def throughput_of(name: str) -> Callable[[], float]:
        def one_run() -> float:
            runs[name].append(sides[name]())
            return float(runs[name][-1]["instances_per_s"])

        return one_run

    interleaved_medians(repeats, {name: throughput_of(name) for name in sides})
    return runs


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median throughput (the lower middle one for an even count), with every run's throughput
    and final metric added (``runs_instances_per_s``, ``runs_final_metric``)."""
    ordered = sorted(runs, key=lambda r: r["instances_per_s"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["runs_instances_per_s"] = [r["instances_per_s"] for r in runs]
    chosen["runs_final_metric"] = [r.get("final_metric") for r in runs]
    return chosen


def repeat_epochs(dataset: Dataset, copies: int) -> Dataset:
    """The same training keys ``copies`` times (a longer run without a longer download)."""
    return Dataset(dataset.name, list(dataset.train) * copies, [], dataset.num_classes, dataset.meta)


def constant_dataset(n_keys: int, width: int, batch: int = 1, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    keys = [
        Batch({"x": rng.standard_normal((batch, width)), "target": rng.standard_normal((batch, width))}, batch)
        for _ in range(n_keys)
    ]
    return Dataset("constant", keys, [])


def machine_load(before: float | None = None) -> dict[str, Any]:
    """The machine's 1-minute load average now (``after``; ``before`` when given), the core count, and
    ``busy``: whether either reading exceeds the cores, i.e. other processes competed with the benchmark and
    its figures are slower than this machine measures idle (printed with them by :func:`load_line`)."""
    now = os.getloadavg()[0]
    cpus = os.cpu_count() or 1
    readings = [now] if before is None else [before, now]
    return {"before": before if before is not None else now, "after": now, "cpus": cpus,
            "busy": max(readings) > cpus}  # fmt: skip


def load_line(load: dict[str, Any]) -> tuple[str, str]:
    """A report row for a :func:`machine_load` record, flagging a busy machine."""
    text = f"{load['before']:.2f} before, {load['after']:.2f} after, {load['cpus']} cores"
    if load["busy"]:
        text += " (BUSY: other processes competed; figures are lower than on an idle machine)"
    return ("load average (1 min)", text)


def report(rows: list[tuple[str, Any]]) -> str:
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"  {name:<{width}}  {value}" for name, value in rows)
