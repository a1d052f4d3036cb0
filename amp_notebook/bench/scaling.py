"""More workers, more throughput? Each model on 1 and 2 (or more) worker threads, on each engine, same run.

AMPNet's first claim is that asynchrony turns more cores into throughput. This benchmark asks it of the
threaded backend directly: the same model, data and settings on 1 worker and on N workers, for

* ``tree``: the Tree-LSTM, one tree per key (the paper's layout);
* ``ggsnn``: the GG-NN, one bAbI-15 graph per key;
* ``tagger``: the BiLSTM tagger, one sentence per key, ``max_active_keys`` 32;
* ``rnn_replicas``: the list-reduction RNN with its step Linear replicated twice behind Cond/Phi;
* ``mlp``: the paper's 4-layer MLP, 100 digits per key;

each on the native engine (worker loops without the GIL) and on the Python engine (one core for every
message's glue). Graphs, data and optimizers are the reproduction's workloads
(:mod:`amp_notebook.reproduce.workloads`, the paper's layouts); the settings are the workload's with mode
``amp``, one epoch of training keys, no validation, no trace recording, the model's ``max_active_keys``
(``MODELS``), the default inbox order (``light_first`` on 2 or more workers, the paper's ``backward_first`` on 1:
:func:`~amp_notebook.runtime.config.default_priority`) and message bundling on (the default for amp runs).
Figure per run: training instances per second. An epoch shorter than
:func:`~amp_notebook.reproduce.workloads.timed_keys` (120 keys, or 20 per key in flight where that is more) is
its training keys repeated to that many, as ``reproduce table2`` times them: the pipeline fills and drains once
per run, and over a short epoch that is much of the run, with fewer keys in flight than the limit and a second
worker idle for want of work (the tagger's 200 sentences at 32 in flight are timed as 800; the Tree-LSTM's, GG-NN's
and RNN's epochs are long enough). The MLP keeps its 15-key epoch (``OWN_EPOCH``), since at its learning rate
longer runs diverge, so its figure includes the pipeline filling and draining (``reproduce table2`` times it over
120 keys, retrying the runs that diverge). Every side of a model (1 and N workers, the placement trials, the
ceiling's copies, the bound's simulation) trains on the same keys.

**Placement, measured here** (``placement="measured"``, the default). Which worker runs which heavy node
decides how well N workers share the work, and the simulator that ``placement="auto"`` consults can rank
placements differently from this machine's cores and caches. So for each engine, model and worker count
above 1, four candidates are timed on this machine before the figures: round robin (the paper's
default), balanced stages, ``autoplace``'s choice (costs measured on that engine), and ``measured load``: the
heavy nodes split so that the busiest worker gets the least of the node time of a traced 1-worker epoch
(:func:`~amp_notebook.runtime.autoplace.split_load`; it ignores waiting, which the timing then judges). Each runs
``PLACEMENT_TRIALS`` times, interleaved; the fastest by median runs the figures (a tie goes to round
robin), and ``placements`` in the JSON keeps every candidate's median and where the chosen one put each
heavy node. On the native engine (not ``--quick``) the heavy nodes' assignments are then searched on this
machine as well, since none of the four need be near the best: on 2 workers here, the GG-NN ran 1.52-1.55x
its 1-worker rate with both of its GRU's Linears on one worker, against 1.25-1.36x with round robin (two
runs), and the simulator ranked that assignment 30th of 64. On 2 workers every assignment is timed
``PLACEMENT_TRIALS`` runs, interleaved (at most ``SEARCH_RUNS`` assignments; the first heavy node stays on
worker 0), elsewhere a local search moves one heavy node at a time; the ``FINALISTS`` fastest are timed one
run more beside the best candidate, and the fastest of those runs the figures (``search`` in the JSON: how
many placements were timed, the finalists' medians). ``placement="round_robin"`` (or any strategy of
``place``) skips the trials and the search.

**The machine's ceiling** (``ceiling=True``, the default; ``--no-ceiling`` skips it). Two workers of one
run can at best do what two unrelated copies of its 1-worker run do side by side on the same cores, and on a
virtual machine that can be well under 2x (:mod:`amp_notebook.bench.copies`). So for each model, 1 copy and
N independent copies of the 1-worker run (separate processes, started together; on the native engine when it
is among those measured, else the Python engine) are timed after the figures, model by model, ``repeats``
rounds interleaved. ``ceiling`` in the JSON maps each model to the copies' throughput at the headline count
over one copy's, and ``of_ceiling`` each engine's ratio over it: the share of what these cores give this
workload that the run turned into throughput.

**What the graph allows** (``bound=True``, the default; ``--no-bound`` skips it). Each model also runs on the
simulator at every count, with the figures' placements and settings and the node costs that
:func:`~amp_notebook.runtime.autoplace.measure_costs` times here on the native engine: a run of this graph
on free hand-offs, with no driver and no core shared with anything (and each message charged its unbundled
cost, so bundling's savings are left out on both sides of the ratio). Its n-worker throughput over its
1-worker throughput is the bound that the graph's own structure sets at these settings (its heavy nodes,
the heaviest node's share of the work, ``max_active_keys`` keys in flight); ``bound`` in the JSON gives it
per model and count, and ``of_bound`` the native ratio over it. Where the bound itself stays low at many
workers, more cores cannot help that graph at these settings; the paper widens such a graph with replicas of
its heavy nodes.

**What the workers waited for** (``waits=True``, the default; ``--no-waits`` skips it). A ratio under the
ceiling means the workers of one run waited on each other. So after the figures, each model runs once more on
the native engine at the headline worker count, with the chosen placement and the trace recording, and
:mod:`amp_notebook.trace.waits` splits each worker's idle time by what ended each wait: a new key, a message
from the other worker, or the key's own step on that worker. Gaps under 20 us between two steps count as
``short``: those are the engine's own work per bundle or a brief wait, which the trace cannot tell apart, so
the same run also reports the workers' own count (:attr:`~amp_notebook.runtime.result.TrainResult.worker_time`:
the shares of each loop's life inside ops, in the engine's own work, and waiting for messages). ``waits`` in the
JSON keeps the split, the top waits and that count per worker; the report prints two lines per worker.

**Steal.** This machine may be a virtual one whose host runs other guests on the same physical cores, and the
CPU time the host takes (steal) is invisible to the load average yet slows a run directly: on the 2-core VM
this benchmark was written on, 2 workers lost 0-29% of the CPUs' time from one run to the next, and their
throughput moved with it by up to 2.6x (:mod:`amp_notebook.runtime.steal`). So every timed run (figures and
copies) records the share of the CPUs' time stolen while it ran. ``steal_per_round`` (per engine, model and
count) and ``ceiling_steal_per_round`` keep them, round by round, and the report prints them. The headline
ratios stay those of the medians of every round. Beside them, ``ratios_low_steal`` gives the median of the
paired ratios (n workers over 1 in the same round) over the rounds where both runs lost at most
``LOW_STEAL`` (5%), with how many rounds those were: what the engine did on the CPUs it was given.

**Links.** Two workers hand each other messages, and each cache line of a message, its payload and the locks on
its way moves between the two CPUs' caches. Where the host runs a virtual machine's CPUs decides how long that
takes, and the host may move them at any time without any steal: on the 2-core VM this benchmark was written
on, a line's round trip flipped between about 80 and 400 ns, and the GG-NN's 2 workers ran at 1.6x one worker
in the near phases and 1.1-1.2x in the far ones (:mod:`amp_notebook.bench.link`). So every timed run records
the round trip just before and just after it (native engine built: about 5 ms each). ``link_ns_per_round``
keeps them, round by round, and the report prints them. Beside the headline (the medians of every round),
``ratios_near_link`` gives the median of the paired ratios over the rounds whose runs both had near links (at
most ``link_near_factor`` times ``link_fastest_ns``, the fastest round trip of the whole benchmark), with how
many rounds those were: what the engine did where the host kept the CPUs close.

**Diverged runs.** Asynchronous training can diverge, and whether a run does can depend on the threads'
timing (the MLP at ``max_active_keys`` 4 on 2 workers, now and then). A timed run (a figure, a placement
trial or a copy of the ceiling) whose training stops at a NaN or infinity runs again from the next seed
(:func:`~amp_notebook.bench.common.retry_diverged`); ``diverged_runs`` (per engine, model and worker count)
and ``ceiling_diverged_runs`` (per model) keep the seeds that diverged, and the report names them.

Every (engine, model, workers) run is a side; the sides run ``repeats`` times, interleaved, the order
flipping every round (``interleaved_medians``), and each is reported by its median with every round beside
it. ``native`` and ``python`` (the JSON's headline) map each model to r = throughput on 2 workers / on 1
worker, of the medians; with other worker counts (``--workers 1,2,4,8,16`` on a bigger machine),
``ratios`` has r for each count against 1 worker, and the headline takes 2 workers when listed, else the
largest count. A 2-core machine caps r at 2; the machine's load is printed and recorded, and flagged when
other processes competed.

**More workers than heavy nodes.** Placement gives workers heavy nodes and lets the light ones follow their
producers, so a graph with k heavy nodes keeps at most k workers busy. ``workers_used`` (per engine, model
and count) says how many workers got a node, and the report flags every count where some got none: such a
run is the smaller one with idle threads beside it, and its figure differs from that one's only by noise.
Replicating a heavy node is what spreads such a graph wider.

On a machine with many cores, ``--engines native`` skips the Python engine's runs (the slow ones, which
one core's GIL caps anyway), ``--models tree,ggsnn`` picks models, and ``--repeats 5`` takes more rounds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from amp_notebook.bench.common import (
    diverged_note,
    fastest_placement,
    interleaved_medians,
    kept_rounds_ratio,
    load_line,
    machine_load,
    paired_ratios,
    report,
    retry_diverged,
)
from amp_notebook.bench.link import NEAR_FACTOR, LinkLog, near, span
from amp_notebook.bench.steal import StealLog, low, percent
from amp_notebook.errors import SettingError
from amp_notebook.runtime.placement import STRATEGIES
from amp_notebook.runtime.result import worker_time_text
from amp_notebook.runtime.steal import LOW_STEAL
from amp_notebook.trace.waits import WorkerWaits
from amp_notebook.trace.waits import summary as waits_summary

# benchmark name -> (reproduction workload, max_active_keys)
MODELS: dict[str, tuple[str, int]] = {
    "tree": ("tree-lstm", 32),
    "ggsnn": ("ggsnn", 16),
    "tagger": ("bilstm-tagger", 32),
    "rnn_replicas": ("rnn-2-replicas", 4),
    "mlp": ("mlp", 4),
}
# Reproduction workloads timed over their own epoch. The MLP's digits at learning rate 0.1 diverge over longer runs
# at 4 keys in flight: repeated to 120 keys, seeds 0-5 all diverged on 1 worker, in every round.
OWN_EPOCH = ("mlp",)
ENGINES = ("native", "python")
DEFAULT_WORKERS = (1, 2)
MEASURED = "measured"  # time the candidate placements on this machine (module docstring)
PLACEMENT_TRIALS = 2  # timed runs of each candidate placement
SEARCH_RUNS = 64  # the measured search's budget in placements (native engine, not --quick)
FINALISTS = 3  # the search's fastest placements, timed again beside the best candidate
SEARCH_MIN_GAIN = 0.03  # a local search step must beat the current placement by this share


def figure_workload(name: str, quick: bool, seed: int, max_active_keys: int) -> Any:
    """The reproduction workload ``name`` as every side of its figures trains it (module docstring): its training
    keys repeated to :func:`~amp_notebook.reproduce.workloads.timed_keys`, except the MLP's (``OWN_EPOCH``)."""
    from amp_notebook.reproduce.workloads import timed_workload, workload

    load = workload(name, quick=quick, seed=seed)
    return load if name in OWN_EPOCH else timed_workload(load, max_active_keys)


def parse_workers(text: str | Sequence[int]) -> tuple[int, ...]:
    """``"1,2,4"`` (or a sequence of ints) as sorted distinct worker counts that include 1."""
    try:
        counts = [int(t) for t in text.split(",")] if isinstance(text, str) else [int(t) for t in text]
    except ValueError:
        raise SettingError("workers", f"--workers: expected counts like 1,2,4; got {text!r}") from None
    if not counts or min(counts) < 1:
        raise SettingError("workers", f"--workers: expected counts >= 1, like 1,2,4; got {text!r}")
    if 1 not in counts:
        raise SettingError("workers", f"--workers: the ratios are against 1 worker; include it, e.g. 1,{text}")
    if len(set(counts)) < 2:
        raise SettingError("workers", f"--workers: expected a count besides 1, like 1,2; got {text!r}")
    return tuple(sorted(set(counts)))


def parse_names(text: str | Sequence[str], known: Sequence[str], what: str) -> tuple[str, ...]:
    """``"tree,ggsnn"`` (or a sequence) as the known names it lists, in ``known``'s order; ``what`` names the
    option (``models`` or ``engines``) in the error."""
    names = [t.strip() for t in text.split(",")] if isinstance(text, str) else [str(t) for t in text]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise SettingError(what, f"--{what}: expected names from {', '.join(known)}, comma-separated; got {text!r}")
    return tuple(n for n in known if n in names)


def workers_used(graph: Any, workers: int, where: str | dict[str, int]) -> int:
    """How many of ``workers`` get any node of ``graph`` under ``where`` (a strategy name or node -> worker).
    A strategy gives the heavy nodes their workers and lets the light ones follow, so a graph with fewer heavy
    nodes than workers leaves the rest idle: that run is a smaller one with idle threads beside it."""
    import warnings

    from amp_notebook.runtime.placement import place

    if isinstance(where, str):
        with warnings.catch_warnings():  # the idle workers are what this counts
            warnings.simplefilter("ignore", UserWarning)
            where = place(graph, workers, strategy=where)
    return len(set(where.values()))


def headline_workers(counts: Sequence[int]) -> int:
    """The count the headline ratios take: 2 when measured, else the largest."""
    return 2 if 2 in counts else max(counts)


def settings(workload: Any, engine: str, max_active_keys: int, seed: int) -> dict[str, Any]:
    """The run settings of every figure (module docstring), placement and workers aside."""
    return {**workload.settings, "mode": "amp", "epochs": 1, "validate": False, "trace": False, "seed": seed,
            "optimizer": workload.optimizer, "max_active_keys": max_active_keys, "engine": engine}  # fmt: skip


def throughput(
    workload: Any, engine: str, workers: int, max_active_keys: int, seed: int, placement: str | dict[str, int],
    diverged: list[int] | None = None,
) -> float:  # fmt: skip
    """Training instances per second of one epoch of ``workload`` on ``workers`` threads of ``engine``, with
    ``placement`` (a strategy name or node -> worker). A run whose training diverges runs again from the next
    seed (:func:`~amp_notebook.bench.common.retry_diverged`); the diverged seeds go into ``diverged``."""
    import warnings

    from amp_notebook.runtime.train import TrainResult, train

    def once(run_seed: int) -> float:
        with warnings.catch_warnings():  # more workers than heavy nodes leave some idle: a fact of that run
            warnings.simplefilter("ignore", UserWarning)
            r = train(workload.graph, workload.data, workers=workers, placement=placement,
                      **settings(workload, engine, max_active_keys, run_seed))  # fmt: skip
        assert isinstance(r, TrainResult) and r.engine == engine
        return r.train_instances_per_s

    return retry_diverged(once, seed, diverged)


def candidates(workload: Any, engine: str, workers: int, max_active_keys: int, seed: int) -> dict[str, dict[str, int]]:
    """The placements timed for a measured figure: round robin, balanced, ``autoplace``'s choice, and the
    split of a traced 1-worker run's node time with the least on the busiest worker
    (:func:`measured_load`)."""
    import warnings

    from amp_notebook.runtime.autoplace import autoplace
    from amp_notebook.runtime.placement import place

    with warnings.catch_warnings():  # a worker with no heavy node is a fact of that candidate
        warnings.simplefilter("ignore", UserWarning)
        out = {s: place(workload.graph, workers, strategy=s) for s in ("round_robin", "balanced")}
        choice = autoplace(workload.graph, workload.data, workers=workers,
                           **settings(workload, engine, max_active_keys, seed))  # fmt: skip
    out[f"auto ({choice.chosen.name})"] = dict(choice.placement)
    out["measured load"] = measured_load(workload, engine, workers, max_active_keys, seed)
    return out


def measured_load(workload: Any, engine: str, workers: int, max_active_keys: int, seed: int) -> dict[str, int]:
    """The placement on ``workers`` whose busiest worker gets the least of each node's time in a traced 1-worker
    epoch (:func:`node_seconds`, bundles included; :func:`~amp_notebook.runtime.autoplace.split_load`, which
    ignores waiting: the timed trials judge that). The light nodes follow the heavy ones, as in ``place``."""
    import warnings

    from amp_notebook.runtime.autoplace import split_load
    from amp_notebook.runtime.placement import place

    seconds = node_seconds(workload, engine, max_active_keys, seed)
    with warnings.catch_warnings():  # a worker left without a node is a fact of that split
        warnings.simplefilter("ignore", UserWarning)
        return place(workload.graph, workers, overrides=split_load(workload.graph, seconds, workers))


def node_seconds(workload: Any, engine: str, max_active_keys: int, seed: int) -> dict[str, float]:
    """Each node's handling time over one traced epoch of ``workload`` on one worker thread of ``engine``, with
    the figures' settings (bundles included): node name -> seconds. The run only times the nodes, so a key whose
    loss or gradients go non-finite is skipped (``on_nonfinite="skip"``) rather than ending it: the MLP's digits at 4
    keys in flight on 1 worker diverged for 8 seeds in a row once. A run that raises anyway runs again from the
    next seed, as the figures' runs do."""
    from amp_notebook.runtime.train import TrainResult, train

    def once(run_seed: int) -> dict[str, float]:
        run = {**settings(workload, engine, max_active_keys, run_seed), "trace": True, "trace_capacity": None,
               "on_nonfinite": "skip"}  # fmt: skip
        r = train(workload.graph, workload.data, workers=1, placement="round_robin", **run)
        assert isinstance(r, TrainResult) and r.trace is not None
        return r.trace.node_seconds()

    return retry_diverged(once, seed)


def measured_placement(
    workload: Any, engine: str, workers: int, max_active_keys: int, seed: int, trials: int,
    diverged: list[int] | None = None, search_runs: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """The fastest of :func:`candidates` on this machine (module docstring): its name, node -> worker, and
    every candidate's median instances/s (``trials``; empty when the candidates are all one placement). With
    ``search_runs``, the heavy nodes' assignments are searched too (:func:`search_placements`, at most that
    many, each timed ``trials`` runs), and the ``FINALISTS`` fastest are timed ``trials + 1`` runs beside the
    best candidate, which the fastest of them replaces (``search`` in the result: the assignments timed, the
    finalists' medians). The seeds of trial runs that diverged go into ``diverged``."""
    import warnings

    from amp_notebook.ir import ops as O
    from amp_notebook.runtime.placement import place

    options = candidates(workload, engine, workers, max_active_keys, seed)

    def rate(placement: dict[str, int]) -> float:
        return throughput(workload, engine, workers, max_active_keys, seed, placement, diverged=diverged)

    name, rates = fastest_placement(options, rate, trials)
    chosen = {"chosen": name, "placement": options[name], "trials": rates, "search": None}
    graph = workload.graph
    heavy = [n for n in graph.topological_order() if graph.nodes[n].kind in O.HEAVY]
    movable = [n for n in heavy if graph.nodes[n].worker is None]  # a pinned node stays where its graph puts it
    if search_runs <= 0 or not movable:
        return chosen

    def full(assignment: dict[str, int]) -> dict[str, int]:  # the light nodes follow, as in place()
        with warnings.catch_warnings():  # a worker left without a node is a fact of that assignment
            warnings.simplefilter("ignore", UserWarning)
            return place(graph, workers, overrides=assignment)

    start = {n: options[name][n] for n in movable}
    timed = search_placements(movable, workers, start, lambda a: rate(full(a)), search_runs, trials)
    finalists = {name: options[name]}
    for assignment, _ in sorted(timed, key=lambda t: -t[1])[:FINALISTS]:
        finalists.setdefault(assignment_name(assignment, workers), full(assignment))
    final, final_rates = fastest_placement(finalists, rate, trials + 1)  # one run more: the last word
    chosen.update(chosen=final, placement=finalists[final], search={"runs": len(timed), "finalists": final_rates})
    return chosen


def assignment_name(assignment: dict[str, int], workers: int) -> str:
    """A searched placement's name: on 2 workers the heavy nodes it gives worker 1, else each node's worker."""
    from amp_notebook.runtime.autoplace import describe

    return "searched: " + describe(assignment, workers)


def search_placements(
    heavy: Sequence[str], workers: int, start: dict[str, int], rate: Callable[[dict[str, int]], float], budget: int,
    trials: int = 1,
) -> list[tuple[dict[str, int], float]]:  # fmt: skip
    """Assignments of the ``heavy`` nodes to ``workers``, each timed ``trials`` runs by ``rate``, interleaved
    (at most ``budget`` assignments); returns every one timed with its median.

    On 2 workers with at most ``budget`` distinct assignments, every one: the first heavy node stays on
    worker 0 (the mirror image is the same run). The simulator that ``autoplace`` consults can rank them far
    from this machine (the GG-NN's fastest assignment here ranked 30th of 64 there), so they are timed, not
    predicted. Otherwise a local search from ``start``: each step times every heavy node moved to each other
    worker, beside the current assignment, and moves to the fastest while it beats the current one by
    ``SEARCH_MIN_GAIN``."""
    from amp_notebook.runtime.autoplace import every_assignment

    heavy = list(heavy)

    def timed(assignments: list[dict[str, int]]) -> list[tuple[dict[str, int], float]]:
        fns = {str(i): functools.partial(rate, a) for i, a in enumerate(assignments)}
        medians = interleaved_medians(trials, fns)
        return [(a, medians[str(i)][0]) for i, a in enumerate(assignments)]

    every = every_assignment(len(heavy), workers, True, budget) if workers == 2 else None
    if every is not None:
        return timed([dict(zip(heavy, a, strict=True)) for a in every])
    current = dict(start)
    seen = {tuple(current[n] for n in heavy)}
    out: list[tuple[dict[str, int], float]] = []
    while len(out) < budget:
        moves = []
        for n in heavy:
            for w in range(workers):
                moved = {**current, n: w}
                key = tuple(moved[h] for h in heavy)
                if key not in seen and len(out) + len(moves) + 1 < budget:
                    seen.add(key)
                    moves.append(moved)
        if not moves:
            break
        step = timed([current, *moves])  # the current one again, beside its neighbours: the same minutes
        here, rest = step[0][1], step[1:]
        out += [(current, here), *rest] if not out else rest
        fastest = max(rest, key=lambda t: t[1])
        if fastest[1] <= here * (1 + SEARCH_MIN_GAIN):
            break
        current = fastest[0]
    return out


def waited_for(
    workload: Any, workers: int, max_active_keys: int, seed: int, placement: str | dict[str, int]
) -> tuple[list[WorkerWaits], list[dict[str, Any]]]:
    """What each native worker waited for (:mod:`amp_notebook.trace.waits`) in one traced epoch of ``workload``
    on ``workers`` threads with ``placement``, and the workers' own count of where their time went
    (``TrainResult.worker_time``); a run that diverges runs again from the next seed."""
    import warnings

    from amp_notebook.runtime.train import TrainResult, train

    def once(run_seed: int) -> tuple[list[WorkerWaits], list[dict[str, Any]]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            r = train(workload.graph, workload.data, workers=workers, placement=placement,
                      **{**settings(workload, "native", max_active_keys, run_seed), "trace": True})  # fmt: skip
        assert isinstance(r, TrainResult) and r.trace is not None and r.worker_time is not None
        return r.trace.waits(), r.worker_time

    return retry_diverged(once, seed, None)


def bound_rates(
    workload: Any, max_active_keys: int, counts: Sequence[int], placements: dict[int, str | dict[str, int]], seed: int
) -> dict[int, float]:
    """Simulated training instances/s of ``workload`` at each count (module docstring, "What the graph
    allows"): node costs measured here on the native engine, each count with its placement and the threaded
    backend's default inbox priority for that count."""
    import warnings

    from amp_notebook.runtime.autoplace import measure_costs
    from amp_notebook.runtime.config import default_priority
    from amp_notebook.runtime.launch import simulate
    from amp_notebook.runtime.placement import place

    run = settings(workload, "native", max_active_keys, seed)
    dtype = run.get("dtype", "float32")
    costs = measure_costs(workload.graph, workload.data, optimizer=workload.optimizer, dtype=dtype, seed=seed,
                          engine="native")  # fmt: skip
    base = {k: v for k, v in run.items() if k not in ("engine", "seed")}  # the simulator chooses its own engine
    out: dict[int, float] = {}
    for n in counts:
        where = placements[n]
        with warnings.catch_warnings():  # idle workers are a fact of that count, reported elsewhere
            warnings.simplefilter("ignore", UserWarning)
            full = place(workload.graph, n, strategy=where) if isinstance(where, str) else dict(where)

            def once(run_seed: int, n: int = n, full: dict[str, int] = full) -> float:
                knobs = {**base, "workers": n, "placement": full, "priority": default_priority(n, "threads")}
                r = simulate(workload.graph, workload.data, costs=costs, backend="simulated", seed=run_seed, **knobs)
                return float(r.train_instances_per_s)

            out[n] = retry_diverged(once, seed)  # a simulated run can diverge as a timed one can
    return out


def ceiling_rates(
    workload: str, engine: str, counts: Sequence[int], max_active_keys: int, quick: bool, seed: int, repeats: int,
    diverged: list[int] | None = None, stolen: StealLog | None = None,
) -> dict[int, tuple[float, list[float]]]:  # fmt: skip
    """Instances/s of ``n`` independent copies of the 1-worker run for each ``n`` in ``counts`` (module
    docstring, :mod:`amp_notebook.bench.copies`): the median and every round, the counts interleaved. The
    seeds of copies' runs that diverged (and ran again) go into ``diverged``; each round's steal share goes
    into ``stolen`` under ``"{workload}/{n}"``."""
    from amp_notebook.bench.copies import Copies

    log = stolen if stolen is not None else StealLog()
    with Copies(workload, max(counts), quick=quick, seed=seed, engine=engine, max_active_keys=max_active_keys) as c:
        fns = {str(n): log.timed(f"{workload}/{n}", functools.partial(c.rate, n)) for n in counts}
        medians = interleaved_medians(repeats, fns)
        if diverged is not None:
            diverged.extend(c.diverged)
    return {int(n): value for n, value in medians.items()}


def run(
    quick: bool = False, repeats: int = 3, seed: int = 0, workers: str | Sequence[int] = DEFAULT_WORKERS,
    models: str | Sequence[str] = tuple(MODELS), engines: str | Sequence[str] = ENGINES, placement: str = MEASURED,
    ceiling: bool = True, waits: bool = True, bound: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Every model on every engine at every worker count (module docstring); ``quick``: a few keys, one
    round and one run per candidate placement (a smoke test: its figures mean nothing); ``placement``:
    ``"measured"`` or a strategy of :func:`~amp_notebook.runtime.placement.place` for every figure;
    ``ceiling``: time the machine's ceiling (independent copies of the 1-worker run) too; ``waits``: split
    the native workers' idle time by what they waited for (one traced run per model); ``bound``: simulate
    what the graph allows at each count (native engine only)."""
    from amp_notebook import engine as native_engine

    if quick:
        repeats = 1
    counts = parse_workers(workers)
    models = parse_names(models, tuple(MODELS), "models")
    engines = parse_names(engines, ENGINES, "engines")
    if placement != MEASURED and placement not in STRATEGIES:
        expected = f"{MEASURED} or one of {list(STRATEGIES)}"
        raise SettingError("placement", f"--placement: expected {expected}; got {placement!r}")
    notes: dict[str, str] = {}
    if "native" in engines and not native_engine.available():
        notes["native"] = f"the native engine is not available here ({native_engine.status().get('reason')})"
        engines = tuple(e for e in engines if e != "native")
    load_before = machine_load()["after"]
    loads = {name: figure_workload(MODELS[name][0], quick, seed, MODELS[name][1]) for name in models}

    chosen: dict[str, dict[str, dict[int, dict[str, Any]]]] = {e: {m: {} for m in models} for e in engines}
    # the seeds of the runs (placement trials and figures) that diverged and ran again from the next seed
    diverged: dict[str, dict[str, dict[int, list[int]]]] = {e: {m: {n: [] for n in counts} for m in models}
                                                            for e in engines}  # fmt: skip
    for e in engines:
        for m in models:
            for n in counts:
                if n == 1 or placement != MEASURED:  # one worker runs every node wherever the strategy says
                    where = placement if placement != MEASURED else "round_robin"
                    chosen[e][m][n] = {"chosen": where, "placement": where, "trials": {}, "search": None}
                else:
                    trials = 1 if quick else PLACEMENT_TRIALS
                    search = SEARCH_RUNS if e == "native" and not quick else 0  # the Python engine's runs are slow
                    chosen[e][m][n] = measured_placement(loads[m], e, n, MODELS[m][1], seed, trials, diverged[e][m][n],
                                                         search_runs=search)  # fmt: skip

    def side(engine: str, name: str, n: int) -> Callable[[], float]:
        where = chosen[engine][name][n]["placement"]
        seeds = diverged[engine][name][n]
        return lambda: throughput(loads[name], engine, n, MODELS[name][1], seed, where, diverged=seeds)

    used = {e: {m: {n: workers_used(loads[m].graph, n, chosen[e][m][n]["placement"]) for n in counts} for m in models}
            for e in engines}  # fmt: skip
    stolen = StealLog()  # each timed run's share of CPU time that the host took (module docstring, "Steal")
    links = LinkLog()  # the CPUs' cache-line round trip around each timed run (module docstring, "Links")
    sides = {f"{e}/{m}/{n}": links.timed(f"{e}/{m}/{n}", stolen.timed(f"{e}/{m}/{n}", side(e, m, n)))
             for e in engines for m in models for n in counts}  # fmt: skip
    medians = interleaved_medians(repeats, sides)
    steal = {e: {m: {n: stolen.shares[f"{e}/{m}/{n}"] for n in counts} for m in models} for e in engines}
    low_steal = {e: {m: {n: low_steal_ratio(rounds_of=medians, steal=steal[e][m], side=f"{e}/{m}", n=n)
                         for n in counts if n != 1} for m in models} for e in engines}  # fmt: skip
    trips = {e: {m: {n: links.trips.get(f"{e}/{m}/{n}", []) for n in counts} for m in models} for e in engines}
    near_link = {e: {m: {n: near_link_ratio(rounds_of=medians, links=links, side=f"{e}/{m}", n=n)
                         for n in counts if n != 1} for m in models} for e in engines}  # fmt: skip
    per_s = {e: {m: {n: medians[f"{e}/{m}/{n}"][0] for n in counts} for m in models} for e in engines}
    rounds = {e: {m: {n: medians[f"{e}/{m}/{n}"][1] for n in counts} for m in models} for e in engines}
    ratios = {e: {m: {n: per_s[e][m][n] / per_s[e][m][1] for n in counts if n != 1} for m in models} for e in engines}
    head = headline_workers(counts)
    copies_engine = "native" if "native" in engines else "python"
    copies_diverged: dict[str, list[int]] = {m: [] for m in (models if ceiling else ())}
    copies_stolen = StealLog()
    copies = {m: ceiling_rates(MODELS[m][0], copies_engine, counts, MODELS[m][1], quick, seed, repeats,
                               diverged=copies_diverged[m], stolen=copies_stolen)
              for m in (models if ceiling else ())}  # fmt: skip
    copies_steal = {m: {n: copies_stolen.shares.get(f"{MODELS[m][0]}/{n}", []) for n in counts} for m in copies}
    ceilings = {m: {n: c[n][0] / c[1][0] if c[1][0] > 0 else 0.0 for n in counts if n != 1} for m, c in copies.items()}
    bounds_per_s = {m: bound_rates(loads[m], MODELS[m][1], counts, {n: chosen["native"][m][n]["placement"]
                                                                   for n in counts}, seed)
                    for m in (models if bound and "native" in engines else ())}  # fmt: skip
    bounds = {m: {n: b[n] / b[1] if b[1] > 0 else 0.0 for n in counts if n != 1} for m, b in bounds_per_s.items()}
    waited = {m: waited_for(loads[m], head, MODELS[m][1], seed, chosen["native"][m][head]["placement"])
              for m in (models if waits and "native" in engines else ())}  # fmt: skip
    load = machine_load(load_before)
    result: dict[str, Any] = {e: {m: ratios[e][m][head] for m in models} if e in engines else None for e in ENGINES}
    result.update({
        "headline_workers": head, "workers": list(counts), "ratios": ratios, "instances_per_s": per_s,
        "rounds_instances_per_s": rounds,
        "ratio_per_round": {e: {m: {n: paired_ratios(rounds[e][m][n], rounds[e][m][1])[1]
                                    for n in counts if n != 1} for m in models} for e in engines},
        "steal_per_round": steal, "low_steal": LOW_STEAL, "ratios_low_steal": low_steal,
        "ceiling_steal_per_round": copies_steal,
        "link_ns_per_round": trips, "link_fastest_ns": links.fastest(), "link_near_factor": NEAR_FACTOR,
        "ratios_near_link": near_link,
        "ceiling": {m: r[head] for m, r in ceilings.items()} if ceiling else None,
        "ceiling_ratios": ceilings, "ceiling_engine": copies_engine if ceiling else None,
        "ceiling_instances_per_s": {m: {n: c[n][0] for n in counts} for m, c in copies.items()},
        "ceiling_rounds_instances_per_s": {m: {n: c[n][1] for n in counts} for m, c in copies.items()},
        "of_ceiling": {e: {m: ratios[e][m][head] / ceilings[m][head] if ceilings[m][head] > 0 else None
                           for m in ceilings} for e in engines},
        "bound": bounds if bounds else None, "bound_instances_per_s": bounds_per_s,
        "of_bound": {m: {n: ratios["native"][m][n] / r if r > 0 else None for n, r in b.items()}
                     for m, b in bounds.items()},
        "placement": placement,
        "placements": {e: {m: {n: _heavy_only(loads[m], chosen[e][m][n]) for n in counts if n != 1} for m in models}
                       for e in engines},
        "settings": {m: {"workload": MODELS[m][0], "max_active_keys": MODELS[m][1],
                         "keys": len(loads[m].data.train), "layout": loads[m].layout} for m in models},
        "workers_used": used,
        "waits": {m: [{**w.as_dict(), "worker_time": t} for w, t in zip(ws, times, strict=True)]
                  for m, (ws, times) in waited.items()} if waited else None,
        "diverged_runs": diverged, "ceiling_diverged_runs": copies_diverged,
        "repeats": repeats, "seed": seed, "quick": quick, "notes": notes, "load_average_1min": load,
    })  # fmt: skip
    rows: list[tuple[str, Any]] = [("", f"instances/s at {counts} workers (median; rounds)   ratio vs 1 worker")]
    for e in engines:
        for m in models:
            figures = ", ".join(f"{per_s[e][m][n]:.0f} ({'/'.join(f'{v:.0f}' for v in rounds[e][m][n])})"
                                for n in counts)  # fmt: skip
            gains = ", ".join(f"{ratios[e][m][n]:.2f}x at {n}" for n in counts if n != 1)
            rows.append((f"{e} {m}", f"{figures}   {gains}"))
    rows += steal_rows(steal, low_steal, counts)
    rows += link_rows(trips, near_link, counts, links.fastest())
    for m, c in copies.items():
        figures = ", ".join(f"{c[n][0]:.0f} ({'/'.join(f'{v:.0f}' for v in c[n][1])})" for n in counts)
        top = ceilings[m][head]
        shares = ", ".join(f"{e} {ratios[e][m][head] / top:.0%}" for e in engines if top > 0)
        taken = "; ".join(f"{n}: {'/'.join(percent(v) for v in copies_steal[m][n])}" for n in counts
                          if copies_steal[m][n])  # fmt: skip
        rows.append((f"ceiling {m}", f"{figures}   {top:.2f}x at {head}; reached: {shares}"
                                     + (f"; steal at {taken}" if taken else "")))  # fmt: skip
    if copies:
        rows.append(("ceiling", f"independent copies of the 1-worker run ({copies_engine}) at once: what these cores "
                                "give the workload; 'reached' is each engine's ratio over it"))  # fmt: skip
    for m, b in bounds.items():
        gains = ", ".join(f"{b[n]:.2f}x at {n} (native {ratios['native'][m][n] / b[n]:.0%})" if b[n] > 0 else
                          f"0 at {n}" for n in counts if n != 1)  # fmt: skip
        rows.append((f"bound {m}", gains))
    if bounds:
        rows.append(("bound", "the simulator on this machine's node costs (native), free hand-offs, no driver: what "
                              "the graph allows at these settings; the share is the native ratio over it"))  # fmt: skip
    for e in engines:
        for m in models:
            for n in counts:
                if n != 1 and placement == MEASURED:
                    c = chosen[e][m][n]
                    timed = ", ".join(f"{k} {v:.0f}" for k, v in c["trials"].items()) or "one candidate"
                    found = c.get("search")
                    if found:
                        finals = ", ".join(f"{k} {v:.0f}" for k, v in found["finalists"].items()) or "none"
                        timed += f"; searched: {found['runs']} placements timed, the fastest again: {finals}"
                    rows.append((f"{e} {m} placement at {n}", f"{c['chosen']} (timed here, instances/s: {timed})"))
                if used[e][m][n] < n:
                    rows.append((f"{e} {m} at {n}", f"only {used[e][m][n]} of the {n} workers get a node (the graph "
                                                    "has too few heavy nodes): the rest stay idle"))  # fmt: skip
    for m, (ws, times) in waited.items():
        for line, t in zip(waits_summary(ws).splitlines(), times, strict=True):
            rows.append((f"native {m} at {head}, waits", line))
            rows.append((f"native {m} at {head}, own count", worker_time_text([t])))
    if waited:
        rows.append(("waits", "one traced run per model: each worker's idle time by what ended each wait (a new key, "
                              "a message from the other worker, the key's own step here: 'local'; gaps under 20 us: "
                              "'short'); 'own count': the worker loop's own split of its life"))  # fmt: skip
    for e in engines:
        for m in models:
            for n in counts:
                if diverged[e][m][n]:
                    rows.append((f"{e} {m} at {n}: diverged", diverged_note(diverged[e][m][n])))
    for m, seeds in copies_diverged.items():
        if seeds:
            rows.append((f"ceiling {m}: diverged", diverged_note(seeds)))
    rows += [("runs per side", f"{repeats}, interleaved, order flipped every round; medians shown"), load_line(load)]
    rows += [(f"note ({k})", v) for k, v in notes.items()]
    print(report(rows))
    return result


def low_steal_ratio(
    rounds_of: dict[str, tuple[float, list[float]]], steal: dict[int, list[float | None]], side: str, n: int
) -> dict[str, Any]:
    """The ratio n workers over 1 from the rounds where the host took little (module docstring, "Steal"):
    :func:`~amp_notebook.bench.common.kept_rounds_ratio` over the rounds whose runs both lost at most
    ``LOW_STEAL``."""
    many, one = rounds_of[f"{side}/{n}"][1], rounds_of[f"{side}/1"][1]
    return kept_rounds_ratio(many, one, [low(v) for v in steal[n]], [low(v) for v in steal[1]])


def near_link_ratio(
    rounds_of: dict[str, tuple[float, list[float]]], links: LinkLog, side: str, n: int
) -> dict[str, Any]:
    """The ratio n workers over 1 from the rounds whose runs both had near links (module docstring, "Links"):
    :func:`~amp_notebook.bench.common.kept_rounds_ratio` over them."""
    many, one = rounds_of[f"{side}/{n}"][1], rounds_of[f"{side}/1"][1]
    return kept_rounds_ratio(many, one, links.near(f"{side}/{n}"), links.near(f"{side}/1"))


def kept_text(kept: dict[int, dict[str, Any]]) -> str:
    """Each count's ratio over the kept rounds (:func:`~amp_notebook.bench.common.kept_rounds_ratio`), as the
    report prints it."""
    return ", ".join(f"no round at {n}" if r["median"] is None else
                     f"{r['median']:.2f}x at {n} ({r['rounds']} of {r['of']} rounds)"
                     for n, r in kept.items())  # fmt: skip


def steal_rows(
    steal: dict[str, dict[str, dict[int, list[float | None]]]], low_steal: dict[str, dict[str, dict[int, Any]]],
    counts: Sequence[int],
) -> list[tuple[str, str]]:  # fmt: skip
    """The report's rows on steal: per engine and model each count's rounds, and the ratio over the rounds
    where little was stolen; then a line that says what steal is and how much of the figures it touched."""
    rows = []
    shares = [v for by_model in steal.values() for by_n in by_model.values() for runs in by_n.values() for v in runs]
    for e, by_model in steal.items():
        for m, by_n in by_model.items():
            taken = "; ".join(f"{n}: {'/'.join(percent(v) for v in by_n[n])}" for n in counts)
            rows.append((f"steal {e} {m}", f"{taken}   rounds with at most {LOW_STEAL:.0%} stolen: "
                                            f"{kept_text(low_steal[e][m])}"))  # fmt: skip
    known = [v for v in shares if v is not None]
    high = sum(1 for v in known if v > LOW_STEAL)
    text = ("the share of the CPUs' time the host took from this virtual machine during each run (/proc/stat); "
            "a run that lost much of it is slower for a reason outside the machine")  # fmt: skip
    if not known:
        text = "unknown here (no /proc/stat): " + text
    elif high:
        text += f". Over {LOW_STEAL:.0%} in {high} of {len(known)} timed runs: the medians above include them"
    return [*rows, ("steal", text)] if shares else rows


def link_rows(
    trips: dict[str, dict[str, dict[int, list[tuple[float | None, float | None]]]]],
    near_link: dict[str, dict[str, dict[int, Any]]], counts: Sequence[int], fastest: float | None,
) -> list[tuple[str, str]]:  # fmt: skip
    """The report's rows on the CPUs' links: per engine and model each count's round trips (before/after each
    round's run, ns) and the ratio over the rounds whose links were near; then a line that says what the round
    trip is and how many timed runs had a far one."""
    pairs = [p for by_model in trips.values() for by_n in by_model.values() for runs in by_n.values() for p in runs]
    if not pairs:
        return []
    rows = []
    for e, by_model in trips.items():
        for m, by_n in by_model.items():
            seen = "; ".join(f"{n}: {', '.join(span(p) for p in by_n[n])}" for n in counts)
            rows.append((f"link {e} {m}", f"{seen}   rounds with near links: {kept_text(near_link[e][m])}"))
    text = ("a cache line's round trip between the first two CPUs, just before and just after each run (ns): where "
            "the host runs the virtual CPUs, which it may change at any time; each message between workers pays "
            "it")  # fmt: skip
    if fastest is None:
        return [*rows, ("link", "unknown here (no native engine, or one CPU): " + text)]
    far = sum(1 for p in pairs if not near(p, fastest))
    text += f"; near: at most {NEAR_FACTOR:g}x the fastest ({fastest:.0f} ns)"
    if far:
        text += f". Far in {far} of {len(pairs)} timed runs: the medians above include them"
    return [*rows, ("link", text)]


def _heavy_only(workload: Any, choice: dict[str, Any]) -> dict[str, Any]:
    """A chosen placement as the JSON keeps it: where it put each heavy node (a strategy stays a name)."""
    from amp_notebook.ir import ops as O

    where = choice["placement"]
    if isinstance(where, dict):
        graph = workload.graph
        where = {n: w for n, w in where.items() if graph.nodes[n].kind in O.HEAVY}
    return {**choice, "placement": where}
