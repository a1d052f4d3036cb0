"""The fuzzers of amp_notebook.testing.fuzz, on a small budget: random graph JSON and random builder intents
produce only AmpError subclasses, refused intents change nothing, and no code payload runs. The full
counts (10^4 each) come from ``python -m amp_notebook.testing.fuzz``; the harness itself is checked to
notice each kind of broken promise."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest

from amp_notebook.testing import fuzz
from amp_notebook.ui.builder_model import BuilderError, BuilderModel


def test_fuzzed_graph_json_gives_only_amp_errors() -> None:
    report = fuzz.fuzz_graph_json(100, seed=11)
    assert report.only_amp_errors, report.failures
    assert report.cases == 100 == sum(report.outcomes.values())
    assert report.outcomes["GraphFileError"] > 30
    assert report.outcomes["loaded, valid"] + report.outcomes["loaded, validation problems"] > 0


def test_fuzzed_builder_intents_give_only_amp_errors_and_refusals_change_nothing() -> None:
    report = fuzz.fuzz_builder_intents(300, seed=11)
    assert report.only_amp_errors, report.failures
    assert report.outcomes["applied"] > 30 and report.outcomes["BuilderError"] > 30


@pytest.mark.slow
def test_fuzzed_graph_json_many() -> None:
    report = fuzz.fuzz_graph_json(1000, seed=12)
    assert report.only_amp_errors, report.failures


@pytest.mark.slow
def test_fuzzed_builder_intents_many() -> None:
    report = fuzz.fuzz_builder_intents(3000, seed=12)
    assert report.only_amp_errors, report.failures


def test_the_graph_harness_notices_an_undocumented_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise TypeError("'NoneType' object is not iterable")

    monkeypatch.setattr("amp_notebook.ir.serialize.graph_from_dict", broken)
    report = fuzz.fuzz_graph_json(20, seed=0)
    assert not report.only_amp_errors and report.outcomes["UNDOCUMENTED TypeError"] > 0
    assert "TypeError: 'NoneType' object is not iterable at test_fuzz.py" in report.failures[0]


def test_the_graph_harness_notices_code_that_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    from amp_notebook.ir import serialize

    def runs_payloads(raw: Any, source: str = "") -> Any:  # what an eval-based loader would do
        data = serialize.json.loads(raw)
        for node in data.get("nodes", []) if isinstance(data, dict) else []:
            for value in (node.get("config") or {}).values() if isinstance(node, dict) else []:
                if isinstance(value, str) and "open(" in value:
                    with contextlib.suppress(Exception):
                        eval(value, {"t": 1})
        raise BuilderError("refused after the damage was done")

    monkeypatch.setattr("amp_notebook.ir.serialize.parse_graph_json", runs_payloads)
    report = fuzz.fuzz_graph_json(300, seed=1)
    assert any("a code payload ran" in f for f in report.failures)


def test_the_intent_harness_notices_a_refusal_that_changed_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def careless(self: BuilderModel, intent: Any) -> Any:
        self.revision += 1
        raise BuilderError("refused, but the revision moved")

    monkeypatch.setattr(BuilderModel, "apply", careless)
    report = fuzz.fuzz_builder_intents(10, seed=0)
    assert report.broken == 10 and "refused but changed the model" in report.failures[0]


def test_the_command_prints_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert fuzz.main(["--graphs", "10", "--intents", "10", "--seed", "3", "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["ok"] and summary["graph_json"]["cases"] == 10 and summary["builder_intents"]["cases"] == 10
    assert "graph_json: 10 cases" in captured.err and "only AmpError subclasses" in captured.err
