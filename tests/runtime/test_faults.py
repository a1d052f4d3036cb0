"""Fault injection (``amp_notebook.testing.faults``) and kills mid-save (``amp_notebook.testing.kills``): small
campaigns here; the full ones (200 faults, 100 kills) are commands whose output the reliability note reports:

    python -m amp_notebook.testing.faults --faults 200 --json
    python -m amp_notebook.testing.kills --kills 100 --json
"""

from __future__ import annotations

import os

import pytest

from amp_notebook.testing import faults, runs
from amp_notebook.testing.faults import KINDS, Fault, Setup, campaign, run_case
from amp_notebook.testing.kills import kill_campaign, sample_checkpoint


@pytest.fixture(autouse=True)
def quick_watchdog(monkeypatch):
    monkeypatch.setattr(runs, "WATCHDOG_S", 0.3)


@pytest.mark.parametrize("fault", [
    Fault("op", k=2, node="linear2", phase="fwd"),
    Fault("op", k=3, node="linear3", phase="bwd"),
    Fault("op", k=2, node="linear1", phase="update"),
    Fault("drop", k=4, node="relu2", phase="bwd"),
    Fault("glue", k=7, worker=0),
    Fault("vanish", k=9, worker=1),
], ids=lambda f: f.describe())  # fmt: skip
def test_each_kind_of_fault_reaches_the_caller_and_leaves_no_thread(fault):
    outcome = run_case(Setup("mlp", "amp"), fault)
    assert outcome.fired and not outcome.hung and not outcome.leaked
    assert outcome.expected, f"{outcome.error}: {outcome.message}"


def test_faults_in_the_rnn_loop_and_in_sync_flushes():
    for setup, fault in [
        (Setup("rnn", "amp"), Fault("op", k=5, node="loop", phase="bwd")),
        (Setup("rnn", "pipeline"), Fault("drop", k=3, node="more", phase="fwd")),
        (Setup("mlp", "sync"), Fault("drop", k=2, node="linear4", phase="update")),
    ]:
        outcome = run_case(setup, fault)
        assert outcome.expected and not outcome.hung and not outcome.leaked, outcome


@pytest.mark.slow  # 40 random faults, a few seconds
def test_a_random_campaign():
    report = campaign(40, seed=1, kinds=tuple(k for k in KINDS if k != "nan" or faults.EXPECTED["nan"]))
    summary = report.summary()
    assert report.ok, summary
    assert summary["faults"] == 40 and summary["hangs"] == 0 and summary["leaked_threads"] == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the kill campaign forks")
def test_kills_while_saving_leave_the_previous_checkpoint_loadable(tmp_path):
    report = kill_campaign(5, seed=0, ckpt=sample_checkpoint(hidden=64), directory=tmp_path)
    assert report.ok, report.failures
    assert report.kills == report.loadable == 5
    assert report.kept_previous + report.took_new == 5
