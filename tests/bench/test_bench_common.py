"""The benchmarks' shared runners: sides interleaved with the order flipping every round, and each side
reported by its run of median throughput with every run's figures beside it."""

from __future__ import annotations

from typing import Any

from amp_notebook.bench.common import interleaved_runs, median_run


def test_interleaved_runs_flip_the_order_and_keep_every_run() -> None:
    calls: list[str] = []
    rates = {"a": iter([30.0, 10.0, 20.0]), "b": iter([5.0, 6.0, 7.0])}

    def side(name: str) -> Any:
        def run() -> dict[str, Any]:
            calls.append(name)
            rate = next(rates[name])
            return {"instances_per_s": rate, "final_metric": rate / 100, "curve": [rate]}

        return run

    runs = interleaved_runs(3, {"a": side("a"), "b": side("b")})
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert [r["instances_per_s"] for r in runs["a"]] == [30.0, 10.0, 20.0]
    chosen = median_run(runs["a"])
    assert chosen["instances_per_s"] == 20.0 and chosen["curve"] == [20.0]  # the median run, whole
    assert chosen["runs_instances_per_s"] == [30.0, 10.0, 20.0]
    assert chosen["runs_final_metric"] == [0.3, 0.1, 0.2]
    assert "runs_instances_per_s" not in runs["a"][2]  # the runs themselves are left as they were
    assert median_run(runs["a"][:2])["instances_per_s"] == 10.0  # even count: the lower middle
