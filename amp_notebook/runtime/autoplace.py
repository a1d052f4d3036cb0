"""Placement by simulation: what ``train(..., placement="auto")`` does before the run starts.

Which worker should run each heavy node? The answer depends on the node costs, the mode, max_active_keys,
min_update_frequency and the inbox priority together (the 4-layer MLP on 2 workers gains 1.5x over sync
with the paper's round robin and 1.8x with contiguous stages). Rather than a rule, :func:`autoplace`
asks the simulated backend, which runs the same session, controller and workers in virtual time:

1. **Costs.** On simulated hardware the run's own :class:`~amp_notebook.runtime.costs.CostModel`. On this
   machine, :func:`measure_costs` runs a short ``sync`` training on one worker thread over the first
   ``measure_keys`` training keys, with tracing on, and fixes each node's forward, backward and update time
   per message (a :class:`~amp_notebook.runtime.costs.NodeCost` per node: the heavy nodes' matrix work and
   the light nodes' glue alike): each key's time at the node over its messages there, then the median over
   the keys. A join's arrivals differ (the last one computes, the others are stored), so a median over
   single rows would give the cheap arrival's time; the mean of one key's rows charges each message its
   share of the whole, and the median over keys keeps one key slowed by the machine from moving the figure.
   The costs come from the engine the run itself uses (its ``engine``
   setting: a native run's nodes are timed on the native engine). A node the sample never reached (a
   replica no sampled key was routed to) falls back to :func:`~amp_notebook.runtime.calibrate.this_cpu`'s
   formula for that engine: FLOPs over this core's measured FLOP/s plus the engine's measured per-message
   overhead. A node cost is one time per message whatever the payload's shape: right for keys of one bucket size, a
   typical value otherwise. A fixed node cost is charged for every message of a bundle (``max_bundle`` >
   1), so the predictions leave out what bundling saves; the search only ranks placements by them.
2. **Workload.** ``keys`` training keys (the first ones, repeated if the dataset is smaller), the run's
   mode, max_active_keys, min_update_frequency, inbox priority and order, max_bundle, optimizer, dtype and
   initial parameters;
   no validation, no trace. Every candidate runs exactly this workload, so the ranking is fair; the
   predicted throughput is training instances per virtual second over it (its fill and drain included).
3. **Candidates.** ``round_robin`` (the paper's default), ``balanced`` (contiguous stages), the ``load split``
   (:func:`split_load`: the heavy nodes split so that the busiest worker gets the least of each node's time in
   a simulated run of the workload on one worker; only where the workers are interchangeable), then every
   assignment of the heavy nodes to the workers where there are at most ``max_evaluations`` of them, else a
   local search from the fastest of the three. The load split balances work and leaves waiting to the
   simulator; it reaches splits that a local search from the other two can miss where there are too many
   assignments to simulate them all (the tagger's 10 heavy nodes make 512 on 2 workers). Where the workers
   are interchangeable (no node is pinned, every device equally fast, no link set apart), two assignments
   that differ only in the workers' names are one run, simulated once: the GG-NN's 7 heavy nodes on 2
   workers make 64. The neighbours of a placement in the
   local search are every heavy node moved to another worker and every two heavy nodes on different workers
   swapped; the fastest neighbour replaces the current placement while it beats it by more than ``min_gain``,
   for at most ``max_evaluations`` simulations in all. (A local search can stop at a placement the simulator
   itself ranks below others; on the GG-NN it came within 1.5% of the simulator's best.) Light
   nodes follow their producers as in :func:`~amp_notebook.runtime.placement.place` (the heavy nodes' workers
   are given to it as overrides); pinned nodes (``Node.worker``) never move.
4. **Choice.** The fastest prediction wins; a later candidate must beat the best so far by more than
   ``min_gain`` (0.5%), so ties go to the earlier one and the paper's round robin stands unless something
   is measurably better.

Given its costs the search is deterministic (the simulator is). Measured costs vary between calls on a
shared machine, so :class:`AutoPlacement` keeps them: ``autoplace(..., costs=choice.costs)`` repeats the
choice exactly. The result reports every candidate's predicted throughput; ``TrainResult.summary()`` puts
the measured throughput of the real run beside the prediction.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from amp_notebook.data.batch import Dataset
from amp_notebook.ir import ops as O
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.message import PHASES
from amp_notebook.optim import DEFAULT_OPTIMIZER
from amp_notebook.runtime.calibrate import this_cpu
from amp_notebook.runtime.config import RunConfig
from amp_notebook.runtime.costs import CostModel, NodeCost
from amp_notebook.runtime.launch import backend_for, build_session, result_of, simulate
from amp_notebook.runtime.placement import PlacementError, place

PHASE_FIELDS = tuple(f"{name}_s" for name in PHASES)  # NodeCost's field for each trace phase
DEFAULT_MAX_EVALUATIONS = 64
DEFAULT_MIN_GAIN = 0.005
SPLIT_ASSIGNMENTS = 4096  # split_load tries every assignment up to this many (arithmetic, no simulation)
AUTOPLACE_OPTIONS = ("params", "costs", "keys", "measure_keys", "max_evaluations", "min_gain")  # not settings


@dataclass
class Candidate:
    """One simulated placement: its name, where its heavy nodes go, and its predicted throughput."""

    name: str
    heavy: dict[str, int]
    predicted_per_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "heavy": dict(self.heavy), "predicted_per_s": self.predicted_per_s}


@dataclass
class AutoPlacement:
    """The chosen placement (every node -> worker), the candidates tried and the costs they were judged by."""

    placement: dict[str, int]
    chosen: Candidate
    candidates: list[Candidate]
    costs: CostModel
    costs_source: str  # "measured on this machine" or "the run's cost model"
    keys_simulated: int
    search_s: float
    config: RunConfig  # the settings every candidate was simulated with (placement aside)

    @property
    def predicted_per_s(self) -> float:
        return self.chosen.predicted_per_s

    def summary(self) -> dict[str, Any]:
        """JSON-ready: the choice, its prediction, every candidate, and how the costs were obtained."""
        return {
            "chosen": self.chosen.name,
            "heavy": dict(self.chosen.heavy),
            "predicted_per_s": self.chosen.predicted_per_s,
            "candidates": [c.as_dict() for c in self.candidates],
            "costs": self.costs_source,
            "node_costs_s": {
                n: {k: v for k, v in c.__dict__.items() if v is not None} for n, c in self.costs.nodes.items()
            },
            "keys_simulated": self.keys_simulated,
            "search_s": self.search_s,
        }


def measure_costs(
    graph: Graph,
    dataset: Dataset,
    *,
    measure_keys: int = 16,
    optimizer: Any = DEFAULT_OPTIMIZER,
    params: dict[str, dict[str, np.ndarray]] | None = None,
    dtype: str = "float32",
    seed: int = 0,
    engine: str = "auto",
) -> CostModel:
    """Each node's handling times on this machine, from a short traced sync run on one worker thread of
    ``engine`` (the ``engine`` setting's values; "auto" resolves as a run's does).

    Returns :func:`~amp_notebook.runtime.calibrate.this_cpu` for the engine that ran, with a :class:`NodeCost`
    for every node the sample reached: its forward, backward and update time per message (module docstring,
    step 1).
    """
    sample = Dataset(dataset.name, _cycle(dataset.train, measure_keys), [], dataset.num_classes, dataset.meta)
    start = params if params is not None else graph.init_params(seed, np.dtype(dtype))
    config = RunConfig(workers=1, mode="sync", optimizer=optimizer, dtype=dtype, seed=seed, validate=False,
                       shuffle=False, trace=True, trace_capacity=None, engine=engine)  # fmt: skip
    session, spec = build_session(graph, sample, config, start)
    runner = backend_for(session)
    runner.run()
    r = result_of(session, runner, spec)
    seconds = per_message_seconds(r.trace.events())
    nodes: dict[str, NodeCost] = {}
    for index, name in enumerate(r.trace.node_names):
        times = {field: seconds[(index, p)] for p, field in enumerate(PHASE_FIELDS) if (index, p) in seconds}
        if times:
            nodes[name] = NodeCost(**times)
    return this_cpu(engine=r.engine, nodes=nodes)


def per_message_seconds(events: dict[str, np.ndarray]) -> dict[tuple[int, int], float]:
    """(node, phase) -> seconds per message, from trace event columns (``Trace.events``): each key's time
    there over its messages there, then the median over the keys (module docstring, step 1)."""
    per_key: dict[tuple[int, int], dict[int, list[float]]] = {}  # (node, phase) -> key -> [seconds, messages]
    columns = (events[c].tolist() for c in ("node", "phase", "key", "start", "end", "messages"))
    for node, phase, key, t0, t1, messages in zip(*columns, strict=True):
        total = per_key.setdefault((node, phase), {}).setdefault(key, [0.0, 0])
        total[0] += t1 - t0
        total[1] += messages
    return {where: statistics.median(s / n for s, n in keys.values()) for where, keys in per_key.items()}


def _measured_engine(config: RunConfig) -> str:
    """The engine to time nodes on for ``config``: its own on threads; on Ray (whose workers run the Python
    engine) the Python engine. (On simulated hardware nothing is measured: the run's cost model judges.)"""
    return config.engine if config.backend == "threads" else "python"


def autoplace(
    graph: Graph,
    dataset: Dataset,
    config: RunConfig | None = None,
    *,
    params: dict[str, dict[str, np.ndarray]] | None = None,
    costs: CostModel | None = None,
    keys: int | None = None,
    measure_keys: int = 16,
    max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
    min_gain: float = DEFAULT_MIN_GAIN,
    **settings: Any,
) -> AutoPlacement:
    """Choose a placement of ``graph`` on ``config.workers`` by simulating candidates (module docstring).

    ``config`` (a :class:`~amp_notebook.runtime.config.RunConfig`, all defaults when None) with ``settings``
    changed by keyword is the run to place: its workers, mode, max_active_keys, min_update_frequency, inbox
    priority and order, max_bundle, optimizer, dtype and seed shape the simulated workload (its placement,
    backend and validation do not). ``costs`` judges the candidates (measured on this machine with
    :func:`measure_costs` when None); ``keys`` is the simulated workload in training keys (default
    ``4 * max_active_keys``, at least 16 and at most 48); ``max_evaluations`` bounds the simulations;
    ``min_gain`` is the relative margin a candidate needs over the best so far.
    """
    config = RunConfig.from_options(config, settings, "autoplace", also=AUTOPLACE_OPTIONS)
    workers = config.workers
    if max_evaluations < 2:
        raise PlacementError(
            f"autoplace max_evaluations: expected at least 2 (round robin and balanced), got {max_evaluations}"
        )
    if not dataset.train:
        raise PlacementError(
            f"placement auto: dataset {dataset.name!r} has no training keys to simulate; give it training keys "
            "or choose a placement strategy"
        )
    began = time.perf_counter()
    dtype = config.dtype
    initial = params if params is not None else graph.init_params(config.seed, np.dtype(dtype))
    spec = RunConfig.setting("optimizer").to_json(config.optimizer)  # a fresh optimizer for every run
    source = "the run's cost model"
    if costs is None:
        costs = measure_costs(graph, dataset, measure_keys=measure_keys, optimizer=spec, params=initial, dtype=dtype,
                              seed=config.seed, engine=_measured_engine(config))  # fmt: skip
        source = "measured on this machine"
    n_keys = keys if keys is not None else min(48, max(16, 4 * config.max_active_keys))
    workload = Dataset(dataset.name, _cycle(dataset.train, n_keys), [], dataset.num_classes, dataset.meta)
    heavy = [n for n in graph.topological_order() if graph.nodes[n].kind in O.HEAVY]
    pinned = {n for n in heavy if graph.nodes[n].worker is not None}
    movable = [n for n in heavy if n not in pinned]
    symmetric = _interchangeable(graph, costs)
    # the workload's settings: the run's, simulated, one pass over the workload without validation or trace
    # (engine "auto": the simulator has no engine to choose; a run that asks for "native" by name is placed too).
    # The inbox priority is the one the run will use: its default follows the backend (light_first on 2 or more
    # threads or Ray workers), and the simulator's own default is the paper's backward_first.
    base = config.replace(optimizer=spec, backend="simulated", engine="auto", address=None, epochs=1, validate=False,
                          shuffle=False, trace=False, placement="round_robin",
                          priority=config.inbox_priority)  # fmt: skip
    cache: dict[tuple[int, ...], float] = {}

    def signature(assignment: dict[str, int]) -> tuple[int, ...]:
        return _signature(assignment, heavy, symmetric)

    def predict(assignment: dict[str, int]) -> float:
        key = signature(assignment)
        if key not in cache:
            cache[key] = _simulate(graph, workload, base.replace(placement=dict(assignment)), costs, initial)
        return cache[key]

    def heavy_of(strategy: str) -> dict[str, int]:
        with warnings.catch_warnings():  # an idle worker is a fact of that candidate, reported by its speed
            warnings.simplefilter("ignore", UserWarning)
            full = place(graph, workers, strategy=strategy)
        return {n: full[n] for n in heavy}

    candidates = [Candidate(s, heavy_of(s), 0.0) for s in ("round_robin", "balanced")]
    if workers > 1 and movable and symmetric:  # the even split of one worker's simulated node time (split_load)
        seconds = simulated_node_seconds(graph, workload, base, costs, initial)
        split = {**candidates[0].heavy, **split_load(graph, seconds, workers)}
        if signature(split) not in {signature(c.heavy) for c in candidates}:
            candidates.append(Candidate("load split", split, 0.0))
    for c in candidates:
        c.predicted_per_s = predict(c.heavy)
    every = every_assignment(len(movable), workers, symmetric, max_evaluations)
    if every is not None:
        for workers_of in every:
            assignment = {**candidates[0].heavy, **dict(zip(movable, workers_of, strict=True))}
            if signature(assignment) not in cache:
                candidates.append(Candidate(f"every assignment: {describe(assignment, workers)}", assignment,
                                            predict(assignment)))  # fmt: skip
    current = _pick(candidates, min_gain)
    step = 0
    while every is None and len(cache) < max_evaluations:
        neighbours = [n for n in _neighbours(current.heavy, movable, workers) if signature(n[1]) not in cache]
        if not neighbours:
            break
        step += 1
        tried: list[Candidate] = []
        for name, assignment in neighbours:
            if len(cache) >= max_evaluations:
                break
            tried.append(Candidate(f"local search {step}: {name}", assignment, predict(assignment)))
        candidates.extend(tried)
        fastest = _pick(tried, 0.0)
        if fastest.predicted_per_s <= current.predicted_per_s * (1 + min_gain):
            break
        current = fastest
    chosen = _pick(candidates, min_gain)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        placement = place(graph, workers, overrides=dict(chosen.heavy))
    return AutoPlacement(
        placement=placement, chosen=chosen, candidates=candidates, costs=costs, costs_source=source,
        keys_simulated=n_keys, search_s=time.perf_counter() - began, config=base,
    )  # fmt: skip


def split_load(graph: Graph, seconds: dict[str, float], workers: int, limit: int = SPLIT_ASSIGNMENTS) -> dict[str, int]:
    """The heavy nodes' workers (movable ones; pinned ones keep theirs) that leave the busiest worker the least
    of ``seconds`` (node -> handling time over a run on one worker), the light nodes following their producers
    as in :func:`~amp_notebook.runtime.placement.place`. Every assignment where there are at most ``limit``
    (the workers' names ignored unless a node is pinned; ties go to the first in :func:`every_assignment`'s
    order), else a local search from
    round robin that moves one heavy node at a time while the busiest worker's load falls.

    It balances work and ignores waiting, which the simulator (or a timing) then judges. It finds splits
    that neither contiguous stages nor a local search from them need reach: the tagger's two character LSTMs
    take about half of its time, and the even split puts one direction with the character input on one
    worker and everything else on the other."""
    heavy = [n for n in graph.topological_order() if graph.nodes[n].kind in O.HEAVY]
    movable = [n for n in heavy if graph.nodes[n].worker is None]

    def busiest(assignment: dict[str, int]) -> float:
        with warnings.catch_warnings():  # a worker left without a node is a fact of that assignment
            warnings.simplefilter("ignore", UserWarning)
            full = place(graph, workers, overrides=assignment)
        load = [0.0] * workers
        for name, w in full.items():
            load[w] += seconds.get(name, 0.0)
        return max(load)

    if not movable:
        return {}
    pinned = len(movable) < len(heavy)  # then renaming the workers changes the split: try both ways round
    every = every_assignment(len(movable), workers, not pinned, limit)
    if every is not None:
        return min((dict(zip(movable, a, strict=True)) for a in every), key=busiest)  # min keeps the first of equals
    current = {n: i % workers for i, n in enumerate(movable)}
    here = busiest(current)
    while True:
        best = min(({**current, n: w} for n in movable for w in range(workers) if w != current[n]), key=busiest)
        if busiest(best) >= here:
            return current
        current, here = best, busiest(best)


def simulated_node_seconds(
    graph: Graph, workload: Dataset, config: RunConfig, costs: CostModel, params: dict[str, dict[str, np.ndarray]]
) -> dict[str, float]:
    """Each node's handling time (virtual seconds) in a simulated run of ``workload`` on one worker, ``config``'s
    settings otherwise (a node pinned to another worker runs on that one too): what :func:`split_load` splits."""
    alone = config.replace(workers=1, placement=dict.fromkeys(graph.nodes, 0), trace=True, trace_capacity=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        r = simulate(graph, workload, alone, costs, params=params)
    return r.trace.node_seconds() if r.trace is not None else {}


def _pick(candidates: list[Candidate], min_gain: float) -> Candidate:
    """The fastest candidate; a later one must beat the best so far by more than ``min_gain``."""
    best = candidates[0]
    for c in candidates[1:]:
        if c.predicted_per_s > best.predicted_per_s * (1 + min_gain):
            best = c
    return best


def describe(assignment: dict[str, int], workers: int) -> str:
    """An assignment of heavy nodes in words: on 2 workers the nodes worker 1 runs, else each node's worker."""
    if workers == 2:
        return "worker 1 runs " + (", ".join(n for n, w in assignment.items() if w == 1) or "no heavy node")
    return ", ".join(f"{n} on {w}" for n, w in assignment.items())


def _interchangeable(graph: Graph, costs: CostModel) -> bool:
    """Whether renaming the workers changes nothing: no node pinned, every device as fast and no link set apart
    (costs measured on this machine describe one core for all)."""
    if any(node.worker is not None for node in graph.nodes.values()):
        return False
    flops = costs.flops
    return not costs.links and (not isinstance(flops, (list, tuple)) or len(set(flops)) <= 1)


def _signature(assignment: dict[str, int], heavy: list[str], symmetric: bool) -> tuple[int, ...]:
    """The heavy nodes' workers in order; with interchangeable workers renamed by first appearance (0, then 1,
    ...), so that two assignments that differ only in the names are one."""
    workers = tuple(assignment[n] for n in heavy)
    if not symmetric:
        return workers
    names: dict[int, int] = {}
    return tuple(names.setdefault(w, len(names)) for w in workers)


def every_assignment(nodes: int, workers: int, symmetric: bool, limit: int) -> list[tuple[int, ...]] | None:
    """Every assignment of ``nodes`` nodes to ``workers`` workers (with interchangeable workers one per renaming:
    each node takes a worker already used or the next new one), or None when there are more than ``limit``."""
    out: list[tuple[int, ...]] = []

    def grow(prefix: tuple[int, ...], used: int) -> bool:
        if len(prefix) == nodes:
            out.append(prefix)
            return len(out) <= limit
        for w in range(min(workers, used + 1) if symmetric else workers):
            if not grow((*prefix, w), max(used, w + 1)):
                return False
        return True

    return out if grow((), 0) else None


def _neighbours(assignment: dict[str, int], movable: list[str], workers: int) -> list[tuple[str, dict[str, int]]]:
    """Every movable heavy node moved to each other worker, then every two on different workers swapped."""
    out: list[tuple[str, dict[str, int]]] = []
    for name in movable:
        for w in range(workers):
            if w != assignment[name]:
                out.append((f"move {name} to worker {w}", {**assignment, name: w}))
    for i, a in enumerate(movable):
        for b in movable[i + 1 :]:
            if assignment[a] != assignment[b]:
                out.append((f"swap {a} and {b}", {**assignment, a: assignment[b], b: assignment[a]}))
    return out


def _simulate(
    graph: Graph, workload: Dataset, config: RunConfig, costs: CostModel, params: dict[str, dict[str, np.ndarray]]
) -> float:
    """Training instances per virtual second of the workload with the placement ``config`` gives."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        r = simulate(graph, workload, config, costs, params=params)
    return r.train_instances_per_s if math.isfinite(r.train_instances_per_s) else 0.0


def _cycle(keys: list[Any], n: int) -> list[Any]:
    """The first ``n`` keys, starting over from the first when there are fewer."""
    return [keys[i % len(keys)] for i in range(n)]


__all__ = [
    "AutoPlacement", "Candidate", "autoplace", "describe", "every_assignment", "measure_costs",
    "simulated_node_seconds", "split_load",
]  # fmt: skip
