"""The CPUs' link, a cache line's round trip: the native probe on this machine, the log that keeps it around
each timed run, and how the scaling benchmark reports it (its runs and probe replaced by fakes, so every
figure is known exactly)."""

from __future__ import annotations

import math
import os

import pytest

from amp_notebook import engine as native_engine
from amp_notebook.bench import link as bench_link
from amp_notebook.bench import scaling
from amp_notebook.bench.link import NEAR_FACTOR, LinkLog, near, round_trip_ns, span
from amp_notebook.cli import main
from tests.bench import scaling_json

needs_engine = pytest.mark.skipif(not native_engine.available(), reason="the native engine is not built here")


@needs_engine
def test_the_probe_measures_a_round_trip_between_two_cpus_or_says_it_cannot() -> None:
    cpus = os.sched_getaffinity(0)
    value = native_engine.native().core_round_trip_ns(round_trips=200, batches=3, deadline_s=1.0)
    if len(cpus) < 2:
        assert math.isnan(value)
    else:  # a line that crosses between two CPUs: more than a nanosecond, less than a millisecond
        assert 1.0 < value < 1e6, value


@needs_engine
def test_the_probe_is_unknown_on_one_cpu_and_restores_nothing_it_did_not_change() -> None:
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        assert math.isnan(native_engine.native().core_round_trip_ns())
        assert round_trip_ns() is None
    finally:
        os.sched_setaffinity(0, cpus)
    assert os.sched_getaffinity(0) == cpus


@needs_engine
@pytest.mark.parametrize(
    "args", [(0, 9, 0.05), (2000, 0, 0.05), (2000, 9, 0.0), (2000, 9, float("nan")), (10**8, 9, 1.0)]
)
def test_the_probe_refuses_settings_outside_its_bounds(args: tuple[int, int, float]) -> None:
    with pytest.raises(ValueError, match="round_trips"):
        native_engine.native().core_round_trip_ns(*args)


def test_near_means_both_known_and_within_the_factor_of_the_fastest() -> None:
    assert near((80.0, 150.0), 80.0) and near((160.0, 160.0), 80.0)
    assert not near((80.0, 161.0), 80.0) and not near((None, 80.0), 80.0) and not near((80.0, 80.0), None)
    assert NEAR_FACTOR == 2.0
    assert span((82.4, None)) == "82/?"


def test_a_link_log_keeps_the_round_trips_around_each_call_under_its_name() -> None:
    trips = iter([80.0, 90.0, 400.0, 380.0, 85.0, None])
    log = LinkLog(measure=lambda: next(trips))
    a, b = log.timed("a", lambda: 1), log.timed("b", lambda: 2)
    assert (a(), b(), a()) == (1, 2, 1)
    assert log.trips == {"a": [(80.0, 90.0), (85.0, None)], "b": [(400.0, 380.0)]}
    assert log.fastest() == 80.0
    assert log.near("a") == [True, False] and log.near("b") == [False] and log.near("c") == []
    assert LinkLog(measure=lambda: None).fastest() is None


def test_scaling_reports_each_runs_link_and_the_ratio_of_the_rounds_with_near_links(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rounds: (1w 100, 2w 190) near; (2w 120, 1w 100) with the 2-worker run's link far; (1w 100, 2w 170) near.
    The headline is the medians' 170/100; the near-link ratio the median of 1.9 and 1.7."""
    monkeypatch.setattr(native_engine, "available", lambda: True)
    rates = iter([100.0, 190.0, 120.0, 100.0, 100.0, 170.0])
    monkeypatch.setattr(scaling, "throughput", lambda *args, **kwargs: next(rates))
    trips = iter([80.0, 82.0, 81.0, 85.0, 390.0, 400.0, 90.0, 88.0, 84.0, 83.0, 86.0, 87.0])
    monkeypatch.setattr(bench_link, "round_trip_ns", lambda: next(trips))
    out, err = scaling_json(main, capsys)
    assert out["native"]["tree"] == pytest.approx(1.7)
    assert out["link_ns_per_round"]["native"]["tree"] == {
        "1": [[80.0, 82.0], [90.0, 88.0], [84.0, 83.0]],
        "2": [[81.0, 85.0], [390.0, 400.0], [86.0, 87.0]],
    }
    assert out["link_fastest_ns"] == 80.0 and out["link_near_factor"] == NEAR_FACTOR
    kept = out["ratios_near_link"]["native"]["tree"]["2"]
    assert kept["rounds"] == 2 and kept["of"] == 3 and kept["median"] == pytest.approx(1.8)
    assert "1: 80/82, 90/88, 84/83; 2: 81/85, 390/400, 86/87" in err
    assert "rounds with near links: 1.80x at 2 (2 of 3 rounds)" in err
    assert "Far in 1 of 6 timed runs" in err


def test_scaling_says_when_no_round_had_near_links_and_when_the_link_is_unknown() -> None:
    rounds = {"native/tree/1": (100.0, [100.0, 100.0]), "native/tree/2": (150.0, [150.0, 150.0])}
    log = LinkLog(trips={"native/tree/1": [(80.0, 80.0), (80.0, 80.0)], "native/tree/2": [(400.0, 80.0), (None, 80.0)]})
    assert scaling.near_link_ratio(rounds, log, "native/tree", 2) == {"rounds": 0, "of": 2, "median": None}
    none_kept = {"native": {"tree": {2: {"rounds": 0, "of": 2, "median": None}}}}
    trips = {"native": {"tree": {1: log.trips["native/tree/1"], 2: log.trips["native/tree/2"]}}}
    rows = dict(scaling.link_rows(trips, none_kept, (1, 2), log.fastest()))
    assert "no round at 2" in rows["link native tree"] and "2: 400/80, ?/80" in rows["link native tree"]
    unknown = {"native": {"tree": {1: [(None, None)], 2: [(None, None)]}}}
    rows = dict(scaling.link_rows(unknown, none_kept, (1, 2), None))
    assert rows["link"].startswith("unknown here")
    assert scaling.link_rows({"native": {"tree": {1: [], 2: []}}}, none_kept, (1, 2), None) == []
