"""The fault harness on Ray (``amp_notebook.testing.faults_ray``): faults fired inside the worker actors reach
the caller as the error that names them, soon, and no actor of the run is left. Slow tier: each case starts
actors. The full campaign is a command:

    python -m amp_notebook.testing.faults_ray --faults 30 --json
"""

from __future__ import annotations

import pytest

from amp_notebook.testing import runs
from amp_notebook.testing.faults import LATENCY_LIMIT_S
from amp_notebook.testing.faults_ray import KINDS, RemoteFault, campaign, run_case
from amp_notebook.testing.runs import Setup

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def quick_watchdog(monkeypatch):
    monkeypatch.setattr(runs, "WATCHDOG_S", 0.5)


@pytest.mark.parametrize("fault", [
    RemoteFault("op", k=2, node="linear2", phase="fwd"),
    RemoteFault("op", k=2, node="linear1", phase="update"),
    RemoteFault("drop", k=4, node="relu2", phase="bwd"),
    RemoteFault("nan", k=3, node="linear3", phase="bwd"),
    RemoteFault("glue", k=7, worker=0),
    RemoteFault("vanish", k=9, worker=1),
    RemoteFault("kill", k=9, worker=1),
], ids=lambda f: f.describe())  # fmt: skip
def test_a_fault_inside_an_actor_reaches_the_caller_and_leaves_no_actor(fault, ray_cluster, tmp_path):
    fault.mark = str(tmp_path / "fired")
    outcome = run_case(Setup("mlp", "amp"), fault)
    assert outcome.fired and not outcome.hung and not outcome.leaked, outcome
    assert outcome.expected, f"{outcome.error}: {outcome.message}"
    assert outcome.latency_s is not None and 0 <= outcome.latency_s < LATENCY_LIMIT_S


def test_a_small_ray_campaign_over_models_modes_and_kinds(ray_cluster):
    report = campaign(len(KINDS), seed=1)
    assert report.ok, report.summary()
