"""``amp-notebook reproduce``: the JSON contracts and the HTML report (figures are not asserted).

The whole ``reproduce all --quick`` (CI's smoke test) is one slow test; the fast ones check the pieces
that need no training: the report writer, the JSON cleaning, a missing model reported as such.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from amp_notebook.bench.common import DIVERGE_TRIES
from amp_notebook.cli import main
from amp_notebook.engine import available as engine_available
from amp_notebook.reproduce import paper, table1, table2
from amp_notebook.reproduce.command import engines_ran
from amp_notebook.reproduce.report import json_ready, write_report
from amp_notebook.reproduce.workloads import TIMED_KEYS, Target, engine_settings, timed_data, workload

ROW_KEYS = {"model", "backend", "mak", "engine", "ours_per_s", "ours_ratio", "paper_ratio", "paper_train_per_s",
            "paper_valid_per_s"}  # fmt: skip
TABLE1_KEYS = {"model", "backend", "mak", "engine", "epochs_to_target", "time_to_target_s", "train_per_s", "reached",
               "paper_epochs", "paper_time_s", "runs"}  # fmt: skip


def last_json_line(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


@pytest.mark.slow
def test_reproduce_all_quick_writes_html_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "all", "--quick", "--out", str(tmp_path), "--json"]) == 0
    out = last_json_line(capsys.readouterr().out)
    assert set(out) >= {"table1", "table2", "fig5", "fig6", "appendix-c", "machine"}
    rows = out["table2"]["rows"]
    assert all(r.keys() >= ROW_KEYS for r in rows)
    for backend in ("threads", "simulated"):  # the paper's rows, in its order, with its ratios
        assert [(r["model"], r["mak"]) for r in rows if r["backend"] == backend] == [
            (p.model, p.mak) for p in paper.TABLE2
        ]
    threads_engine = "native" if engine_available() else "python"  # the default engine, auto (the simulator's too)
    for r in rows:
        assert r["paper_ratio"] == pytest.approx(paper.ratio(r["model"], r["mak"]))
        assert r["engine"] == threads_engine
        assert r["ours_per_s"] > 0 and r["ours_ratio"] > 0
        if r["backend"] == "threads":  # each round over the family base's round at 1 key, and their median
            base = next(b for b in rows if b["backend"] == "threads" and b["mak"] == 1
                        and b["model"] == paper.FAMILY_BASE.get(r["model"], r["model"]))  # fmt: skip
            assert r["ratio_per_round"] == [a / b for a, b in zip(r["runs_per_s"], base["runs_per_s"], strict=True)]
            assert r["ours_ratio_paired"] == statistics.median(r["ratio_per_round"])
            # the links around each round's run, and the paired ratio over the rounds where both links were near
            assert len(r["link_ns_per_round"]) == len(r["runs_per_s"])
            assert 0 <= r["near_link_rounds"] <= len(r["runs_per_s"])
            if r["near_link_rounds"] == len(r["runs_per_s"]):
                assert r["ours_ratio_near_link"] == r["ours_ratio_paired"]
            assert (r["ours_ratio_near_link"] is None) == (r["near_link_rounds"] == 0)
            # what the graph allows: the same ratio on 2 simulated devices, and the row's ratio over it
            assert r["bound_per_s"] > 0 and r["max_bundle"] in (None, 1)
            if r["mak"] == 1 and r["model"] not in paper.FAMILY_BASE:
                assert r["bound_ratio"] == 1.0
            assert r["of_bound"] == pytest.approx(r["ours_ratio"] / r["bound_ratio"])
        if r["backend"] == "simulated" or r["mak"] != 1 or r["model"] in paper.FAMILY_BASE:
            assert r.get("peer_per_s") is None
        else:  # the family's base row carries its peer, and the load it was measured under
            assert r["peer_per_s"] > 0 and len(r["peer_load_1min"]) == 2
    t1 = out["table1"]["rows"]
    assert all(r.keys() >= TABLE1_KEYS for r in t1)
    assert [(r["model"], r["mak"]) for r in t1 if r["backend"] == "threads"] == [(p.model, p.mak) for p in paper.TABLE1]
    grid = out["fig5"]["grid"]
    assert len(grid) == len(out["fig5"]["max_active_keys"]) * len(out["fig5"]["min_update_frequency"])
    assert all(p["epochs_run"] >= 1 and p["curve"]["val_accuracy"] for p in grid)
    for curves in out["fig6"]["curves"].values():
        assert len(curves["sync"]["val_accuracy"]) == len(curves["amp"]["val_accuracy"]) == curves["epochs"]
    assert out["appendix-c"]["paper"] == {"throughput_per_s": 6.5e3, "bandwidth_bits_per_s": 1.2e9}
    page = (tmp_path / "all.html").read_text()
    assert "plotly" in page and "<script src=" not in page  # plotly.js inline: opens offline
    assert page.count("(quick run)") == 1 + len(out) - 1  # the title and every section say so
    assert json.loads((tmp_path / "all.json").read_text())["table2"]["rows"] == rows


@pytest.mark.slow
def test_reproduce_fig5_quick_prints_the_grid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "fig5", "--quick", "--out", str(tmp_path), "--json"]) == 0
    out = last_json_line(capsys.readouterr().out)
    assert {(p["max_active_keys"], p["min_update_frequency"]) for p in out["grid"]} == {
        (4, 1),
        (4, 10),
        (16, 1),
        (16, 10),
    }
    assert [(p["max_active_keys"], p["min_update_frequency"], p["average_every"]) for p in out["averaging"]] == [
        (4, 10, out["average_every"]),
        (16, 10, out["average_every"]),
    ]
    assert out["settings"]["n_train"] == 1_000 and set(out["findings"]["averaging_helps"]) == {"4", "16"}
    assert (tmp_path / "fig5.html").exists() and (tmp_path / "fig5.json").exists()


@pytest.mark.slow
def test_fig5_in_processes_gives_the_same_grid() -> None:
    from amp_notebook.reproduce import fig5

    one, two = fig5.run(quick=True), fig5.run(quick=True, processes=2)
    assert one["grid"] == two["grid"] and two["settings"]["processes"] == 2


def fig5_point(k: int, m: int, times: dict[str, float | None], every: int | None = None) -> dict:
    to = {t: {"epochs": None if v is None else 1, "time_s": v} for t, v in times.items()}
    return {"max_active_keys": k, "min_update_frequency": m, "average_every": every, "to_threshold": to,
            "epochs_to_target": to["0.96"]["epochs"], "time_to_target_s": to["0.96"]["time_s"],
            "final_val_accuracy": 0.9, "train_instances_per_s": 100.0 * k, "staleness": {"mean": 1.0, "p95": 2},
            "curve": {"time_s": [1.0], "val_accuracy": [0.9]}}  # fmt: skip


def test_fig5_findings_read_the_grid(tmp_path: Path) -> None:
    from amp_notebook.reproduce import fig5

    t = {(4, 1): 9.0, (4, 10): 5.0, (4, 50): 7.0, (16, 1): 3.0, (16, 10): 4.0, (16, 50): 6.0}
    grid = [fig5_point(k, m, {"0.5": v, "0.96": v if k == 4 else None}) for (k, m), v in t.items()]
    averaging = [fig5_point(4, 10, {"0.5": 6.0, "0.96": 6.0}, 5), fig5_point(16, 10, {"0.5": 2.0, "0.96": None}, 5)]
    result = {"grid": grid, "averaging": averaging, "max_active_keys": [4, 16], "min_update_frequency": [1, 10, 50],
              "thresholds": [0.5, 0.96], "target": 0.96, "average_every": 5, "max_epochs": 3,
              "settings": {}}  # fmt: skip
    f = fig5.findings(result)
    assert f["accuracy_compared"] == 0.5 and f["points_reaching_target"] == 3  # 96%: only the rows of 4 keys
    assert f["best_min_update_frequency"] == {4: 10, 16: 1} and f["inner_best"] == {4: True, 16: False}
    assert f["throughput_per_s"][10] == {4: 400.0, 16: 1600.0}
    assert f["averaging_time_s"] == {4: {"without": 5.0, "with": 6.0}, 16: {"without": 4.0, "with": 2.0}}
    assert f["averaging_helps"] == {4: False, 16: True}
    result["findings"] = f
    page = write_report({"fig5": json_ready(result)}, tmp_path / "f5.html", {"cores": 2}).read_text()
    assert "3 of 6 grid points reached 96%" in page and "neither the smallest nor the largest for 1 of 2 rows" in page
    assert "Averaging every 5 keys reached 50% sooner for 1 of 2 rows (16 keys)" in page


def test_fig5_scale_is_a_fraction() -> None:
    from amp_notebook.reproduce import fig5

    with pytest.raises(ValueError, match="scale is a fraction of the paper's lists"):
        fig5.run(scale=2.0)


def test_fig5_is_deterministic() -> None:
    from amp_notebook.data.list_reduction import list_reduction_dataset
    from amp_notebook.models.rnn import rnn
    from amp_notebook.reproduce.fig5 import REPLICAS, point

    data = list_reduction_dataset(n_train=300, n_val=50, seed=0)
    graph = rnn(replicas=REPLICAS)
    params = graph.init_params(0)
    a, b = (point(graph, data, params, 4, 5, 1, 0) for _ in range(2))
    assert a == b


def test_json_ready_drops_nan_and_infinity() -> None:
    assert json_ready({"a": math.nan, "b": [1.0, math.inf, (2, 3)], 4: None}) == {"a": None, "b": [1.0, None, [2, 3]],
                                                                                  "4": None}  # fmt: skip


def test_unknown_model_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown model 'lstm'; expected one of"):
        workload("lstm")


@pytest.mark.slow
def test_table2_quick_for_one_model_says_which_engine_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "table2", "--quick", "--models", "mlp", "--out", str(tmp_path), "--json"]) == 0
    out = last_json_line(capsys.readouterr().out)
    threads_engine = "native" if engine_available() else "python"  # the default engine, auto
    assert [(r["model"], r["backend"], r["mak"], r["engine"]) for r in out["rows"]] == [
        ("mlp", "threads", 1, threads_engine), ("mlp", "threads", 4, threads_engine),
        ("mlp", "simulated", 1, threads_engine), ("mlp", "simulated", 4, threads_engine),
    ]  # fmt: skip
    assert [r["paper_ratio"] for r in out["rows"]] == [1.0, pytest.approx(6268 / 2076)] * 2
    assert out["machine"]["engines_ran"] == [threads_engine] and out["calibration_engine"] == {"mlp": threads_engine}


def test_report_writes_one_offline_page(tmp_path: Path) -> None:
    from amp_notebook.reproduce import appendix_c

    result = {"appendix-c": json_ready(appendix_c.run(quick=True))}
    rows = [table2.row("mlp", "threads", k, "python", 100.0 * k, 100.0) for k in (1, 4)]
    rows[0].update(peer_per_s=626.0, peer_load_1min=[3.8056640625, 4.2], peer_loaded=True, load_1min=[3.8, 4.2])
    result["table2"] = {"rows": rows, "threads": {}, "simulated": {}, "notes": {}, "data": {"mlp": "generated"}}
    page = write_report(result, tmp_path / "r.html", {"cores": 2, "engine": "python", "load_1min": 3.8056640625})
    text = page.read_text()
    assert text.count("window.PlotlyConfig") == 1 and "Appendix C" in text and "Table 2" in text
    assert "6,500" in text  # the paper's appendix-C throughput beside ours
    assert "side by side" in text and "(quick run)" not in text and "3.8056640625" not in text
    assert "626 \u26a0" in text and "load 3.8-4.2 on " in text  # a loaded peer is marked, with the load rounded
    assert "16 cores" in text and "2 cores, python engine" in text  # this machine beside the paper's


def test_quick_report_says_so_on_every_table(tmp_path: Path) -> None:
    rows = [table2.row("mlp", backend, k, "python", 100.0 * k, 100.0) for backend in ("threads", "simulated")
            for k in (1, 4)]  # fmt: skip
    result = {"table2": {"rows": rows, "threads": {}, "simulated": {}, "notes": {}}}
    text = write_report(result, tmp_path / "q.html", {"cores": 2}, quick=True).read_text()
    assert "side by side (quick run)" in text and "Table 2: throughput against max_active_keys (quick run)" in text
    assert text.count("smoke-test sizes") == 2


def test_table2_row_carries_the_papers_figures() -> None:
    r = table2.row("rnn-4-replicas", "threads", 8, "python", 300.0, 100.0)
    assert r["ours_ratio"] == 3.0 and r["paper_ratio"] == pytest.approx(71 / 13)
    assert (r["paper_train_per_s"], r["paper_valid_per_s"], r["engine"]) == (71_000, 178_000, "python")


def test_families_put_the_base_first_and_add_it() -> None:
    assert table2.families(("rnn-4-replicas", "mlp")) == [["mlp"], ["rnn", "rnn-4-replicas"]]


def test_engines_are_checked() -> None:
    assert (
        engine_settings("python") == {"engine": "python"} and workload("mlp", quick=True).settings["engine"] == "auto"
    )
    with pytest.raises(ValueError, match="unknown engine 'warp'"):
        engine_settings("warp")


def test_engines_ran_reads_rows_and_curves_but_not_the_simulator() -> None:
    results = {
        "table2": {"engine": "auto", "rows": [{"backend": "threads", "engine": "native"},
                                              {"backend": "simulated", "engine": "python"}]},
        "fig6": {"curves": {"mlp": {"sync": {"mode": "sync", "engine": "native"}}}},
        "fig5": {"settings": {"engine": "python"}},
    }  # fmt: skip
    assert engines_ran(results) == ["native"]
    results["fig6"]["curves"]["mlp"]["amp"] = {"mode": "amp", "engine": "python"}  # type: ignore[index]
    assert engines_ran(results) == ["native", "python"]


def test_median_to_target_counts_misses_as_slowest() -> None:
    runs = [{"e": 3}, {"e": None}, {"e": 5}]
    assert table1.median_to_target(runs, "e") == 5.0
    assert table1.median_to_target([{"e": 3}, {"e": None}], "e") is None  # half reached: no median
    assert table1.median_to_target([{"e": 2}, {"e": 4}], "e") == 3.0


def test_to_target_stops_at_the_target_and_reports_epochs_and_time() -> None:
    w = workload("mlp")
    w.target = Target("val_accuracy", 0.5, "50% validation accuracy")  # reached within a few epochs of digits
    run = table1.to_target(w, 10, 0, workers=1, max_active_keys=2)
    assert 1 <= run["epochs_to_target"] == len(run["curve"]) < 10  # stopped at the first epoch at the target
    assert run["curve"][-1] >= 0.5 and all(a < 0.5 for a in run["curve"][:-1])
    assert run["time_to_target_s"] > 0 and run["train_per_s"] > 0
    below = Target("val_loss", 1e-9, "an unreachable loss", above=False)
    w.target = below
    missed = table1.to_target(w, 1, 0, workers=1)
    assert missed["epochs_to_target"] is None and missed["time_to_target_s"] is None and len(missed["curve"]) == 1


def test_a_diverged_table1_run_counts_as_a_miss_and_the_table_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that reaches NaN before the target has missed it: the row counts it and keeps the others' figures."""
    from amp_notebook.runtime.numerics import NonFiniteError

    w = workload("mlp", quick=True)
    w.target = Target("val_accuracy", 0.1, "10% validation accuracy")
    real = table1.train

    def nan_for_seed_1(*args: object, **kwargs: object) -> object:
        if kwargs["seed"] == 1:
            raise NonFiniteError("loss", "SoftmaxCrossEntropy", "loss", [3], "the loss of key 3 is nan")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(table1, "train", nan_for_seed_1)
    runs = [table1.to_target(w, 3, seed, workers=1) for seed in (0, 1, 2)]
    assert runs[1]["diverged"] and "nan" in runs[1]["diverged"] and runs[1]["epochs_to_target"] is None
    assert runs[1]["train_per_s"] is None and runs[0]["diverged"] is None
    r = table1.row("mlp", "threads", 1, "native", runs)
    assert r["reached"] == 2 and r["diverged"] == 1 and r["repeats"] == 3
    assert r["epochs_to_target"] is not None  # 2 of 3 reached: a median
    assert r["train_per_s"] == pytest.approx(statistics.median([runs[0]["train_per_s"], runs[2]["train_per_s"]]))
    assert table1._engine([runs[1], runs[0]], w) == runs[0]["engine"]  # a diverged run does not name the engine


def _diverging_once(real: Any, seeds: list[int]) -> Any:
    """``train`` whose first run diverges (NaN loss) and whose later runs are ``real``'s; each run's seed goes
    into ``seeds``."""
    from amp_notebook.runtime.numerics import NonFiniteError

    def train(*args: object, **kwargs: object) -> object:
        seeds.append(kwargs["seed"])  # type: ignore[arg-type]
        if len(seeds) == 1:
            raise NonFiniteError("loss", "SoftmaxCrossEntropy", "loss", [3], "the loss of key 3 is nan")
        return real(*args, **kwargs)

    return train


def test_a_diverged_timed_run_runs_again_from_the_next_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    from amp_notebook.reproduce.workloads import available
    from amp_notebook.runtime.numerics import NonFiniteError

    (w,) = available(["mlp"], True, 0, {}, engine="python")
    seeds: list[int] = []
    monkeypatch.setattr(table2, "train", _diverging_once(table2.train, seeds))
    diverged: list[int] = []
    r = table2._train(w, 5, diverged, max_active_keys=1, workers=1)
    assert seeds == [5, 6] and diverged == [5] and r.train_instances_per_s > 0

    def nan_always(*args: object, **kwargs: object) -> object:
        raise NonFiniteError("loss", "SoftmaxCrossEntropy", "loss", [3], "the loss of key 3 is nan")

    monkeypatch.setattr(table2, "train", nan_always)
    diverged = []
    with pytest.raises(NonFiniteError, match="key 3"):
        table2._train(w, 0, diverged, max_active_keys=1, workers=1)
    assert diverged == list(range(DIVERGE_TRIES))


def _mlp_configs(monkeypatch: pytest.MonkeyPatch, choice: str) -> tuple[Any, dict[str, dict[str, int]]]:
    """The quick MLP, autoplace stubbed to choose the placement named ``choice``, and the measured-load split
    stubbed to a third placement (linear1 alone on worker 1): the placements by name."""
    from amp_notebook.runtime.placement import place

    w = workload("mlp", quick=True)
    workers = table2.THREADS["workers"]
    placements = {s: place(w.graph, workers, strategy=s) for s in ("round_robin", "balanced")}
    placements["measured load"] = place(w.graph, workers, overrides={"linear1": 1, "linear2": 0, "linear3": 0,
                                                                     "linear4": 0})  # fmt: skip
    assert len({json.dumps(p, sort_keys=True) for p in placements.values()}) == 3
    auto = placements[choice]

    class Chosen:  # what autoplace returns, as far as thread_configs reads it
        placement = auto
        chosen = type("Candidate", (), {"name": choice, "heavy": {n: auto[n] for n in ("linear1", "linear4")}})

    monkeypatch.setattr(table2, "autoplace", lambda *a, **k: Chosen)
    monkeypatch.setattr(table2, "measured_load", lambda w, seed, k: placements["measured load"])
    return w, placements


@pytest.mark.parametrize("fastest", ["round_robin, light_first", "balanced, fifo", "measured load, light_first"])
def test_the_configuration_fastest_here_runs_the_row(fastest: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every distinct placement (auto's choice, round robin, balanced, measured load) with every inbox order is
    timed PLACEMENT_TRIALS runs; the fastest runs the row, and the trials keep every median by name."""
    from amp_notebook.runtime.costs import CostModel

    w, placements = _mlp_configs(monkeypatch, "balanced")
    names = {json.dumps(p, sort_keys=True): n for n, p in placements.items()}
    timed: list[str] = []

    def rate(w: Any, seed: int, k: int, config: dict[str, Any]) -> float:
        assert set(config) <= {"placement", "priority", "max_bundle"}
        bundles = ", unbundled" if config.get("max_bundle") == 1 else ""
        timed.append(f"{names[json.dumps(config['placement'], sort_keys=True)]}, {config['priority']}{bundles}")
        return 2.0 if timed[-1] == fastest else 1.0

    monkeypatch.setattr(table2, "_config_rate", rate)
    trials: dict[int, dict[str, float]] = {}
    configs = table2.thread_configs(w, CostModel(), [4], 0, trials=trials)
    expected = [f"{n}, {p}" for n in placements for p in table2.PRIORITIES]
    # auto's choice is balanced: timed once; then the fastest again, beside itself unbundled
    pair = [fastest, f"{fastest}, unbundled"]
    assert sorted(timed) == sorted((expected + pair) * table2.PLACEMENT_TRIALS)
    placement, priority = fastest.split(", ")
    assert configs == {4: {"placement": placements[placement], "priority": priority}}  # bundled: the tie keeps it
    assert trials[4] == {**{n: (2.0 if n == fastest else 1.0) for n in expected},
                         f"{fastest} (again)": 2.0, f"{fastest}, unbundled": 1.0}  # fmt: skip


def test_the_fastest_configuration_runs_unbundled_where_that_is_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    """The winner is timed again beside itself with max_bundle 1; the faster of the two runs the row."""
    from amp_notebook.runtime.costs import CostModel

    w, placements = _mlp_configs(monkeypatch, "balanced")

    def rate(w: Any, seed: int, k: int, config: dict[str, Any]) -> float:
        fast = config["placement"] == placements["round_robin"] and config["priority"] == "light_first"
        return (2.0 if fast else 1.0) + (0.5 if config.get("max_bundle") == 1 else 0.0)

    monkeypatch.setattr(table2, "_config_rate", rate)
    trials: dict[int, dict[str, float]] = {}
    configs = table2.thread_configs(w, CostModel(), [4], 0, trials=trials)
    assert configs == {4: {"placement": placements["round_robin"], "priority": "light_first", "max_bundle": 1}}
    assert trials[4]["round_robin, light_first, unbundled"] == 2.5
    assert trials[4]["round_robin, light_first (again)"] == 2.0


def test_without_trials_the_row_runs_auto_s_choice_with_fifo(monkeypatch: pytest.MonkeyPatch) -> None:
    from amp_notebook.runtime.costs import CostModel

    w, placements = _mlp_configs(monkeypatch, "round_robin")
    monkeypatch.setattr(table2, "measured_load", lambda *a: pytest.fail("no trials: nothing is traced"))
    monkeypatch.setattr(table2, "_config_rate", lambda *a: pytest.fail("no trials: nothing is timed"))
    assert table2.thread_configs(w, CostModel(), [1, 4], 0) == {
        k: {"placement": placements["round_robin"], "priority": "fifo"} for k in (1, 4)
    }


def test_a_tie_goes_to_auto_s_choice_with_fifo(monkeypatch: pytest.MonkeyPatch) -> None:
    from amp_notebook.runtime.costs import CostModel

    w, placements = _mlp_configs(monkeypatch, "measured load")
    monkeypatch.setattr(table2, "_config_rate", lambda *a: 1.0)
    trials: dict[int, dict[str, float]] = {}
    configs = table2.thread_configs(w, CostModel(), [4], 0, trials=trials)
    assert configs == {4: {"placement": placements["measured load"], "priority": "fifo"}}
    assert next(iter(trials[4])) == "measured load, fifo"  # listed first; the same placement is not timed twice
    assert len(trials[4]) == 3 * len(table2.PRIORITIES) + 2  # and the winner again, beside itself unbundled


def test_a_diverged_traced_run_of_the_measured_load_split_runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    import amp_notebook.runtime.train as runtime_train  # the traced run's train (bench.scaling.node_seconds)

    w = workload("mlp", quick=True)
    seeds: list[int] = []
    monkeypatch.setattr(runtime_train, "train", _diverging_once(runtime_train.train, seeds))
    assert set(table2.measured_load(w, 5, 1)) == set(w.graph.nodes)
    assert seeds == [5, 6]


def test_the_measured_load_split_places_every_node_on_a_worker() -> None:
    """A real traced 1-worker run of the quick MLP: every node gets one of the table's 2 workers, heavy nodes on
    both (its four layers' times are never all on one side of the best split)."""
    w = workload("mlp", quick=True)
    placement = table2.measured_load(w, 0, 4)
    assert set(placement) == set(w.graph.nodes)
    assert set(placement.values()) == {0, 1}


def test_a_short_epoch_is_timed_as_one_epoch_of_repeated_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from amp_notebook.reproduce.workloads import available

    (w,) = available(["mlp"], False, 0, {}, engine="python")
    short = len(w.data.train)
    assert short < TIMED_KEYS  # the digits: 15 keys an epoch
    long = timed_data(w.data)
    passes = -(-TIMED_KEYS // short)
    assert len(long.train) == passes * short >= TIMED_KEYS
    assert all(long.train[i] is w.data.train[i % short] for i in range(len(long.train)))
    assert long.val is w.data.val and long.name == w.data.name
    big = dataclasses.replace(w.data, train=w.data.train * passes)
    assert timed_data(big) is big  # long enough already: as it is

    calls: list[tuple[int, int]] = []

    def record(graph: object, data: Any, **kwargs: Any) -> object:
        calls.append((len(data.train), kwargs["epochs"]))
        raise KeyboardInterrupt  # enough: the arguments are what this test reads

    monkeypatch.setattr(table2, "train", record)
    with pytest.raises(KeyboardInterrupt):
        table2._train(w, 0, max_active_keys=4, workers=2)
    assert calls == [(len(long.train), 1)]  # one epoch: the pipeline drains once


def test_a_timed_run_has_twenty_keys_per_key_in_flight() -> None:
    """The fewest keys timed: 120, or KEYS_PER_SLOT per key in flight where that is more; every row of a model
    times the same keys (those of its largest max_active_keys); a quick workload is timed as it is."""
    from amp_notebook.reproduce.workloads import KEYS_PER_SLOT, timed_keys, timed_workload

    assert KEYS_PER_SLOT == 20
    assert [timed_keys(k) for k in (1, 4, 6, 7, 32)] == [TIMED_KEYS, TIMED_KEYS, TIMED_KEYS, 140, 640]
    w = workload("mlp", quick=False)  # 15 keys an epoch
    for k, keys in ((4, 120), (8, 165)):  # 8 passes of 15 cover 120; 160 keys take 11 passes
        timed = timed_workload(w, k)
        assert len(timed.data.train) == keys and timed.graph is w.graph and w.data.train == timed.data.train[:15]
    assert len(table2.timed(w).train) == 120  # Table 2's MLP rows: max_active_keys 1 and 4
    quick = workload("mlp", quick=True)
    assert timed_workload(quick, 32) is quick and table2.timed(quick) is quick.data
