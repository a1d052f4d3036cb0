"""The cost model: appendix-C FLOP counts, wire precision, caching, presets and refusals of bad hardware."""

from __future__ import annotations

import math

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.message import BWD, FWD, UPDATE, Message, State
from amp_notebook.runtime.costs import CostModel, CostModelError, Link, NodeCost, calibrate_cpu, message_flops
from amp_notebook.runtime.placement import place
from amp_notebook.runtime.plan import compile_plan


def mlp_plan(workers: int = 2):
    g = models.mlp(input_width=16, hidden=32, classes=4, layers=3)
    return compile_plan(g, place(g, workers), workers)


def test_linear_flops_follow_appendix_c():
    plan = mlp_plan()
    first, second = plan.ops[plan.index["linear1"]], plan.ops[plan.index["linear2"]]
    k = 10
    assert message_flops(first, FWD, (k, 16), grad_input=False) == 2 * k * 16 * 32
    assert message_flops(first, BWD, (k, 32), grad_input=False) == 2 * k * 16 * 32  # accumulation only
    assert message_flops(second, BWD, (k, 32), grad_input=True) == 4 * k * 32 * 32  # plus the input gradient
    assert message_flops(second, FWD, (3, k, 32), grad_input=True) == 2 * 3 * k * 32 * 32  # leading dims are rows


def test_table_uses_flops_overhead_and_update_cost():
    plan = mlp_plan()
    costs = CostModel(flops=1e9, message_overhead_s=1e-6, update_flops_per_param=2.0, update_overhead_s=3e-6)
    table = costs.compile(plan)
    i1, i2 = plan.index["linear1"], plan.index["linear2"]
    x = np.zeros((10, 16), np.float32)
    g = np.zeros((10, 32), np.float32)
    assert table.message(i1, FWD, x)[0] == pytest.approx(1e-6 + 2 * 10 * 16 * 32 / 1e9)
    assert table.message(i1, BWD, g)[0] == pytest.approx(1e-6 + 2 * 10 * 16 * 32 / 1e9)  # no input gradient
    assert table.message(i2, BWD, g)[0] == pytest.approx(1e-6 + 4 * 10 * 32 * 32 / 1e9)
    assert table.message(i2, UPDATE, None)[0] == pytest.approx(3e-6 + 2.0 * (32 * 32 + 32) / 1e9)
    relu = plan.index["relu1"]
    assert table.message(relu, FWD, g)[0] == pytest.approx(1e-6 + 320 / 1e9)
    assert table.message(plan.index["x"], FWD, x)[0] == pytest.approx(1e-6)  # inputs: overhead only


def test_per_device_flops_and_node_overrides():
    plan = mlp_plan(workers=2)
    i1 = plan.index["linear1"]
    slow = [1.0, 1.0]
    slow[plan.owner[i1]] = 1e6
    table = CostModel(flops=[1e9 if f == 1.0 else f for f in slow]).compile(plan)
    x = np.zeros((10, 16), np.float32)
    assert table.message(i1, FWD, x)[0] == pytest.approx(2 * 10 * 16 * 32 / 1e6)
    fixed = CostModel(nodes={"linear1": NodeCost(fwd_s=0.5, update_s=0.25)}).compile(plan)
    assert fixed.message(i1, FWD, x)[0] == 0.5
    assert fixed.message(i1, BWD, np.zeros((10, 32), np.float32))[0] == pytest.approx(2 * 10 * 16 * 32 / 1e12)
    assert fixed.message(i1, UPDATE, None)[0] == 0.25


@pytest.mark.parametrize(("wire", "per_element"), [("float32", 4), ("float16", 2), ("bfloat16", 2), ("float64", 8)])
def test_wire_precision_sets_bytes_on_links(wire, per_element):
    plan = mlp_plan()
    table = CostModel(wire_dtype=wire, header_bytes=24).compile(plan)
    i2 = plan.index["linear2"]
    assert table.message(i2, FWD, np.zeros((10, 32), np.float64))[1] == 10 * 32 * per_element + 24
    assert table.message(i2, FWD, np.zeros((10, 32), np.float32))[1] == 10 * 32 * per_element + 24
    # integer payloads (token ids, class targets) keep their own width whatever the wire precision
    assert table.message(plan.index["target"], FWD, np.zeros(10, np.int64))[1] == 10 * 8 + 24


def test_costs_are_cached_by_shape():
    plan = mlp_plan()
    table = CostModel().compile(plan)
    i1 = plan.index["linear1"]
    first = table.message(i1, FWD, np.zeros((10, 16), np.float32))
    assert table.message(i1, FWD, np.ones((10, 16), np.float32)) == first
    assert len(table._cache) == 1  # same shape and dtype: one evaluation
    assert table.message(i1, FWD, np.zeros((20, 16), np.float32)) != first
    assert len(table._cache) == 2


def test_a_bundle_pays_the_message_overhead_once_and_the_work_of_every_payload():
    plan = mlp_plan()
    model = CostModel(flops=1e9, message_overhead_s=5e-6)
    table = model.compile(plan)
    i1 = plan.index["linear1"]
    payloads = [np.zeros((n, 16), np.float32) for n in (1, 3, 10)]
    bundle = [Message(i1, "in", FWD, x, State(key=k)) for k, x in enumerate(payloads)]
    work = sum(2 * len(x) * 16 * 32 / 1e9 for x in payloads)
    assert table.bundle(bundle) == pytest.approx(5e-6 + work)
    assert table.bundle(bundle[:1]) == pytest.approx(table.message(i1, FWD, payloads[0])[0])


def test_link_matrices_and_overrides():
    plan = mlp_plan(workers=3)
    table = CostModel(latency_s=1e-6, bandwidth_bits_per_s=8e9, links={(0, 2): Link(5e-6, 1e9)}).compile(plan)
    assert table.latency[0][0] == 0.0 and table.seconds_per_bit[1][1] == 0.0  # same worker: free
    assert table.latency[0][1] == 1e-6 and table.seconds_per_bit[0][1] == pytest.approx(1 / 8e9)
    assert table.latency[0][2] == 5e-6 and table.seconds_per_bit[0][2] == pytest.approx(1e-9)
    assert table.latency[2][0] == 1e-6  # links are directed


def test_presets():
    assert CostModel.tflops_device().flops == 1e12 and CostModel().flops == 1e12
    zero = CostModel.zero()
    table = zero.compile(mlp_plan())
    assert table.message(0, FWD, np.zeros((5, 16)))[0] == 0.0
    cpu = CostModel.this_cpu(latency_s=2e-6)
    flops, overhead = calibrate_cpu()
    assert cpu.flops == flops and cpu.message_overhead_s == overhead and cpu.latency_s == 2e-6
    assert math.isfinite(flops) and flops > 0 and 0 < overhead < 1
    spec = CostModel(bandwidth_bits_per_s=math.inf, nodes={"a": NodeCost(fwd_s=1.0)}).spec()
    assert spec["bandwidth_bits_per_s"] == "inf" and spec["nodes"] == {"a": {"fwd_s": 1.0}}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"flops": 0}, r"CostModel.flops: expected a number > 0"),
        ({"flops": -1e12}, r"CostModel.flops: expected a number > 0"),
        ({"flops": [1e12, 0.0]}, r"CostModel.flops\[1\]: expected a number > 0"),
        ({"flops": []}, "one per device"),
        ({"flops": float("nan")}, "CostModel.flops"),
        ({"bandwidth_bits_per_s": 0}, r"bandwidth_bits_per_s: expected a number > 0 \(bits per second"),
        ({"bandwidth_bits_per_s": -5.0}, "bandwidth_bits_per_s"),
        ({"latency_s": -1e-6}, r"CostModel.latency_s: expected a finite number >= 0, got -1e-06"),
        ({"message_overhead_s": math.inf}, "message_overhead_s"),
        ({"wire_dtype": "int8"}, r"wire_dtype: expected one of \['bfloat16', 'float16', 'float32', 'float64'\]"),
        ({"header_bytes": -1}, "header_bytes"),
        ({"receive_overhead_s": -1e-6}, r"CostModel.receive_overhead_s: expected a finite number >= 0"),
        ({"receive_s_per_byte": math.nan}, r"CostModel.receive_s_per_byte: expected a finite number >= 0"),
        ({"nodes": {"a": 1.0}}, r"CostModel.nodes\['a'\]: expected a NodeCost"),
        ({"nodes": {"a": NodeCost(fwd_s=-1.0)}}, "NodeCost for node 'a': fwd_s"),
        ({"links": {(0, 1): Link(bandwidth_bits_per_s=0.0)}}, r"links\[\(0, 1\)\].bandwidth_bits_per_s"),
    ],
)
def test_bad_hardware_is_refused_with_the_field_named(kwargs, message):
    with pytest.raises(CostModelError, match=message):
        CostModel(**kwargs)


def test_binding_checks_names_devices_and_links():
    plan = mlp_plan(workers=2)
    with pytest.raises(CostModelError, match=r"names node\(s\) \['nope'\].*its nodes are"):
        CostModel(nodes={"nope": NodeCost(fwd_s=1.0)}).compile(plan)
    with pytest.raises(CostModelError, match=r"one FLOP/s figure per device \(2\), got 3"):
        CostModel(flops=[1e12] * 3).compile(plan)
    with pytest.raises(CostModelError, match=r"links\[\(0, 5\)\]: expected two different workers in 0..1"):
        CostModel(links={(0, 5): Link()}).compile(plan)


def test_more_devices_than_the_graph_can_use_warns():
    from amp_notebook.data import load_digits_dataset
    from amp_notebook.runtime.train import train

    g = Graph("two_layers")
    g.softmax_cross_entropy(g.linear(g.relu(g.linear(g.input("x", width=64), 8)), 10), g.input("target", dtype="int"))
    data = load_digits_dataset(batch_size=500)
    with pytest.warns(UserWarning, match=r"worker\(s\) \[2, 3, 4, 5\] get no node \(2 heavy nodes for 6 workers\)"):
        r = train(g, data, workers=6, backend="simulated", validate=False)
    assert r.utilization()[2:] == [0.0] * 4
