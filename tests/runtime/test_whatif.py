"""The what-if API, the max_active_keys x min_update_frequency sweep and the appendix-C estimate."""

from __future__ import annotations

import math

import numpy as np
import pytest

import amp_notebook as amp
from amp_notebook import models
from amp_notebook.runtime.costs import CostModel, CostModelError, NodeCost
from amp_notebook.runtime.whatif import (
    PAPER_APPENDIX_C,
    appendix_c,
    ggsnn_like,
    ggsnn_like_dataset,
    grid,
    sweep,
    whatif,
)


def mlp():
    return models.mlp(input_width=64, hidden=64)


def test_whatif_reports_throughput_utilization_bandwidth_staleness(digits):
    run = amp.whatif(mlp(), digits, devices=4, flops=1e11, bandwidth=10e9, max_active_keys=4)
    assert run.devices == 4 and len(run.utilization) == 4
    assert all(0.0 <= u <= 1.0 for u in run.utilization) and max(run.utilization) > 0.3
    assert run.throughput_per_s == pytest.approx(digits.train_instances / run.makespan_s)
    assert run.keys_per_s == pytest.approx(len(digits.train) / run.makespan_s)
    assert run.bandwidth_bits_per_s > 0 and run.busiest_link_bits_per_s <= run.bandwidth_bits_per_s
    assert run.staleness["max"] > 0  # 4 keys in flight, local updates: stale gradients
    assert run.result.virtual and run.result.wall_s == run.makespan_s
    d = run.as_dict()
    assert "result" not in d and d["costs"]["flops"] == 1e11


def test_twice_the_flops_halves_the_makespan_exactly(digits):
    # every cost scales with 1/flops and links are free, so the event order is the same and times halve
    slow = whatif(mlp(), digits, devices=3, flops=1e10, max_active_keys=4)
    fast = whatif(mlp(), digits, devices=3, flops=2e10, max_active_keys=4)
    assert fast.makespan_s == slow.makespan_s / 2
    assert fast.throughput_per_s == pytest.approx(2 * slow.throughput_per_s)
    for name, p in slow.result.params.items():
        for k, v in p.items():
            np.testing.assert_array_equal(fast.result.params[name][k], v)


def test_wire_precision_and_bandwidth_change_the_links(digits):
    f32 = whatif(mlp(), digits, devices=4, flops=1e11, wire_dtype="float32")
    bf16 = whatif(mlp(), digits, devices=4, flops=1e11, wire_dtype="bfloat16")
    assert bf16.result.backend_stats["bytes_sent"] * 2 == f32.result.backend_stats["bytes_sent"]
    assert bf16.makespan_s == f32.makespan_s  # free links: precision changes bytes, not time
    narrow = whatif(mlp(), digits, devices=4, flops=1e11, bandwidth=1e8, latency=1e-5)
    assert narrow.makespan_s > f32.makespan_s
    assert narrow.result.backend_stats["bytes_sent"] == f32.result.backend_stats["bytes_sent"]


def test_whatif_refuses_bad_hardware(digits):
    with pytest.raises(CostModelError, match=r"CostModel\.flops: expected a number > 0"):
        whatif(mlp(), digits, flops=0)
    with pytest.raises(CostModelError, match="bandwidth_bits_per_s: expected a number > 0"):
        whatif(mlp(), digits, bandwidth=-1.0)
    with pytest.raises(CostModelError, match=r"names node\(s\) \['linear9'\]"):
        whatif(mlp(), digits, costs=CostModel(nodes={"linear9": NodeCost(fwd_s=1.0)}))


def test_sweep_covers_the_grid_from_the_same_start(digits):
    runs = sweep(mlp(), digits, max_active_keys=(1, 4), min_update_frequency=(1, 3), devices=4, flops=1e11)
    assert [(r.max_active_keys, r.min_update_frequency) for r in runs] == [(1, 1), (1, 3), (4, 1), (4, 3)]
    ks, ms, throughput = grid(runs)
    assert ks == [1, 4] and ms == [1, 3] and throughput.shape == (2, 2) and np.all(throughput > 0)
    assert throughput[1, 0] > 1.5 * throughput[0, 0]  # more keys in flight: the pipeline fills
    staleness = {(r.max_active_keys, r.min_update_frequency): r.staleness["mean"] for r in runs}
    assert staleness[(1, 1)] == 0.0 and staleness[(4, 1)] > 0.0
    _, _, loss = grid(runs, "final_train_loss")
    assert np.all(np.isfinite(loss))
    with pytest.raises(ValueError, match="non-empty grids"):
        sweep(mlp(), digits, max_active_keys=())


@pytest.mark.slow
def test_appendix_c_estimate_is_of_the_papers_order():
    est = appendix_c()
    paper = PAPER_APPENDIX_C
    # the busiest device holds the GRU-like update: 4 rounds x 6 passes-worth of 2k x (4H^2 + 2H^2) FLOPs
    assert est["busiest_device_flops_per_graph"] == 4 * 6 * 30 * (4 * 200**2 + 2 * 200**2)
    assert est["throughput_per_s"] == pytest.approx(est["analytic_throughput_per_s"], rel=0.05)
    assert 0.5 < est["throughput_per_s"] / paper["throughput_per_s"] < 2.0
    # node states (30 x 200 float32) cross each link once per round and direction: 2 x 4 rounds per graph
    assert est["node_state_crossings_per_link"] == pytest.approx(8.0)
    per_crossing = est["busiest_link_bits_per_s"] / est["node_state_crossings_per_link"]
    assert 0.5 < per_crossing / paper["bandwidth_bits_per_s"] < 2.0
    assert max(est["utilization"]) > 0.95
    half = appendix_c(wire_dtype="bfloat16")
    assert half["busiest_link_bits_per_s"] == pytest.approx(est["busiest_link_bits_per_s"] / 2)


def test_ggsnn_like_graph_trains():
    g = ggsnn_like(hidden=16, steps=3)
    data = ggsnn_like_dataset(keys=32, nodes=5, hidden=16)
    run = whatif(g, data, devices=2, epochs=3, optimizer={"name": "adam", "lr": 1e-2})
    assert run.train_loss[-1] < run.train_loss[0]
    assert math.isfinite(run.throughput_per_s)
