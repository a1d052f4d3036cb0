"""The paper's Table 2: training throughput at each max_active_keys the paper lists, and its ratio to 1.

Rows follow the paper's (:data:`~amp_notebook.reproduce.paper.TABLE2`): the MLP at max_active_keys 1 and 4;
the RNN at 1, 4 and 16, with 2 replicas at 4 and with 4 replicas at 8; the Tree-LSTM and the GG-NN at 1, 4 and
16; the BiLSTM tagger at 1, 4 and 32. Each row carries the paper's training and validation throughput and its
ratio to max_active_keys 1, and ours on two backends. A replicated RNN's ratio is to the one-replica RNN at
max_active_keys 1, as in the paper. Mode ``amp``, one epoch of the workload's training keys
(:mod:`~amp_notebook.reproduce.workloads`), no validation, no trace; figures are training instances per
second. Where an epoch is shorter than :func:`~amp_notebook.reproduce.workloads.timed_keys` at the model's largest
max_active_keys (``TIMED_KEYS``, or ``KEYS_PER_SLOT`` keys per key in flight where that is more), every row of
that model is timed over one epoch of its training keys repeated to that many (not with ``quick``), which the
controller shuffles as one epoch. The pipeline then fills and drains once per run, as in an epoch of the paper's
length. Eight epochs of the digits' 15 keys would drain it eight times: on 2 workers that held the MLP at
max_active_keys 4 to about 1.4x its rate at 1 where one 120-key epoch gives about 1.65x. The tagger's 200 sentences
at 32 in flight are timed as 800. The RNN, Tree-LSTM and GG-NN epochs are long enough and run as they are.

**threads**: this machine, 2 worker threads. Placement ``auto`` (:mod:`amp_notebook.runtime.autoplace`: node costs
measured here once per model, the fastest of round robin, balanced stages and every assignment of the heavy nodes (a
local search where there are more) on the simulator, chosen once per max_active_keys before the timed runs),
``fifo`` inboxes (arrival order keeps both workers fed; ``amp-notebook bench speedup`` compares it with
backward-first). Outside ``--quick`` the row's configuration is then measured here (:func:`thread_configs`): the
simulator and this machine can disagree, and which inbox order keeps two workers busy depends on the graph. Four
placements (``auto``'s choice, round robin, balanced stages, and ``measured load``: the heavy nodes split so that
the busiest worker gets the least of the node time of a traced 1-worker run at that max_active_keys,
:func:`~amp_notebook.runtime.autoplace.split_load`) each with two inbox orders (``fifo`` and ``light_first``, the
threaded backend's default on 2 workers) are timed in two interleaved runs each (a configuration equal to an earlier
one once), and the fastest runs the row (ties go to ``auto``'s choice with ``fifo``). The row's ``placement_trials``
keeps every figure, and its ``placement`` and ``priority`` say what ran. A model family (the RNN with its replicated
variants) and its PyTorch peer run ``repeats`` times, interleaved with the order flipping every round (this machine
is shared and noisy); the median is reported, every round is kept in ``runs_per_s``, and beside the ratio of the
medians (``ours_ratio``, the table's figure) each row has the median of its rounds' ratios to the base's run in the
same round (``ours_ratio_paired``; each round's in ``ratio_per_round``), which the machine's drift between rounds
leaves alone; the 1-minute load average before and after the family's rounds is kept beside them (``load_1min``).
So is how far apart the CPUs were (:mod:`amp_notebook.bench.link`): a cache line's round trip just before and just
after each run (``link_ns_per_round``), which a virtual machine's host can change at any time and two workers pay on
every message they hand each other, and the paired ratio over the rounds whose run and base run both had near links
(``ours_ratio_near_link``, over ``near_link_rounds`` rounds; None when none had).
The workers run on the engine ``engine`` names (default ``auto``: the native worker loops, which hold no interpreter
lock, wherever they are built and run the graph); each row's ``engine`` says which ran. On the Python engine every
message's glue holds the interpreter lock, so two threads gain little whatever max_active_keys is.

**Bundles.** On threads an amp run bundles a node's waiting messages into one call (``max_bundle``, 16 by
default), which saves the per-call cost of many small messages (the tagger's sentences: 1,861 sentences/s at 32
in flight on 2 workers, 1,481 unbundled) but hands the next worker its work in lumps. The bundle budget
(``bundle_budget_s``, :mod:`~amp_notebook.runtime.worker`; docs/models.md has its figures) already runs messages
that are batches alone; whether the bundles that remain help a row is measured: outside ``--quick`` the fastest
configuration is timed once more beside itself with ``max_bundle`` 1, ``PLACEMENT_TRIALS`` interleaved runs
each, and the faster runs the row (a tie keeps the bundles). The row's ``max_bundle`` says which (None: the
default), and ``placement_trials`` keeps both figures (the winner's second timing as "(again)").

**What 2 workers allow.** A ratio to max_active_keys 1 on 2 workers is bounded by the graph as well as by the
cores: where one key in flight already keeps both workers partly busy (the tagger's two directions run side by
side), or where the heavy nodes cannot be split evenly over 2 workers, no engine reaches 2x. So each threads row
also runs on the simulator (:func:`bound_rates`): 2 simulated devices, each as fast as one core here (the
model's calibration below), free hand-offs and no driver, with the row's own placement, inbox order,
max_active_keys and timed keys. ``bound_ratio`` is that run's throughput over the base row's (the
same ratio as the row's, for the graph alone), and ``of_bound`` the row's ratio over it; ``bound_per_s`` keeps
the simulated throughput. The simulator leaves out what the machine adds (caches, the cores' distance, the
driver's time), so a row can exceed its bound where those cost its base run more.

**simulated**: the paper's machine, 16 cores, as 16 simulated devices calibrated from this machine.
Calibration: :func:`~amp_notebook.runtime.autoplace.measure_costs` runs a short traced sync training on one
worker thread here (on the native engine where it runs the graph: ``calibration_engine``) and fixes every
node's forward, backward and update time per message (each key's mean there, the median over keys); a node
the sample never reached costs FLOPs over this core's measured matmul FLOP/s plus its measured per-message overhead
(:meth:`CostModel.this_cpu`). Each simulated device is then one core of this machine running that engine, with
free links (shared memory): what it would do on 16 such cores. The simulator itself computes with the Python
ops (the rows' ``engine``); only its clock comes from the calibration. Placement: the paper's round robin (one
heavy node per device while there are at most 16), backward-first inboxes (the paper's appendix A). One run
per row: the simulator is deterministic given the calibration (which varies between invocations with this
machine's load; ``calibration_s`` keeps it). No peer on this backend.

**Diverged runs.** Asynchrony can make training unstable (the paper saw it on the MLP as max_active_keys grew;
here the MLP at max_active_keys 4 on 2 worker threads diverged within its 120 timed keys in 3 of 32 runs,
seeds 0-7 twice on balanced stages and twice on round robin, all 3 on balanced stages: whether a run diverges
depends on the threads' timing, not only on the seed). A timed run whose training diverges stops at its first
NaN or infinity, so it is run again from the next seed (:func:`~amp_notebook.bench.common.retry_diverged`); the
figure is the run that finished, and each row's ``diverged_runs`` lists the seeds that diverged (empty: none).
The placement trials retry the same way. ``DIVERGE_TRIES`` diverged runs in a row end the table with the error (even if
every other run diverged, about 4 in 1,000 figures).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from amp_notebook.bench.common import (
    diverged_note,
    fastest_placement,
    interleaved_medians,
    kept_rounds_ratio,
    paired_ratios,
    retry_diverged,
)
from amp_notebook.bench.link import LinkLog
from amp_notebook.reproduce import paper
from amp_notebook.reproduce.machine import load_1min, loaded
from amp_notebook.reproduce.workloads import DEFAULT_ENGINE, MODELS, Workload, available, timed_workload
from amp_notebook.runtime.autoplace import autoplace, measure_costs
from amp_notebook.runtime.costs import CostModel
from amp_notebook.runtime.placement import place
from amp_notebook.runtime.train import TrainResult, train

PRIORITIES = ("fifo", "light_first")  # the inbox orders a row's configuration is measured with (the first wins ties)
THREADS: dict[str, Any] = {"workers": 2, "priority": PRIORITIES[0]}
MEASURED_CONFIGS = (
    "per row, the fastest here of auto's choice, round robin, balanced stages and the measured-load "
    "split, each with fifo and light_first inboxes (the row's placement and priority)"
)
QUICK_SEARCH: dict[str, Any] = {"keys": 8, "max_evaluations": 2}  # --quick: round robin or balanced, 8 keys
# the simulator runs on the engine the threads run on (its figures are virtual time: the same on either)
SIMULATED: dict[str, Any] = {"workers": 16, "priority": "backward_first", "placement": "round_robin"}
HEAVY_KINDS = ("linear", "embedding")
PLACEMENT_TRIALS = 2  # timed runs of each candidate configuration (thread_configs)
UNBUNDLED = "unbundled"  # a configuration with max_bundle 1 (thread_configs)


_CALIBRATIONS: dict[tuple[Any, ...], CostModel] = {}


def calibrate(w: Workload, seed: int) -> CostModel:
    """``w``'s node costs measured on this machine (module docstring), once per process: Table 1 and Table 2 of
    one ``reproduce`` run simulate with the same calibration."""
    key = (w.name, w.data_source, len(w.data.train), w.meta.get("engine"), seed)
    if key not in _CALIBRATIONS:
        _CALIBRATIONS[key] = measure_costs(w.graph, w.data, optimizer=w.optimizer, seed=seed)
    return _CALIBRATIONS[key]


def calibration_engine(w: Workload) -> str:
    """The engine whose costs :func:`calibrate` measured for ``w`` (its sync run on one worker thread)."""
    from amp_notebook.engine.choice import choose_engine
    from amp_notebook.runtime.config import RunConfig

    config = RunConfig(workers=1, mode="sync", optimizer=w.optimizer, validate=False)
    return choose_engine(w.graph, w.data, config).name


def families(models: Sequence[str]) -> list[list[str]]:
    """``models`` grouped by the model their ratios are taken against (its base first, added if missing)."""
    grouped: dict[str, list[str]] = {}
    for name in MODELS:
        base = paper.FAMILY_BASE.get(name, name)
        if name in models or (base == name and any(paper.FAMILY_BASE.get(m) == name for m in models)):
            grouped.setdefault(base, []).append(name)
    return list(grouped.values())


def run(
    quick: bool = False, repeats: int = 3, seed: int = 0, models: Sequence[str] = MODELS, *,
    data_root: str | Path | None = None, engine: str = DEFAULT_ENGINE,
) -> dict[str, Any]:  # fmt: skip
    """Every row of the paper's Table 2 for ``models``, on both backends; ``quick``: a few keys, one round;
    ``data_root``: real data (:func:`~amp_notebook.reproduce.workloads.available`); ``engine``: what runs the
    threads (each row's ``engine`` says what ran)."""
    if quick:
        repeats = 1
    rows: list[dict[str, Any]] = []
    notes: dict[str, str] = {}
    calibration: dict[str, Any] = {}
    calibrated_on: dict[str, str] = {}
    data: dict[str, str] = {}
    for family in families(models):
        members = list(available(family, quick, seed, notes, data_root=data_root, engine=engine))
        if not members:
            continue
        costs: dict[str, CostModel] = {}
        for w in members:
            _progress(f"table2: {w.name} ({w.layout}), {len(w.data.train)} keys")
            costs[w.name] = calibrate(w, seed)
            calibration[w.name] = {n: {k: v for k, v in c.__dict__.items() if v is not None}
                                   for n, c in costs[w.name].nodes.items()}  # fmt: skip
            calibrated_on[w.name] = calibration_engine(w)
            data[w.name] = w.data_source
        rows += threads_rows(members, costs, repeats, seed, QUICK_SEARCH if quick else {}, measure=not quick)
        rows += simulated_rows(members, costs, seed)
    return {
        "rows": rows,
        "threads": threads_settings(quick, repeats),
        "simulated": dict(SIMULATED),
        "calibration_s": calibration,
        "calibration_engine": calibrated_on,
        "data": data,
        "engine": engine,
        "paper_source": paper.PAPER,
        "notes": notes,
        "quick": quick,
    }


def threads_settings(quick: bool, repeats: int) -> dict[str, Any]:
    """What the report says of the threads columns' settings."""
    if quick:  # no trials: auto's choice, THREADS' inbox order
        return {**THREADS, "placement": "auto", "repeats": repeats}
    return {"workers": THREADS["workers"], "repeats": repeats, "placement and priority": MEASURED_CONFIGS}


def row(model: str, backend: str, mak: int, engine: str, ours: float | None, base: float | None,
        **extra: Any) -> dict[str, Any]:  # fmt: skip
    """One JSON row: ours beside the paper's figures for the same model and max_active_keys."""
    theirs = paper.table2_row(model, mak)
    return {
        "model": model, "backend": backend, "mak": mak, "engine": engine, "ours_per_s": ours,
        "ours_ratio": ours / base if ours is not None and base else None,
        "paper_train_per_s": theirs.train_per_s if theirs else None,
        "paper_valid_per_s": theirs.valid_per_s if theirs else None,
        "paper_ratio": paper.ratio(model, mak), **extra,
    }  # fmt: skip


def timed(w: Workload) -> Any:
    """The data every timed run of ``w`` trains on (module docstring): its training keys repeated to
    :func:`~amp_notebook.reproduce.workloads.timed_keys` at the largest max_active_keys of its rows, so each row
    of a model times the same keys; ``w``'s own data with ``quick``."""
    return timed_workload(w, max(paper.table2_keys(w.name))).data


def _train(w: Workload, seed: int, diverged: list[int] | None = None, **knobs: Any) -> TrainResult:
    """One timed run of ``w``. A run whose training diverges (a NaN or infinity stops it) is run again from the
    next seed, at most ``DIVERGE_TRIES`` runs in all; each diverged run's seed goes into ``diverged``."""
    data = timed(w)

    def once(run_seed: int) -> TrainResult:
        with warnings.catch_warnings():  # 16 devices for a model with fewer heavy nodes leave some idle
            warnings.simplefilter("ignore", UserWarning)
            r = train(w.graph, data, mode="amp", epochs=1, validate=False, trace=False,
                      seed=run_seed, optimizer=w.optimizer, **{**w.settings, **knobs})  # fmt: skip
        assert isinstance(r, TrainResult)
        return r

    return retry_diverged(once, seed, diverged)


def thread_configs(
    w: Workload,
    costs: CostModel,
    keys: Sequence[int],
    seed: int,
    search: dict[str, Any] | None = None,
    trials: dict[int, dict[str, float]] | None = None,
) -> dict[int, dict[str, Any]]:
    """The configuration (``placement`` and inbox ``priority``) that runs ``w``'s row at each of ``keys``, chosen
    before any timed run, so the search is not in the figures. Without ``trials``: the placement ``auto`` chooses
    for the threads backend, with ``THREADS``' priority. With ``trials`` (a dict to fill), that choice, round
    robin, balanced stages and the measured-load split (:func:`measured_load`), each with every inbox order of
    ``PRIORITIES``, are timed on this machine, ``PLACEMENT_TRIALS`` interleaved runs each (one run per distinct
    configuration; ties go to auto's choice with ``THREADS``' priority), and the fastest runs the row: the
    simulator judges placements by a cost model, this machine by its own cores and caches, and the two can
    disagree; ``trials[k]`` keeps the measured instances/s of each, named ``"placement, priority"``."""
    configs: dict[int, dict[str, Any]] = {}
    for k in keys:
        choice = autoplace(w.graph, w.data, max_active_keys=k, optimizer=w.optimizer, costs=costs, seed=seed,
                           min_update_frequency=w.settings.get("min_update_frequency", 1), **THREADS,
                           **(search or {}))  # fmt: skip
        name = choice.chosen.name
        configs[k] = {"placement": choice.placement, "priority": THREADS["priority"]}
        if trials is not None:
            with warnings.catch_warnings():  # a worker with no heavy node is a fact of that placement
                warnings.simplefilter("ignore", UserWarning)
                placements = {name: choice.placement}
                placements.update({s: place(w.graph, THREADS["workers"], strategy=s)
                                   for s in ("round_robin", "balanced")})  # fmt: skip
                placements["measured load"] = measured_load(w, seed, k)
            timed = {f"{n}, {p}": {"placement": pl, "priority": p} for p in PRIORITIES for n, pl in placements.items()}
            rate = functools.partial(_config_rate, w, seed, k)
            name, rates = fastest_placement(timed, rate, PLACEMENT_TRIALS)
            # the winner against itself unbundled, timed together (module docstring, "Bundles")
            pair = {name: timed[name], f"{name}, {UNBUNDLED}": {**timed[name], "max_bundle": 1}}
            name, again = fastest_placement(pair, rate, PLACEMENT_TRIALS)
            configs[k] = pair[name]
            merged = {**rates, **{f"{n} (again)" if n in rates else n: v for n, v in again.items()}}
            if merged:
                trials[k] = merged
        heavy = {n: configs[k]["placement"][n] for n in choice.chosen.heavy}
        measured = "" if trials is None or k not in trials else f" (timed here: {trials[k]})"
        _progress(f"  threads, {w.name}, max_active_keys {k}: {name} {heavy}{measured}")
    return configs


def measured_load(w: Workload, seed: int, k: int) -> dict[str, int]:
    """The measured-load split of ``w`` on the table's workers (:func:`amp_notebook.bench.scaling.measured_load`):
    a traced run on one worker thread at ``k`` keys in flight, with the row's data and settings."""
    from amp_notebook.bench.scaling import measured_load as split

    timed_w = dataclasses.replace(w, data=timed(w))
    return split(timed_w, w.settings.get("engine", DEFAULT_ENGINE), THREADS["workers"], k, seed)


def _config_rate(w: Workload, seed: int, k: int, config: dict[str, Any]) -> float:
    """Training instances/s of one timed run of ``w`` at ``k`` keys in flight with ``config`` (placement, priority)."""
    return _train(w, seed, max_active_keys=k, **{**THREADS, **config}).train_instances_per_s


def threads_rows(
    members: list[Workload],
    costs: dict[str, CostModel],
    repeats: int,
    seed: int,
    search: dict[str, Any] | None = None,
    measure: bool = False,
) -> list[dict[str, Any]]:
    """This machine: every row of a family and the base's peer, ``repeats`` interleaved rounds, medians;
    ``measure``: the candidate configurations are timed here first and the fastest runs (:func:`thread_configs`)."""
    trials: dict[str, dict[int, dict[str, float]]] = {w.name: {} for w in members}
    configs = {w.name: thread_configs(w, costs[w.name], paper.table2_keys(w.name), seed, search,
                                      trials[w.name] if measure else None)
               for w in members}  # fmt: skip

    bounds = bound_rates(members, costs, configs, seed)
    ran: dict[tuple[str, int], str] = {}  # the engine each row ran on
    diverged: dict[tuple[str, int], list[int]] = {}  # the seeds of each row's diverged runs

    def rate(w: Workload, k: int) -> Callable[[], float]:
        knobs = {**THREADS, "max_active_keys": k, **configs[w.name][k]}

        def once() -> float:
            r = _train(w, seed, diverged.setdefault((w.name, k), []), **knobs)
            ran[(w.name, k)] = r.engine
            return r.train_instances_per_s

        return once

    links = LinkLog()  # the CPUs' cache-line round trip around each timed run (module docstring)
    contenders: dict[str, Callable[[], float]] = {
        f"{w.name} mak={k}": links.timed(f"{w.name} mak={k}", rate(w, k))
        for w in members for k in paper.table2_keys(w.name)
    }  # fmt: skip
    base = members[0]
    peer_load: list[float] = []
    if base.peer is not None:
        peer_fn = base.peer

        def peer() -> float:
            peer_load.append(load_1min())
            value = peer_fn()
            peer_load.append(load_1min())
            return value

        contenders["peer"] = peer
    load = [load_1min()]
    medians = interleaved_medians(repeats, contenders)
    load.append(load_1min())
    base_rate, base_rounds = medians[f"{base.name} mak=1"]
    peer_rate, peer_runs = medians.get("peer", (None, None))
    rows = []
    for w in members:
        heavy = [n for n in w.graph.topological_order() if w.graph.nodes[n].kind in HEAVY_KINDS]
        for k in paper.table2_keys(w.name):
            value, rounds = medians[f"{w.name} mak={k}"]
            is_base = w is base and k == 1
            paired, per_round = paired_ratios(rounds, base_rounds)
            name, base_name = f"{w.name} mak={k}", f"{base.name} mak=1"
            near = kept_rounds_ratio(rounds, base_rounds, links.near(name), links.near(base_name))
            bound = bounds[(w.name, k)] / bounds[(base.name, 1)]
            rows.append(row(
                w.name, "threads", k, ran[(w.name, k)], value, base_rate, runs_per_s=rounds, load_1min=load,
                ours_ratio_paired=paired, ratio_per_round=per_round,
                link_ns_per_round=links.trips.get(name, []), ours_ratio_near_link=near["median"],
                near_link_rounds=near["rounds"], bound_per_s=bounds[(w.name, k)], bound_ratio=bound,
                of_bound=value / base_rate / bound if base_rate else None,
                peer_per_s=peer_rate if is_base else None, peer_runs_per_s=peer_runs if is_base else None,
                peer_load_1min=peer_load if is_base and peer_load else None,
                peer_loaded=loaded(peer_load) if is_base and peer_load else None,
                placement={n: configs[w.name][k]["placement"][n] for n in heavy},
                priority=configs[w.name][k]["priority"], max_bundle=configs[w.name][k].get("max_bundle"),
                diverged_runs=diverged[(w.name, k)],
                placement_trials=trials[w.name].get(k),
            ))  # fmt: skip
            _progress(f"  threads, {w.name}, max_active_keys {k}: {value:,.0f} instances/s "
                      f"(rounds {[round(v) for v in rounds]}){_diverged_note(diverged[(w.name, k)])}")  # fmt: skip
    if peer_rate is not None:
        _progress(f"  {base.peer_name}: {peer_rate:,.0f} instances/s (load {peer_load})")
    return rows


def bound_rates(
    members: list[Workload], costs: dict[str, CostModel], configs: dict[str, dict[int, dict[str, Any]]], seed: int
) -> dict[tuple[str, int], float]:
    """What each threads row's graph allows (module docstring, "What 2 workers allow"): simulated training
    instances/s of the row on ``THREADS``' workers, with its configuration, keys in flight and timed keys, and
    the model's calibration (each device one core here, free hand-offs, no driver)."""
    out: dict[tuple[str, int], float] = {}
    for w in members:
        for k in paper.table2_keys(w.name):
            r = _train(w, seed, max_active_keys=k, backend="simulated", costs=costs[w.name],
                       workers=THREADS["workers"], **configs[w.name][k])  # fmt: skip
            out[(w.name, k)] = r.train_instances_per_s
            _progress(f"  bound, 2 simulated workers, {w.name}, max_active_keys {k}: {out[(w.name, k)]:,.0f} "
                      "instances/s (virtual)")  # fmt: skip
    return out


def simulated_rows(members: list[Workload], costs: dict[str, CostModel], seed: int) -> list[dict[str, Any]]:
    """The paper's 16 cores, calibrated from this machine (module docstring): one run per row."""
    diverged: dict[tuple[str, int], list[int]] = {}
    results = {(w.name, k): _train(w, seed, diverged.setdefault((w.name, k), []), max_active_keys=k,
                                   backend="simulated", costs=costs[w.name], **SIMULATED)
               for w in members for k in paper.table2_keys(w.name)}  # fmt: skip
    rates = {at: r.train_instances_per_s for at, r in results.items()}
    base = rates[(members[0].name, 1)]
    rows = []
    for w in members:
        for k in paper.table2_keys(w.name):
            _progress(f"  simulated 16 cores, {w.name}, max_active_keys {k}: {rates[(w.name, k)]:,.0f} "
                      f"instances/s (virtual){_diverged_note(diverged[(w.name, k)])}")  # fmt: skip
            rows.append(row(w.name, "simulated", k, results[(w.name, k)].engine, rates[(w.name, k)], base,
                            diverged_runs=diverged[(w.name, k)]))  # fmt: skip
    return rows


def _diverged_note(seeds: list[int]) -> str:
    """What the progress line says of a row's diverged runs."""
    return f"; {diverged_note(seeds)}" if seeds else ""


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


__all__ = [
    "bound_rates", "calibrate", "families", "row", "run", "simulated_rows", "thread_configs", "threads_rows", "timed",
]  # fmt: skip
