"""``bench bundling`` counts messages and bundles from the run's trace rows, so it keeps every row and refuses a
run whose trace dropped some (its counts would miss their messages)."""

from __future__ import annotations

import pytest

from amp_notebook.bench import bundling
from amp_notebook.errors import SettingError


def test_unbundled_runs_count_one_message_per_bundle() -> None:
    graph, data = bundling._tree_case(12, 0)
    figures = bundling.measure(graph, data, 1, 0)
    assert figures["mean_bundle"] == 1.0 and figures["messages_per_s"] > 0


def test_a_trace_that_dropped_rows_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, data = bundling._tree_case(12, 0)
    monkeypatch.setitem(bundling.RUN, "trace_capacity", 64)
    with pytest.raises(SettingError, match=r"the trace dropped \d+ of them: run with trace_capacity=None"):
        bundling.measure(graph, data, 1, 0)
