"""The simulator calibrated per engine: this machine's per-message overhead measured on the Python or the
native engine, the node costs of ``placement="auto"`` measured on the run's own engine, and the CLI's
``simulate --calibrate``. Measured figures are only checked to be plausible, never compared for speed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from amp_notebook import engine as native_engine
from amp_notebook.cli import main
from amp_notebook.models import mlp
from amp_notebook.runtime import autoplace as autoplace_module
from amp_notebook.runtime.autoplace import autoplace, measure_costs
from amp_notebook.runtime.calibrate import native_message_overhead, this_cpu
from amp_notebook.runtime.config import RunConfig
from amp_notebook.runtime.costs import CostModel, CostModelError, calibrate_cpu, noop_chain
from tests.conftest import digits_dataset

needs_native = pytest.mark.skipif(not native_engine.available(), reason="the native engine is not built here")


@needs_native
def test_native_calibration_is_a_real_per_message_cost() -> None:
    flops, python_overhead = calibrate_cpu()
    overhead = native_message_overhead()
    assert 0 < overhead < 1e-3
    cpu = this_cpu(engine="native", latency_s=1e-6)
    assert cpu.message_overhead_s == overhead and cpu.flops == flops and cpu.latency_s == 1e-6  # one BLAS
    assert this_cpu().message_overhead_s == python_overhead == CostModel.this_cpu().message_overhead_s


def test_calibration_refuses_an_unknown_engine() -> None:
    with pytest.raises(CostModelError, match="this_cpu engine: expected one of"):
        this_cpu(engine="cuda")


def test_noop_chain_spreads_its_identities_over_the_workers() -> None:
    g = noop_chain(length=4, workers=2)
    assert [g.nodes[f"noop{i}"].worker for i in range(4)] == [0, 1, 0, 1]
    one = noop_chain(length=4, workers=1)
    assert {one.nodes[f"noop{i}"].worker for i in range(4)} == {0}


@pytest.mark.parametrize("engine", ["python", pytest.param("native", marks=needs_native)])
def test_measure_costs_times_nodes_on_the_asked_engine(engine: str) -> None:
    g = mlp(64, 16)
    costs = measure_costs(g, digits_dataset(), measure_keys=4, engine=engine)
    assert set(costs.nodes) == set(g.nodes) and costs.nodes["linear2"].fwd_s > 0
    assert costs.message_overhead_s == this_cpu(engine).message_overhead_s  # the fallback of unreached nodes


@pytest.mark.parametrize(
    ("settings", "measured_on"),
    [({"engine": "python"}, "python"), ({"engine": "native"}, "native"), ({}, "auto"),
     ({"engine": "native", "backend": "ray"}, "python")],
)  # fmt: skip
def test_auto_placement_measures_on_the_runs_engine(
    settings: dict[str, Any], measured_on: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def fake_measure(graph: Any, dataset: Any, **kwargs: Any) -> CostModel:
        seen.append(kwargs["engine"])
        return CostModel.zero()

    monkeypatch.setattr(autoplace_module, "measure_costs", fake_measure)
    config = RunConfig(workers=2, **settings)
    autoplace(mlp(64, 16), digits_dataset(), config, keys=4, max_evaluations=2)
    assert seen == [measured_on]


@pytest.mark.parametrize("engine", ["python", pytest.param("native", marks=needs_native)])
def test_cli_simulate_calibrates_devices_from_this_machine(engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    flops, overhead = calibrate_cpu()[0], this_cpu(engine).message_overhead_s
    args = ["simulate", "--model", "mlp", "--devices", "2", "--calibrate", engine, "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["costs"]["flops"] == flops and out["costs"]["message_overhead_s"] == overhead
    assert main([*args, "--flops", "2T", "--overhead", "1e-6"]) == 0  # explicit figures still override
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["costs"]["flops"] == 2e12 and out["costs"]["message_overhead_s"] == 1e-6


def test_cli_simulate_defaults_stay_the_papers_device(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--model", "mlp", "--devices", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["costs"]["flops"] == 1e12 and out["costs"]["message_overhead_s"] == 0.0
