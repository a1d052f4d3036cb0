"""Steal, the CPU time the host took, in a run's result: read from /proc/stat-format files written here, and
reported by both threaded engines, in the JSON summary and, when it was large, in the CLI's summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from amp_notebook import engine as native_engine
from amp_notebook import models
from amp_notebook.cli_train import summary_text
from amp_notebook.runtime import steal
from amp_notebook.runtime.steal import CpuTimes, StealMeter, steal_text
from amp_notebook.runtime.train import train
from tests.conftest import digits_dataset


def test_a_meter_reads_the_counters_as_the_run_starts_and_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([CpuTimes(100, 10_000), CpuTimes(130, 10_200)])
    monkeypatch.setattr(steal, "cpu_times", lambda path=steal.PROC_STAT: next(readings))
    meter = StealMeter()
    assert meter.share is None
    meter.start()
    meter.stop()
    assert meter.share == pytest.approx(0.15)
    monkeypatch.setattr(steal, "cpu_times", lambda path=steal.PROC_STAT: None)  # off Linux: unknown, not zero
    meter.start()
    meter.stop()
    assert meter.share is None


@pytest.mark.parametrize(
    "engine",
    ["python", pytest.param("native", marks=pytest.mark.skipif(not native_engine.available(), reason="not built"))],
)
def test_both_threaded_engines_report_the_share_of_their_run(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    taken = iter([CpuTimes(0, 1_000), CpuTimes(50, 1_200)])
    monkeypatch.setattr(steal, "cpu_times", lambda path=steal.PROC_STAT: next(taken))
    r = train(models.mlp(input_width=64, hidden=16), digits_dataset(batch_size=50), workers=2, epochs=1,
              validate=False, engine=engine)  # fmt: skip
    assert r.engine == engine and r.steal_share == pytest.approx(0.25) and r.summary()["steal_share"] == 0.25


def test_a_run_on_this_machine_reads_a_share_between_0_and_1() -> None:
    r = train(models.mlp(input_width=64, hidden=16), digits_dataset(batch_size=50), workers=2, epochs=2,
              validate=False)  # fmt: skip
    assert r.steal_share is None or 0.0 <= r.steal_share <= 1.0
    if Path("/proc/stat").exists() and r.wall_s > 0.1:  # ten clock ticks at least: the share is known
        assert r.steal_share is not None


def test_simulated_runs_have_no_steal() -> None:
    r = train(models.mlp(input_width=64, hidden=16), digits_dataset(batch_size=50), workers=2, epochs=1,
              validate=False, backend="simulated")  # fmt: skip
    assert r.steal_share is None and r.summary()["steal_share"] is None


def test_the_summary_names_steal_only_when_the_host_took_much() -> None:
    assert steal_text(None) is None and steal_text(0.05) is None
    assert steal_text(0.23).startswith("23% of the CPUs' time went to the host's other work")
    base = {"model": "mlp", "mode": "amp", "workers": 2, "max_active_keys": 4, "min_update_frequency": 1,
            "wall_s": 1.0, "train_instances_per_s": 10.0, "val_accuracy": [0.9],
            "staleness": {"mean": 1.0, "p95": 2.0, "max": 3.0}, "utilization": [0.5, 0.5]}  # fmt: skip
    assert "cpu steal" not in summary_text({**base, "steal_share": 0.01})
    assert "cpu steal" not in summary_text(base)
    assert "cpu steal            31% of the CPUs' time" in summary_text({**base, "steal_share": 0.31})
