"""``amp-notebook bench ray --quick`` on the test session's Ray cluster: every figure the issue names is there
and is a number that could only come from a run (no timing is asserted)."""

from __future__ import annotations

import math

import pytest

from amp_notebook.bench import ray as ray_bench

pytestmark = pytest.mark.slow


def test_bench_ray_quick_reports_every_figure(ray_cluster):
    result = ray_bench.run(quick=True)
    for name in ("ray_per_s", "threads_per_s", "ratio", "us_per_message_ray", "us_per_message_threads",
                 "break_even_bytes"):  # fmt: skip
        assert isinstance(result[name], float) and math.isfinite(result[name]) and result[name] > 0, name
    assert result["ratio"] == pytest.approx(result["ray_per_s"] / result["threads_per_s"])
    assert [p["batch"] for p in result["ratio_by_bytes"]] == [50, 200]
    assert all(len(p["rounds"]["ray"]) == 1 for p in result["points"])
