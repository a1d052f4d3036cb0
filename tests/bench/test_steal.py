"""Steal, the CPU time the host took: read from /proc/stat-format files written here, and how the scaling
benchmark reports it (its runs replaced by fakes, so every figure is known exactly)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amp_notebook import engine as native_engine
from amp_notebook.bench import scaling
from amp_notebook.bench.steal import StealLog, low, percent
from amp_notebook.cli import main
from amp_notebook.runtime import steal as runtime_steal
from amp_notebook.runtime.steal import LOW_STEAL, PROC_STAT, CpuTimes, cpu_times, steal_share
from tests.bench import scaling_json

STAT = (
    "cpu  2654013 58141 370873 1830505 7692 0 10518 27466 0 0\n"
    "cpu0 1219840 29200 176180 1032333 1502 0 5121 14415 0 0\n"
)


def test_cpu_times_reads_the_cpu_line(tmp_path: Path) -> None:
    path = tmp_path / "stat"
    path.write_text(STAT)
    times = cpu_times(path)
    assert times == CpuTimes(steal=27466, total=2654013 + 58141 + 370873 + 1830505 + 7692 + 0 + 10518 + 27466)


@pytest.mark.parametrize(
    "text",
    ["", "cpu 1 2 3 4 5 6 7\n", "intr 1 2 3 4 5 6 7 8 9\n", "cpu 1 2 3 4 5 6 7 x 9 10\n"],
)
def test_cpu_times_is_none_where_the_line_cannot_say(tmp_path: Path, text: str) -> None:
    path = tmp_path / "stat"
    path.write_text(text)
    assert cpu_times(path) is None
    assert cpu_times(tmp_path / "missing") is None


def test_the_steal_share_is_stolen_ticks_over_all_ticks() -> None:
    assert steal_share(CpuTimes(10, 1000), CpuTimes(40, 1200)) == pytest.approx(0.15)
    assert steal_share(CpuTimes(10, 1000), CpuTimes(10, 1200)) == 0.0
    assert steal_share(None, CpuTimes(10, 1000)) is None and steal_share(CpuTimes(10, 1000), None) is None
    assert steal_share(CpuTimes(10, 1000), CpuTimes(10, 1000)) is None  # no tick passed: unknown, not zero
    assert low(0.05) and not low(0.051) and not low(None)
    assert percent(0.123) == "12%" and percent(None) == "?"


def scripted(monkeypatch: pytest.MonkeyPatch, shares: list[float]) -> None:
    """cpu_times() that makes the k-th timed call (two readings) lose shares[k] of 100 ticks."""
    readings: list[CpuTimes] = []
    s, t = 0, 0
    for share in shares:
        readings.append(CpuTimes(s, t))
        s, t = s + round(100 * share), t + 100
        readings.append(CpuTimes(s, t))
    it = iter(readings)
    monkeypatch.setattr(runtime_steal, "cpu_times", lambda path=PROC_STAT: next(it))


def test_a_steal_log_keeps_each_call_under_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(monkeypatch, [0.25, 0.0, 0.5])
    log = StealLog()
    a, b = log.timed("a", lambda: 1), log.timed("b", lambda: 2)
    assert (a(), b(), a()) == (1, 2, 1)
    assert log.shares == {"a": [0.25, 0.5], "b": [0.0]}


def test_scaling_reports_each_runs_steal_and_the_ratio_of_the_rounds_that_lost_little(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rounds: (1w 100, 2w 190) with 0% and 2% stolen; (2w 80, 1w 100) with 30% and 1%; (1w 100, 2w 170) with
    4% and 3%. The headline is the medians' 170/100; the low-steal ratio the median of 1.9 and 1.7."""
    monkeypatch.setattr(native_engine, "available", lambda: True)
    rates = iter([100.0, 190.0, 80.0, 100.0, 100.0, 170.0])
    monkeypatch.setattr(scaling, "throughput", lambda *args, **kwargs: next(rates))
    scripted(monkeypatch, [0.0, 0.02, 0.30, 0.01, 0.04, 0.03])
    out, err = scaling_json(main, capsys)
    assert out["native"]["tree"] == pytest.approx(1.7)
    assert out["steal_per_round"]["native"]["tree"] == {"1": [0.0, 0.01, 0.04], "2": [0.02, 0.3, 0.03]}
    kept = out["ratios_low_steal"]["native"]["tree"]["2"]
    assert kept["rounds"] == 2 and kept["of"] == 3 and kept["median"] == pytest.approx(1.8)
    assert out["low_steal"] == LOW_STEAL
    assert "1: 0%/1%/4%; 2: 2%/30%/3%" in err and "1.80x at 2 (2 of 3 rounds)" in err
    assert "Over 5% in 1 of 6 timed runs" in err


def test_scaling_says_when_no_round_lost_little_and_when_steal_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    rounds = {"native/tree/1": (100.0, [100.0, 100.0]), "native/tree/2": (150.0, [150.0, 150.0])}
    high = {1: [0.2, 0.01], 2: [0.01, None]}
    assert scaling.low_steal_ratio(rounds, high, "native/tree", 2) == {"rounds": 0, "of": 2, "median": None}
    none_kept = {"native": {"tree": {2: {"rounds": 0, "of": 2, "median": None}}}}
    rows = dict(scaling.steal_rows({"native": {"tree": high}}, none_kept, (1, 2)))
    assert "no round at 2" in rows["steal native tree"] and "1: 20%/1%; 2: 1%/?" in rows["steal native tree"]
    rows = dict(scaling.steal_rows({"native": {"tree": {1: [None], 2: [None]}}}, none_kept, (1, 2)))
    assert rows["steal"].startswith("unknown here")
