"""``amp-notebook reproduce``: the JSON contracts and the HTML report (figures are not asserted).

The whole ``reproduce all --quick`` (CI's smoke test) is one slow test; the fast ones check the pieces
that need no training: the report writer, the JSON cleaning, a missing model reported as such.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from amp_notebook.cli import main
from amp_notebook.reproduce import table2, workloads
from amp_notebook.reproduce.report import json_ready, write_report
from amp_notebook.reproduce.workloads import MODELS, MissingModelError, workload

ROW_KEYS = {"model", "backend", "mak", "ours_per_s", "ours_ratio", "paper_ratio", "peer_per_s"}


def last_json_line(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


@pytest.mark.slow
def test_reproduce_all_quick_writes_html_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "all", "--quick", "--out", str(tmp_path), "--json"]) == 0
    out = last_json_line(capsys.readouterr().out)
    assert set(out) >= {"table2", "fig5", "fig6", "appendix-c", "machine"}
    rows = out["table2"]["rows"]
    assert all(r.keys() >= ROW_KEYS for r in rows)
    for model in MODELS:
        for backend in ("threads", "simulated"):
            assert sorted(r["mak"] for r in rows if r["model"] == model and r["backend"] == backend) == [1, 4, 16, 32]
    for r in rows:
        if r["ours_per_s"] is not None:  # a model that is present has a figure and its ratio to K=1
            assert r["ours_per_s"] > 0 and r["ours_ratio"] > 0
            assert (r["ours_ratio"] == 1.0) == (r["mak"] == 1) or r["ours_ratio"] == pytest.approx(1.0)
        if r["backend"] == "threads" and r["model"] != "bilstm-tagger":
            assert r["peer_per_s"] > 0
        if r["backend"] == "simulated":
            assert r["peer_per_s"] is None
    grid = out["fig5"]["grid"]
    assert len(grid) == len(out["fig5"]["max_active_keys"]) * len(out["fig5"]["min_update_frequency"])
    assert all(p["epochs_run"] >= 1 and p["curve"]["val_accuracy"] for p in grid)
    for curves in out["fig6"]["curves"].values():
        assert len(curves["sync"]["val_accuracy"]) == len(curves["amp"]["val_accuracy"]) == curves["epochs"]
    assert out["appendix-c"]["paper"] == {"throughput_per_s": 6.5e3, "bandwidth_bits_per_s": 1.2e9}
    page = (tmp_path / "all.html").read_text()
    assert "plotly" in page and "<script src=" not in page  # plotly.js inline: opens offline
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
    assert (tmp_path / "fig5.html").exists() and (tmp_path / "fig5.json").exists()


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


def test_missing_tagger_rows_are_null_and_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str, quick: bool = False, seed: int = 0) -> None:
        raise MissingModelError(f"{name}: not in this checkout")

    monkeypatch.setattr(workloads, "workload", missing)
    result = table2.run(quick=True, models=("bilstm-tagger",))
    assert len(result["rows"]) == 8
    assert all(r["ours_per_s"] is None and r["ours_ratio"] is None for r in result["rows"])
    assert {r["paper_ratio"] for r in result["rows"] if r["mak"] == 32} == {3.2}
    assert "not in this checkout" in result["notes"]["bilstm-tagger"]


def test_unknown_model_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown model 'lstm'; expected one of"):
        workload("lstm")


def test_report_writes_one_offline_page(tmp_path: Path) -> None:
    from amp_notebook.reproduce import appendix_c

    result = {"appendix-c": json_ready(appendix_c.run(quick=True))}
    rows = [table2._row("mlp", "threads", k, 100.0 * k, 100.0, 50.0) for k in table2.MAX_ACTIVE_KEYS]
    result["table2"] = {"rows": rows, "threads": {}, "simulated": {}, "paper_source": "none", "notes": {}}
    page = write_report(result, tmp_path / "r.html", {"cpus": 2}).read_text()
    assert page.count("window.PlotlyConfig") == 1 and "Appendix C" in page and "Table 2" in page
    assert "6,500" in page  # the paper's appendix-C throughput beside ours
