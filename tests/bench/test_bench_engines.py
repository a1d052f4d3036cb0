"""The benchmarks' engine figures: every new JSON key and option, without timing anything that is asserted.

The comparisons' result assembly is checked with their training sides replaced by fakes that return fixed
throughputs (so the ratios are known exactly); the overhead and scaling benchmarks also run for real on a
few keys, their figures only checked to be positive.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from amp_notebook import engine as native_engine
from amp_notebook.bench import ggsnn_vs_torch, overhead, rnn_vs_torch, scaling, speedup, tagger_vs_torch, tree_vs_torch
from amp_notebook.bench.common import load_line, machine_load
from amp_notebook.bench.registry import run_benchmark
from amp_notebook.cli import main
from amp_notebook.errors import AmpError, SettingError
from amp_notebook.ir import ops as O
from amp_notebook.trace.waits import WorkerWaits

needs_native = pytest.mark.skipif(not native_engine.available(), reason="the native engine is not built here")


def last_json_line(text: str) -> dict[str, Any]:
    return json.loads(text.strip().splitlines()[-1])


def test_machine_load_flags_a_busy_machine() -> None:
    load = machine_load(before=1e6)
    assert load["before"] == 1e6 and load["busy"] is True and load["cpus"] >= 1
    assert "BUSY" in load_line(load)[1]
    quiet = {"before": 0.0, "after": 0.0, "cpus": 2, "busy": False}
    assert "BUSY" not in load_line(quiet)[1]


@needs_native
def test_overhead_reports_both_engines_in_one_run(capsys: pytest.CaptureFixture[str]) -> None:
    result = overhead.run(repeats=2, keys=10)
    assert result["us_per_message"] > 0 and result["us_per_message_native"] > 0
    assert len(result["repeats_us"]) == len(result["repeats_us_native"]) == 2
    assert result["python_over_native"] == pytest.approx(result["us_per_message"] / result["us_per_message_native"])
    assert {"before", "after", "cpus", "busy"} <= result["load_average_1min"].keys()
    assert "native engine: us per message" in capsys.readouterr().out


def test_overhead_without_the_native_engine_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_engine, "available", lambda: False)
    monkeypatch.setattr(native_engine, "status", lambda: {"available": False, "reason": "not built (test)"})
    result = overhead.run(repeats=1, keys=5)
    assert result["us_per_message_native"] is None and result["native_unavailable"] == "not built (test)"


@pytest.mark.parametrize(
    ("text", "counts"), [("1,2", (1, 2)), ("2,1,2", (1, 2)), ("1,2,4,8,16", (1, 2, 4, 8, 16)), ((1, 4), (1, 4))]
)
def test_scaling_reads_worker_lists(text: Any, counts: tuple[int, ...]) -> None:
    assert scaling.parse_workers(text) == counts


@pytest.mark.parametrize("text", ["2,4", "1", "1,x", "0,1,2", ""])
def test_scaling_refuses_worker_lists_without_a_comparison(text: str) -> None:
    with pytest.raises(SettingError, match="workers"):
        scaling.parse_workers(text)


@pytest.mark.parametrize(
    ("text", "names"), [("tree", ("tree",)), ("mlp,tree", ("tree", "mlp")), (["ggsnn", "tree"], ("tree", "ggsnn"))]
)
def test_scaling_reads_model_lists_in_its_own_order(text: Any, names: tuple[str, ...]) -> None:
    assert scaling.parse_names(text, tuple(scaling.MODELS), "models") == names


@pytest.mark.parametrize("text", ["", "trees", "tree,lstm", ","])
def test_scaling_refuses_unknown_models_and_says_which_exist(text: str) -> None:
    with pytest.raises(SettingError, match=r"--models: expected names from tree, ggsnn, tagger") as info:
        scaling.parse_names(text, tuple(scaling.MODELS), "models")
    assert repr(text) in str(info.value)


def test_scaling_counts_the_workers_a_placement_uses() -> None:
    """The Tree-LSTM has 4 heavy nodes: on 8 workers every strategy leaves 4 of them without a node."""
    from amp_notebook.reproduce.workloads import workload

    graph = workload("tree-lstm", quick=True).graph
    assert scaling.workers_used(graph, 2, "round_robin") == 2
    assert scaling.workers_used(graph, 8, "round_robin") == scaling.workers_used(graph, 8, "balanced") == 4
    assert scaling.workers_used(graph, 3, {name: 0 for name in graph.nodes}) == 1


def test_scaling_takes_models_engines_and_rounds_and_flags_idle_workers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--models``, ``--engines`` and ``--repeats`` reach the runs; a count with idle workers is flagged."""
    monkeypatch.setattr(native_engine, "available", lambda: True)
    calls: list[tuple[str, str, int]] = []

    def fake(workload: Any, engine: str, workers: int, *args: Any, **kwargs: Any) -> float:
        calls.append((workload.name, engine, workers))
        return 100.0 * workers

    monkeypatch.setattr(scaling, "throughput", fake)
    monkeypatch.setattr(scaling, "bound_rates", lambda *args: pytest.fail("simulated with --no-bound"))
    argv = ["bench", "scaling", "--json", "--workers", "1,2,8", "--models", "tree", "--engines", "native",
            "--repeats", "2", "--placement", "round_robin", "--no-ceiling", "--no-waits", "--no-bound"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    out = last_json_line(captured.out)
    assert sorted(set(calls)) == [("tree-lstm", "native", n) for n in (1, 2, 8)] and len(calls) == 3 * 2
    assert out["python"] is None and set(out["native"]) == {"tree"} and out["repeats"] == 2 and out["bound"] is None
    assert out["workers_used"] == {"native": {"tree": {"1": 1, "2": 2, "8": 4}}}
    assert "native tree at 8" in captured.err and "only 4 of the 8 workers get a node" in captured.err
    assert captured.err.count("workers get a node") == 1  # 1 and 2 workers both hold nodes


@needs_native
def test_the_simulated_bound_of_one_worker_spread_over_two_is_one_worker() -> None:
    """Every node on worker 0 of 2 is the 1-worker run (the simulator is deterministic), and a placement over
    both workers is allowed more."""
    from amp_notebook.reproduce.workloads import workload

    load = workload("mlp", quick=True)
    alone = {name: 0 for name in load.graph.nodes}
    rates = scaling.bound_rates(load, 4, (1, 2), {1: "round_robin", 2: alone}, seed=0)
    assert rates[1] > 0 and rates[2] == pytest.approx(rates[1], rel=0.02)
    spread = scaling.bound_rates(load, 4, (1, 2), {1: "round_robin", 2: "balanced"}, seed=0)
    assert spread[2] > 1.2 * spread[1]


@pytest.mark.parametrize("bad", ["0", "-1", "x"])
def test_bench_refuses_a_round_count_below_one(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "overhead", "--repeats", bad])
    assert info.value.code == 2 and "expected a whole number of rounds >= 1" in capsys.readouterr().err


def test_models_engines_and_repeats_are_refused_where_not_taken() -> None:
    with pytest.raises(SettingError, match="bench overhead takes no --models"):
        run_benchmark("overhead", models="tree")
    with pytest.raises(SettingError, match="bench overhead takes no --engines"):
        run_benchmark("overhead", engines="native")
    with pytest.raises(SettingError, match="bench ggsnn-vs-torch takes no --repeats"):
        run_benchmark("ggsnn-vs-torch", repeats=2)


def test_scaling_headline_takes_2_workers_when_measured() -> None:
    assert scaling.headline_workers((1, 2, 4)) == 2
    assert scaling.headline_workers((1, 4, 16)) == 16


def test_scaling_json_has_the_ratio_of_every_model_on_every_engine(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(native_engine, "available", lambda: True)
    calls: list[tuple[str, str, int, int]] = []

    def fake(
        workload: Any, engine: str, workers: int, max_active_keys: int, seed: int, placement: Any, diverged: Any = None
    ) -> float:
        assert placement == (placement if workers == 1 else "round_robin") and diverged == []
        calls.append((workload.name, engine, workers, max_active_keys))
        return 100.0 * workers ** (0.5 if engine == "native" else 0.0)

    monkeypatch.setattr(scaling, "throughput", fake)
    copied: list[tuple[str, str, tuple[int, ...], int]] = []

    def ceiling(
        workload: str, engine: str, counts: Any, keys: int, quick: bool, seed: int, repeats: int, diverged: Any = None,
        stolen: Any = None,
    ) -> Any:  # fmt: skip
        copied.append((workload, engine, tuple(counts), keys))
        for n in counts:  # one round, each count losing a tenth of the CPUs' time to the host
            stolen.shares.setdefault(f"{workload}/{n}", []).append(0.1)
        return {n: (100.0 * n**0.75, [100.0 * n**0.75]) for n in counts}  # copies: 2 of them give 2**0.75

    monkeypatch.setattr(scaling, "ceiling_rates", ceiling)
    traced: list[tuple[str, int, int, Any]] = []

    def waited(workload: Any, workers: int, keys: int, seed: int, placement: Any) -> Any:
        traced.append((workload.name, workers, keys, placement))
        times = [{"worker": w, "loop_s": 1.0, "ops_s": 0.6, "engine_s": 0.15, "waiting_s": 0.25, "asleep_s": 0.0,
                  "sleeps": 3, "bundles": 10, "messages": 20, "cpu_s": 0.9, "no_core_s": 0.1}
                 for w in range(2)]  # fmt: skip
        return [WorkerWaits(w, 1.0, 0.75, 0.25, {"a new key": 0.05, f"worker {1 - w}": 0.2}) for w in range(2)], times

    monkeypatch.setattr(scaling, "waited_for", waited)
    bounded: list[tuple[str, int, tuple[int, ...], Any]] = []

    def bound(workload: Any, keys: int, counts: Any, placements: Any, seed: int) -> dict[int, float]:
        bounded.append((workload.name, keys, tuple(counts), placements))
        return {n: 100.0 * n**0.6 for n in counts}

    monkeypatch.setattr(scaling, "bound_rates", bound)
    assert main(["bench", "scaling", "--quick", "--json", "--workers", "1,2,4", "--placement", "round_robin"]) == 0
    captured = capsys.readouterr()
    out = last_json_line(captured.out)
    assert set(out["native"]) == set(out["python"]) == {"tree", "ggsnn", "tagger", "rnn_replicas", "mlp"}
    assert out["native"]["tree"] == pytest.approx(2**0.5) and out["python"]["mlp"] == pytest.approx(1.0)
    assert out["ratios"]["native"]["ggsnn"]["4"] == pytest.approx(2.0) and out["headline_workers"] == 2
    assert out["workers"] == [1, 2, 4] and out["settings"]["tagger"]["max_active_keys"] == 32
    assert ("bilstm-tagger", "native", 4, 32) in calls and ("rnn-2-replicas", "python", 1, 4) in calls
    assert len(calls) == 5 * 2 * 3  # every model, engine and count once (--quick: one round)
    # the machine's ceiling: copies of every model's 1-worker run on the default engine, at every count
    assert ("bilstm-tagger", "native", (1, 2, 4), 32) in copied and len(copied) == 5
    assert out["ceiling_engine"] == "native" and out["ceiling"]["tree"] == pytest.approx(2**0.75)
    assert out["ceiling_ratios"]["mlp"]["4"] == pytest.approx(2**1.5)
    assert out["of_ceiling"]["native"]["tree"] == pytest.approx(2**-0.25)
    assert out["of_ceiling"]["python"]["mlp"] == pytest.approx(2**-0.75)
    assert "ceiling tree" in captured.err and "native 84%" in captured.err
    assert out["ceiling_steal_per_round"]["tagger"] == {"1": [0.1], "2": [0.1], "4": [0.1]}
    assert "steal at 1: 10%; 2: 10%; 4: 10%" in captured.err
    assert out["diverged_runs"]["native"]["tree"]["2"] == [] and out["ceiling_diverged_runs"]["mlp"] == []
    assert "diverged" not in captured.err
    # what the native workers waited for: one traced run per model at the headline count, its placement
    assert sorted(traced) == sorted((w, 2, k, "round_robin") for w, k in scaling.MODELS.values())
    assert out["waits"]["ggsnn"][1]["by_cause"] == {"a new key": 0.05, "worker 0": 0.2}
    assert "worker 1: busy 75%, idle 25% (20% worker 0, 5% a new key)" in captured.err
    assert out["waits"]["ggsnn"][1]["worker_time"]["engine_s"] == 0.15
    assert "w1 ops 60% engine 15% waiting 25% (3 sleeps), no core 10%" in captured.err
    # what the graph allows: one simulated run per model and count, with the figures' placements
    assert sorted(b[:3] for b in bounded) == sorted((w, k, (1, 2, 4)) for w, k in scaling.MODELS.values())
    assert all(b[3] == {1: "round_robin", 2: "round_robin", 4: "round_robin"} for b in bounded)
    assert out["bound"]["tree"]["4"] == pytest.approx(4**0.6)
    assert out["of_bound"]["ggsnn"]["2"] == pytest.approx(2**-0.1)
    assert "bound tree" in captured.err and "1.52x at 2 (native 93%)" in captured.err


def _nan(*args: object, **kwargs: object) -> Any:
    from amp_notebook.runtime.numerics import NonFiniteError

    raise NonFiniteError("loss", "SoftmaxCrossEntropy", "loss", [3], "the loss of key 3 is nan")


def test_a_scaling_run_that_diverges_runs_again_from_the_next_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A diverged run (NaN/inf) is timed again from the next seed, its seed kept; every run diverging ends with
    the error after DIVERGE_TRIES runs."""
    from amp_notebook.bench.common import DIVERGE_TRIES
    from amp_notebook.runtime import train as train_module
    from amp_notebook.runtime.result import TrainResult

    seeds: list[int] = []

    class Done(TrainResult):
        def __init__(self) -> None:  # only what throughput() reads
            self.engine, self.train_instances, self.wall_s = "python", 246, 2.0

    def nan_twice(graph: Any, data: Any, **settings: Any) -> Any:
        seeds.append(settings["seed"])
        return _nan() if len(seeds) <= 2 else Done()

    monkeypatch.setattr(train_module, "train", nan_twice)
    load = type("Load", (), {"graph": None, "data": None, "settings": {}, "optimizer": None})()
    diverged: list[int] = []
    assert scaling.throughput(load, "python", 2, 4, 7, "round_robin", diverged=diverged) == 123.0
    assert seeds == [7, 8, 9] and diverged == [7, 8]

    monkeypatch.setattr(train_module, "train", _nan)
    diverged = []
    with pytest.raises(AmpError, match="key 3 is nan"):
        scaling.throughput(load, "python", 2, 4, 0, "round_robin", diverged=diverged)
    assert diverged == list(range(DIVERGE_TRIES))


def test_scaling_reports_the_seeds_that_diverged(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(native_engine, "available", lambda: True)

    def fake(workload: Any, engine: str, workers: int, keys: int, seed: int, placement: Any, diverged: Any) -> float:
        if engine == "native" and workers == 2:
            diverged.append(seed)  # as throughput() records a diverged run before the one that finished
        return 10.0 * workers

    def ceiling(workload: str, engine: str, counts: Any, *args: Any, diverged: Any, stolen: Any) -> Any:
        diverged.append(5)
        return {n: (10.0 * n, [10.0 * n]) for n in counts}

    monkeypatch.setattr(scaling, "throughput", fake)
    monkeypatch.setattr(scaling, "ceiling_rates", ceiling)
    out = run_benchmark("scaling", quick=True, placement="round_robin", models=("mlp",), waits=False)
    assert out["waits"] is None
    assert out["diverged_runs"] == {"native": {"mlp": {1: [], 2: [0]}}, "python": {"mlp": {1: [], 2: []}}}
    assert out["ceiling_diverged_runs"] == {"mlp": [5]}
    printed = capsys.readouterr().out
    assert "native mlp at 2: diverged" in printed
    assert "1 run(s) diverged (NaN/inf) and ran again from the next seed (seeds [0])" in printed
    assert "ceiling mlp: diverged" in printed and "python mlp at 2: diverged" not in printed


def test_a_copy_whose_run_diverges_runs_again_from_the_next_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ceiling's copies retry a diverged run as the figures do, and say which seeds diverged (the copy's
    loop runs here, in this process, on a fake pipe)."""
    from amp_notebook.bench import copies
    from amp_notebook.runtime import train as train_module

    seeds: list[int] = []

    class Done:
        wall_s, train_instances = 0.5, 40

    def nan_on_the_first_timed_run(graph: Any, data: Any, **settings: Any) -> Any:
        seeds.append(settings["seed"])
        return _nan() if len(seeds) == 2 else Done()  # the warm-up run finishes; the first timed one diverges

    class Pipe:
        def __init__(self) -> None:
            self.sent: list[Any] = []
            self.requests = [("run", 0.0), ("quit",)]

        def send(self, message: Any) -> None:
            self.sent.append(message)

        def recv(self) -> Any:
            return self.requests.pop(0)

    monkeypatch.setattr(train_module, "train", nan_on_the_first_timed_run)
    pipe = Pipe()
    copies._copy(pipe, "mlp", True, 3, "python", 4)  # type: ignore[arg-type]
    assert pipe.sent[0] == ("ready",) and seeds == [3, 3, 4]
    kind, _start, _end, instances, diverged = pipe.sent[1]
    assert kind == "ran" and instances == 40 and diverged == [3]


def test_scaling_without_the_ceiling_times_no_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_engine, "available", lambda: True)
    monkeypatch.setattr(scaling, "throughput", lambda *args, **kwargs: 10.0)
    monkeypatch.setattr(
        scaling, "ceiling_rates", lambda *args, **kwargs: pytest.fail("copies timed with ceiling=False")
    )
    out = run_benchmark("scaling", quick=True, placement="round_robin", models=("mlp",), ceiling=False, waits=False,
                        bound=False)  # fmt: skip
    assert out["ceiling"] is None and out["of_ceiling"] == {"native": {}, "python": {}} and out["native"]["mlp"] == 1.0


def test_no_ceiling_is_refused_by_a_benchmark_without_one() -> None:
    with pytest.raises(SettingError, match="bench overhead takes no --ceiling"):
        run_benchmark("overhead", ceiling=False)


@needs_native
def test_copies_run_the_one_worker_run_side_by_side() -> None:
    """Real processes, real runs (the quick MLP): each count gives a positive rate; a workload that cannot be
    built fails with the copy's own error, and the copies are gone afterwards."""
    from amp_notebook.bench.copies import Copies, CopyError

    with Copies("mlp", 2, quick=True, seed=0, engine="native", max_active_keys=4) as copies:
        assert copies.rate(1) > 0 and copies.rate(2) > 0
        with pytest.raises(SettingError, match="expected 1 to 2 copies"):
            copies.rate(3)
        procs = list(copies._procs)
    assert procs and not any(p.is_alive() for p in procs)
    with pytest.raises(CopyError, match="a copy of the no-such-model run failed"):
        Copies("no-such-model", 1, quick=True, seed=0, engine="native", max_active_keys=4)


def test_scaling_runs_the_placement_that_was_fastest_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured placement: every candidate is timed (interleaved, PLACEMENT_TRIALS runs each), the fastest
    runs the figures, and the JSON keeps the trials and where the chosen one put the heavy nodes."""
    monkeypatch.setattr(native_engine, "available", lambda: True)
    monkeypatch.setattr(scaling, "SEARCH_RUNS", 0)  # the candidates alone (the search has its own tests)
    stages = {"l1": 0, "l2": 0, "l3": 1, "l4": 1}
    options = {"round_robin": {"l1": 0, "l2": 1, "l3": 0, "l4": 1}, "balanced": stages, "auto (balanced)": stages}
    monkeypatch.setattr(scaling, "candidates", lambda *args: dict(options))
    speed = {0: 100.0, 1: 150.0}  # balanced (l2 on worker 0) is faster
    timed: list[Any] = []

    def fake(workload: Any, engine: str, workers: int, keys: int, seed: int, placement: Any, diverged: Any) -> float:
        if workers == 1:
            return 80.0
        timed.append(placement)
        return speed[0] if placement["l2"] == 1 else speed[1]

    monkeypatch.setattr(scaling, "throughput", fake)
    monkeypatch.setattr(scaling, "_heavy_only", lambda workload, choice: choice)
    result = scaling.run(repeats=3, models=("mlp",), engines=("native",), waits=False, bound=False)
    chosen = result["placements"]["native"]["mlp"][2]
    assert chosen["chosen"] == "balanced" and chosen["placement"] == stages
    assert chosen["trials"] == {"round_robin": 100.0, "balanced": 150.0}  # auto's equal choice is not timed again
    assert timed[: 2 * scaling.PLACEMENT_TRIALS].count(stages) == scaling.PLACEMENT_TRIALS
    assert timed[2 * scaling.PLACEMENT_TRIALS :] == [stages] * 3  # the figures ran the chosen placement
    assert result["native"]["mlp"] == pytest.approx(150.0 / 80.0)


def test_the_search_times_every_assignment_on_two_workers_with_the_first_node_kept_on_worker_0() -> None:
    heavy = ["a", "b", "c", "d"]
    timed = scaling.search_placements(heavy, 2, dict.fromkeys(heavy, 0), lambda a: 10.0 + a["c"] - a["b"], 64)
    assert len(timed) == 8 and all(a["a"] == 0 for a, _ in timed)
    assert len({tuple(a.values()) for a, _ in timed}) == 8
    best, fastest = max(timed, key=lambda t: t[1])
    assert fastest == 11.0 and best["b"] == 0 and best["c"] == 1


def test_the_search_moves_one_node_at_a_time_where_every_assignment_is_too_many() -> None:
    """Three workers: a local search from the start, one node moved per step, to the fastest while it gains
    more than SEARCH_MIN_GAIN, within the budget; each placement reported once."""
    heavy = ["a", "b", "c"]
    goal = {"a": 2, "b": 1, "c": 0}

    def rate(a: dict[str, int]) -> float:  # closer to the goal is faster
        return 100.0 + 20.0 * sum(a[n] == goal[n] for n in heavy)

    timed = scaling.search_placements(heavy, 3, {"a": 0, "b": 0, "c": 0}, rate, 64)
    best = max(timed, key=lambda t: t[1])
    assert best[0] == goal and best[1] == 160.0
    keys = [tuple(a.values()) for a, _ in timed]
    assert len(keys) == len(set(keys))
    assert len(scaling.search_placements(heavy, 3, {"a": 0, "b": 0, "c": 0}, rate, 5)) == 5  # the budget holds
    flat = scaling.search_placements(heavy, 3, {"a": 0, "b": 0, "c": 0}, lambda a: 100.0, 64)
    assert len(flat) == 1 + 6  # no step gains: the search stops after the first
    runs: list[dict[str, int]] = []
    scaling.search_placements(["a", "b"], 2, {"a": 0, "b": 0}, lambda a: runs.append(a) or 1.0, 64, trials=3)
    assert len(runs) == 2 * 3  # each assignment timed `trials` runs, the order flipping every round
    assert runs[:2] == runs[2:4][::-1]


def test_a_measured_placement_takes_the_searchs_finalist_when_it_is_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search's fastest assignments are timed again beside the best candidate, and the fastest runs."""
    from amp_notebook.reproduce.workloads import workload

    load = workload("mlp", quick=True, seed=0)
    heavy = [n for n in load.graph.topological_order() if load.graph.nodes[n].kind in O.HEAVY]
    target = {n: (1 if i in (1, 2) else 0) for i, n in enumerate(heavy)}  # the second and third on worker 1
    rr = {n: i % 2 for i, n in enumerate(heavy)}
    monkeypatch.setattr(scaling, "candidates", lambda *args: {"round_robin": dict(rr)})

    def fake(workload: Any, engine: str, workers: int, keys: int, seed: int, placement: Any, diverged: Any) -> float:
        return 200.0 if all(placement[n] == w for n, w in target.items()) else 100.0

    monkeypatch.setattr(scaling, "throughput", fake)
    chosen = scaling.measured_placement(load, "native", 2, 4, 0, 2, search_runs=64)
    assert {n: chosen["placement"][n] for n in heavy} == target
    assert chosen["chosen"] == "searched: worker 1 runs " + ", ".join(heavy[1:3])
    assert chosen["search"]["runs"] == 2 ** (len(heavy) - 1)
    assert chosen["search"]["finalists"][chosen["chosen"]] == 200.0
    assert scaling.measured_placement(load, "native", 2, 4, 0, 2)["search"] is None  # no budget: the candidates


def test_paired_ratios_divide_each_round_by_the_same_round_of_the_base() -> None:
    from amp_notebook.bench.common import paired_ratios

    # the machine drifts between rounds: the ratio of the medians is 330 / 200 = 1.65, two rounds of three 2x
    assert paired_ratios([200.0, 400.0, 330.0], [100.0, 200.0, 300.0]) == (2.0, [2.0, 2.0, 1.1])
    assert paired_ratios([4.0, 9.0, 5.0, 1.0], [2.0, 3.0, 0.0, 1.0]) == (2.0, [2.0, 3.0, None, 1.0])
    assert paired_ratios([1.0], [0.0]) == (None, [None])
    with pytest.raises(ValueError):
        paired_ratios([1.0, 2.0], [1.0])


def test_fastest_placement_breaks_ties_toward_the_first_listed() -> None:
    from amp_notebook.bench.common import fastest_placement

    a, b = {"x": 0}, {"x": 1}
    assert fastest_placement({"a": a, "b": b}, lambda p: 10.0, 2) == ("a", {"a": 10.0, "b": 10.0})
    assert fastest_placement({"a": a, "b": b}, lambda p: 10.0 + p["x"], 1)[0] == "b"
    assert fastest_placement({"a": a, "same": dict(a)}, lambda p: 1 / 0, 2) == ("a", {})  # one placement: no timing


def test_scaling_refuses_an_unknown_placement() -> None:
    with pytest.raises(SettingError, match="--placement: expected measured"):
        scaling.run(quick=True, models=("mlp",), placement="diagonal")


def test_scaling_runs_for_real_on_a_few_keys(capsys: pytest.CaptureFixture[str]) -> None:
    engines = ("native", "python") if native_engine.available() else ("python",)
    result = scaling.run(quick=True, models=("mlp",), engines=engines)
    for engine in engines:
        assert result[engine]["mlp"] > 0
        assert all(v > 0 for v in result["instances_per_s"][engine]["mlp"].values())
    printed = capsys.readouterr().out
    assert "mlp" in printed
    if "native" in engines:  # the traced run: every worker's idle time split, and a line per worker
        found = result["waits"]["mlp"]
        assert [w["worker"] for w in found] == [0, 1] and all(w["busy_s"] > 0 for w in found)
        assert all(sum(w["by_cause"].values()) == pytest.approx(w["idle_s"]) for w in found)
        assert "native mlp at 2, waits" in printed and "worker 1: busy" in printed
        assert all(w["worker_time"]["loop_s"] > w["worker_time"]["ops_s"] > 0 for w in found)
        assert "native mlp at 2, own count" in printed and "w1 ops " in printed
        assert result["bound"]["mlp"][2] > 0 and result["of_bound"]["mlp"][2] > 0 and "bound mlp" in printed
    else:
        assert result["waits"] is None and result["bound"] is None


def test_no_waits_is_refused_by_a_benchmark_without_them() -> None:
    with pytest.raises(SettingError, match="bench overhead takes no --waits"):
        run_benchmark("overhead", waits=False)


def test_only_scaling_takes_a_workers_list() -> None:
    with pytest.raises(SettingError, match="bench overhead takes no --workers"):
        run_benchmark("overhead", quick=True, workers="1,2")


def _side(rate: float, engine: str, **extra: Any) -> dict[str, Any]:
    return {"instances_per_s": rate, "final_metric": 0.5, "root_accuracy": 0.25, "engine": engine, "curve": [0.5],
            "settings": {}, **extra}  # fmt: skip


def test_tree_vs_torch_adds_python_engine_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    rates = {"ours": 40.0, "ours_per_tree": 30.0, "ours_python": 10.0, "ours_per_tree_python": 5.0}
    monkeypatch.setattr(tree_vs_torch, "ours", lambda data, epochs, seed, side: _side(
        rates.get(side, 20.0), "python" if side.endswith("_python") else "native"))  # fmt: skip
    monkeypatch.setattr(tree_vs_torch, "torch_side", lambda data, epochs, seed, batched: _side(
        60.0 if batched else 15.0, "torch"))  # fmt: skip
    result = tree_vs_torch.run(quick=True)
    assert result["ratio_per_tree_vs_batched"] == pytest.approx(0.5)  # 30 / 60
    assert result["ratio_per_tree_2_workers_vs_batched"] == pytest.approx(20 / 60)
    assert result["ratio_per_tree_vs_eager"] == pytest.approx(2.0)
    assert result["ratio_vs_batched"] == pytest.approx(40 / 60)
    assert result["engine_gain"] == pytest.approx(4.0) and result["engine_gain_per_tree"] == pytest.approx(6.0)
    assert result["ours_per_tree_python"]["engine"] == "python" and result["ours_per_tree"]["engine"] == "native"
    assert tree_vs_torch.SIDES["ours_per_tree_python"][1]["engine"] == "python"
    assert "engine" not in tree_vs_torch.SIDES["ours_per_tree"][1]  # the headline runs the default engine


def test_ggsnn_vs_torch_adds_python_engine_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    rates = {"ours": 40.0, "ours_per_graph": 30.0, "ours_python": 10.0, "ours_per_graph_python": 3.0}
    monkeypatch.setattr(ggsnn_vs_torch, "ours", lambda task, tg, vg, epochs, seed, side: _side(
        rates.get(side, 20.0), "python" if side.endswith("_python") else "native"))  # fmt: skip
    monkeypatch.setattr(ggsnn_vs_torch, "torch_side", lambda task, tg, vg, epochs, seed, scatter: _side(
        60.0 if scatter else 20.0, "torch"))  # fmt: skip
    result = ggsnn_vs_torch.run(quick=True)
    assert result["ratio_per_graph_vs_scatter"] == pytest.approx(0.5) and result["ratio_vs_dense"] == pytest.approx(2.0)
    assert result["engine_gain"] == pytest.approx(4.0) and result["engine_gain_per_graph"] == pytest.approx(10.0)
    assert ggsnn_vs_torch.SIDES["ours_per_graph_python"][1]["engine"] == "python"


def test_tagger_vs_torch_ratio_vs_eager_uses_the_default_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_ours(data: Any, epochs: int, seed: int, max_active_keys: int, max_bundle: int = 1,
                  engine: str = "auto") -> dict[str, Any]:  # fmt: skip
        rate = {("auto", 32): 12.0, ("auto", 1): 6.0, ("python", 32): 3.0}[(engine, max_active_keys)]
        return _side(rate + (max_bundle > 1), "python" if engine == "python" else "native")

    monkeypatch.setattr(tagger_vs_torch, "ours", fake_ours)
    monkeypatch.setattr(tagger_vs_torch, "torch_side", lambda data, epochs, seed, batched: _side(
        24.0 if batched else 4.0, "torch"))  # fmt: skip
    result = tagger_vs_torch.run(quick=True)
    assert result["ratio_vs_eager"] == pytest.approx(3.0) and result["ratio_vs_batched"] == pytest.approx(0.5)
    assert result["engine_gain"] == pytest.approx(4.0) and result["speedup_mak32_vs_mak1"] == pytest.approx(2.0)
    assert result["ours_mak32_python"]["engine"] == "python" and result["ratio_vs_eager_per_round"] == [3.0]


def test_rnn_vs_torch_adds_the_python_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_ours(data: Any, target: float, max_epochs: int, seed: int, engine: str = "auto") -> dict[str, Any]:
        rate = 2000.0 if engine == "python" else 8000.0
        return {"instances_per_s": rate, "engine": "python" if engine == "python" else "native",
                "time_to_target_s": None, "epochs_to_target": None}  # fmt: skip

    monkeypatch.setattr(rnn_vs_torch, "ours", fake_ours)
    monkeypatch.setattr(rnn_vs_torch, "torch_baseline", lambda data, target, max_epochs, seed: {
        "instances_per_s": 4000.0, "time_to_target_s": None, "epochs_to_target": None})  # fmt: skip
    monkeypatch.setattr(rnn_vs_torch, "list_reduction_dataset", lambda **kwargs: None)
    result = rnn_vs_torch.run(quick=True)
    assert result["throughput_ratio"] == pytest.approx(2.0) and result["engine_gain"] == pytest.approx(4.0)
    assert result["ours_python"]["engine"] == "python" and "busy" in result["load_average_1min"]


def test_speedup_adds_the_python_engine_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    class Fake:
        auto_placement = None

        def __init__(self, mode: str, engine: str) -> None:
            self.engine = "python" if engine == "python" else "native"
            self.train_instances_per_s = (300.0 if mode == "amp" else 100.0) / (3.0 if engine == "python" else 1.0)

    seen: list[str] = []

    def fake_train(graph: Any, data: Any, **settings: Any) -> Fake:
        seen.append(settings.get("engine", "auto"))
        return Fake(settings["mode"], settings.get("engine", "auto"))

    monkeypatch.setattr(speedup, "train", fake_train)
    monkeypatch.setattr(speedup, "TrainResult", Fake)
    monkeypatch.setattr(speedup, "blas_two_thread_scaling", lambda: 1.9)
    result = speedup.run(quick=True)
    assert result["ratio"] == pytest.approx(3.0) and result["engine"] == "native"
    assert result["python_amp_per_s"] == pytest.approx(100.0) and result["python_ratio"] == pytest.approx(3.0)
    assert seen.count("python") == 2 * 3  # the Python pair, every round


@needs_native
def test_node_seconds_times_every_node_of_a_traced_one_worker_epoch() -> None:
    from amp_notebook.reproduce.workloads import workload

    load = workload("mlp", quick=True, seed=0)
    seconds = scaling.node_seconds(load, "native", 4, 0)
    heavy = [n for n in load.graph.nodes if load.graph.nodes[n].kind in O.HEAVY]
    assert set(seconds) == set(load.graph.nodes) and all(seconds[n] > 0 for n in heavy)
    assert all(v >= 0 for v in seconds.values())


def test_every_figure_of_a_short_epoch_trains_on_its_keys_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tagger's 200 sentences at 32 in flight are timed as 800 (20 per key in flight), the MLP keeps its own
    15-key epoch, a quick workload is as it is; the copies of the ceiling load what the figures train on."""
    from amp_notebook.bench import copies
    from amp_notebook.reproduce.workloads import timed_keys, workload

    tagger = scaling.figure_workload("bilstm-tagger", False, 0, 32)
    own = workload("bilstm-tagger", quick=False, seed=0)
    assert len(own.data.train) == 200 and len(tagger.data.train) == 800 >= timed_keys(32)
    assert [b.size for b in tagger.data.train[:200]] == [b.size for b in own.data.train]
    assert len(scaling.figure_workload("mlp", False, 0, 4).data.train) == 15
    quick = scaling.figure_workload("bilstm-tagger", True, 0, 32)
    assert len(quick.data.train) == len(workload("bilstm-tagger", quick=True, seed=0).data.train)

    loaded: list[tuple[str, bool, int, int]] = []

    def record(name: str, quick: bool, seed: int, keys: int) -> Any:
        loaded.append((name, quick, seed, keys))
        raise KeyboardInterrupt  # the copy sends this back as its failure: what it loaded is all this reads

    monkeypatch.setattr(scaling, "figure_workload", record)
    sent: list[tuple[Any, ...]] = []
    conn = type("Conn", (), {"send": lambda self, m: sent.append(m)})()
    copies._copy(conn, "bilstm-tagger", False, 3, "native", 32)  # type: ignore[arg-type]
    assert loaded == [("bilstm-tagger", False, 3, 32)] and sent[0][0] == "failed"
