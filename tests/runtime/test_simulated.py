"""The simulated-hardware backend: equal to the interpreter and the threaded backend, deterministic, and
exact on the pipeline arithmetic of the paper's Fig. 1.

Pipeline gain over sync for a chain of S equal stages (each f forward + b backward per key, c = f + b,
update time u, m keys in flight, n keys, n a multiple of m):

* sync: T_sync = n (S c + u);
* pipeline: a group of m keys takes (S - 1) f to fill (the first forward reaching the last stage), then
  the last stage works through its m (f + b) without idling (backward-first priority keeps it fed), then
  the last backward needs (S - 1) b to drain back to the first stage, then every stage updates in
  parallel: T_group = (m + S - 1) c + u, so G(m) = T_sync / T_pipe = m (S c + u) / ((m + S - 1) c + u),
  i.e. m S / (m + S - 1) when updates are free;
* amp: nothing drains. Once the pipe is full every stage handles a key per c + u / M (M =
  min_update_frequency; the marginal time per key is exactly that), given enough keys in flight to keep
  each stage fed while a neighbour updates: K >= S for M = 1, K = 8 here for M > 1. With K = 8,
  T_amp = (n + S - 1)(c + u) for M = 1: the gain n (S c + u) / ((n + S - 1)(c + u)) tends to S as n
  grows and u / c shrinks. (With K close to S the fill can leave a one-time bubble of up to one f or b;
  it does not grow with n.)

Virtual time makes these equalities exact up to floating-point rounding of the sums.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.cli import main
from amp_notebook.data import Batch, Dataset
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.runtime.costs import CostModel, NodeCost
from amp_notebook.runtime.reference import train_reference
from amp_notebook.runtime.train import train

S = 3  # heavy stages of the pipeline chain


def small_mlp() -> Graph:
    return models.mlp(input_width=64, hidden=32)


def small_rnn() -> Graph:
    return models.rnn(hidden=16, embedding_dim=8)


def assert_params_close(actual, expected, rtol: float) -> None:
    assert set(actual) == set(expected)
    for name in expected:
        for k, v in expected[name].items():
            scale = max(float(np.max(np.abs(v))), 1e-300)
            err = float(np.max(np.abs(actual[name][k] - v))) / scale
            assert err <= rtol, f"{name}.{k}: relative error {err:.3g} > {rtol}"


def row_counts(result) -> Counter:
    ev = result.trace.events()
    names = result.trace.node_names
    return Counter((names[n], int(p), int(k)) for n, p, k in zip(ev["node"], ev["phase"], ev["key"], strict=True))


# ------------------------------------------------------------------ same numbers as the oracle and threads


@pytest.mark.parametrize("model", ["mlp", "rnn"])
def test_simulated_sync_equals_interpreter(digits, lists, model):
    graph, data = (small_mlp(), digits) if model == "mlp" else (small_rnn(), lists)
    seed = 3
    start = graph.init_params(seed, np.float64)
    interp = Interpreter(graph, params=start, dtype=np.float64)
    train_reference(interp, data, epochs=2, seed=seed)
    result = train(graph, data, workers=2, mode="sync", epochs=2, seed=seed, dtype="float64", params=start,
                   backend="simulated", costs=CostModel.this_cpu())  # fmt: skip
    assert_params_close(result.params, interp.params(), rtol=1e-12)
    moved = max(float(np.max(np.abs(result.params[n]["W"] - start[n]["W"]))) for n in start if "W" in start[n])
    assert moved > 1e-3
    assert result.virtual and result.summary()["virtual"] is True


@pytest.mark.parametrize("model", ["mlp", "rnn"])
def test_zero_cost_simulation_reproduces_threaded_sync(digits, lists, model):
    graph, data = (small_mlp(), digits) if model == "mlp" else (small_rnn(), lists)
    start = graph.init_params(5, np.float64)
    kwargs = {"workers": 2, "mode": "sync", "epochs": 2, "seed": 5, "dtype": "float64", "params": start}
    threaded = train(graph, data, **kwargs)
    simulated = train(graph, data, backend="simulated", costs=CostModel.zero(), **kwargs)
    assert_params_close(simulated.params, threaded.params, rtol=1e-12)
    assert row_counts(simulated) == row_counts(threaded)  # the same messages, updates and flushes
    ev = simulated.trace.events()
    assert simulated.wall_s == 0.0 and not ev["end"].any()
    assert [e.train_loss for e in simulated.history] == pytest.approx([e.train_loss for e in threaded.history])


def test_costs_need_the_simulated_backend(digits):
    with pytest.raises(ValueError, match="backend='simulated'"):
        train(small_mlp(), digits, costs=CostModel())


# ------------------------------------------------------------------ determinism and the trace


def test_same_inputs_give_identical_trace_and_parameters(lists):
    costs = CostModel(flops=5e9, message_overhead_s=2e-6, latency_s=1e-6, bandwidth_bits_per_s=1e9)
    kwargs = {"workers": 3, "mode": "amp", "max_active_keys": 6, "min_update_frequency": 2, "epochs": 2,
              "seed": 1, "optimizer": {"name": "adam", "lr": 3e-3}, "backend": "simulated", "costs": costs}  # fmt: skip
    a = train(small_rnn(), lists, **kwargs)
    b = train(small_rnn(), lists, **kwargs)
    ea, eb = a.trace.events(), b.trace.events()
    for col in ea:
        np.testing.assert_array_equal(ea[col], eb[col], err_msg=col)
    sa, sb = a.trace.staleness(), b.trace.staleness()
    for col in sa:
        np.testing.assert_array_equal(sa[col], sb[col], err_msg=col)
    for name in a.params:
        for k in a.params[name]:
            np.testing.assert_array_equal(a.params[name][k], b.params[name][k])
    assert a.wall_s == b.wall_s and a.backend_stats == b.backend_stats
    assert sa["value"].max() > 0  # amp with 6 keys: the run was asynchronous, not trivially ordered


def test_trace_has_virtual_times_and_exports(digits, tmp_path: Path):
    costs = CostModel(flops=1e10, message_overhead_s=1e-6, latency_s=5e-6, bandwidth_bits_per_s=1e9)
    r = train(small_mlp(), digits, workers=2, mode="amp", max_active_keys=4, backend="simulated", costs=costs)
    ev = r.trace.events()
    assert ev["start"].min() == 0.0 and ev["end"].max() == pytest.approx(r.wall_s)
    for w in range(2):  # a worker handles one message at a time: its rows never overlap
        mine = np.argsort(ev["start"][ev["worker"] == w], kind="stable")
        starts, ends = ev["start"][ev["worker"] == w][mine], ev["end"][ev["worker"] == w][mine]
        assert np.all(starts[1:] >= ends[:-1] - 1e-15)
    st = r.trace.staleness()
    assert st["time"].min() >= 0.0 and st["time"].max() <= r.wall_s
    util = r.utilization()
    assert len(util) == 2 and all(0.0 < u <= 1.0 for u in util)
    path = tmp_path / "sim.json"
    doc = r.trace.to_chrome(path)
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(ev["end"]) and json.loads(path.read_text())["traceEvents"]
    assert r.summary()["bandwidth_bits_per_s"] > 0


def test_link_cost_delays_the_receiver_by_latency_plus_transfer():
    g = Graph("two")
    h = g.linear(g.input("x", width=8), 8, name="a", worker=0)
    g.mse(g.linear(h, 8, name="b", worker=1), g.input("target", width=8), name="loss")
    data = Dataset("one", [Batch({"x": np.ones((5, 8)), "target": np.zeros((5, 8))}, 5)], [])
    costs = CostModel(flops=1e9, latency_s=3e-6, bandwidth_bits_per_s=2e9, wire_dtype="float16", header_bytes=16)
    r = train(g, data, workers=2, mode="sync", validate=False, backend="simulated", costs=costs)
    ev = r.trace.events()
    names = r.trace.node_names
    a_fwd = next(i for i in range(len(ev["end"])) if names[ev["node"][i]] == "a" and ev["phase"][i] == 0)
    b_fwd = next(i for i in range(len(ev["end"])) if names[ev["node"][i]] == "b" and ev["phase"][i] == 0)
    nbytes = 5 * 8 * 2 + 16  # float16 on the wire, plus the header
    assert ev["end"][a_fwd] == pytest.approx(2 * 5 * 8 * 8 / 1e9)
    assert ev["start"][b_fwd] == pytest.approx(ev["end"][a_fwd] + 3e-6 + 8 * nbytes / 2e9, rel=1e-12)
    links = r.backend_stats["links"]
    assert links["0->1"] == {"bytes": nbytes, "messages": 1}  # a's output forward
    assert links["1->0"] == {"bytes": nbytes, "messages": 1}  # b's input gradient backward


def test_a_received_message_costs_its_receiver_cpu_in_its_next_step():
    """A message from another worker costs the receiver receive_overhead_s + bytes * receive_s_per_byte, paid
    in the step that follows its arrival; a message between nodes of one worker costs nothing to receive."""
    g = Graph("two")
    h = g.linear(g.input("x", width=8), 8, name="a", worker=0)
    g.mse(g.linear(h, 8, name="b", worker=1), g.input("target", width=8), name="loss")
    data = Dataset("one", [Batch({"x": np.ones((5, 8)), "target": np.zeros((5, 8))}, 5)], [])
    link = {"flops": 1e9, "latency_s": 3e-6, "bandwidth_bits_per_s": 2e9, "header_bytes": 16}

    def run(**receive: float):
        r = train(
            g, data, workers=2, mode="sync", validate=False, backend="simulated", costs=CostModel(**link, **receive)
        )
        ev, names = r.trace.events(), r.trace.node_names
        rows = {
            (names[n], int(p)): (s, e)
            for n, p, s, e in zip(ev["node"], ev["phase"], ev["start"], ev["end"], strict=True)
        }
        return r, rows

    free, plain = run()
    paid, rows = run(receive_overhead_s=2e-6, receive_s_per_byte=1e-9)
    nbytes = 5 * 8 * 4 + 16  # float32 on the wire, plus the header
    receive = 2e-6 + 1e-9 * nbytes
    assert rows[("a", 0)] == plain[("a", 0)]  # its input came from the controller: nothing to receive
    assert rows[("b", 0)][0] == plain[("b", 0)][0]  # b starts when a's output arrives, as before
    assert rows[("b", 0)][1] - rows[("b", 0)][0] == pytest.approx(plain[("b", 0)][1] - plain[("b", 0)][0] + receive)
    assert rows[("loss", 0)][1] - rows[("loss", 0)][0] == pytest.approx(plain[("loss", 0)][1] - plain[("loss", 0)][0])
    assert rows[("a", 1)][1] - rows[("a", 1)][0] == pytest.approx(plain[("a", 1)][1] - plain[("a", 1)][0] + receive)
    assert paid.wall_s == pytest.approx(free.wall_s + 2 * receive)  # one crossing each way, both on the path
    assert paid.backend_stats["links"] == free.backend_stats["links"]
    assert paid.backend_stats["costs"]["receive_s_per_byte"] == 1e-9


# ------------------------------------------------------------------ the paper's Fig. 1 arithmetic


def heavy_chain(stages: int = S, width: int = 8) -> Graph:
    g = Graph("heavy_chain")
    h = g.input("x", width=width)
    for i in range(stages):
        h = g.linear(h, width, name=f"layer{i}")
    g.mse(h, g.input("target", width=width), name="loss")
    return g


def chain_data(n: int, width: int = 8) -> Dataset:
    rng = np.random.default_rng(0)
    return Dataset("chain", [Batch({"x": rng.standard_normal((4, width)), "target": rng.standard_normal((4, width))},
                                   4) for _ in range(n)], [])  # fmt: skip


def chain_makespan(mode: str, keys: int, n: int, f: float, b: float, u: float, muf: int = 1) -> float:
    costs = CostModel.zero(nodes={f"layer{i}": NodeCost(fwd_s=f, bwd_s=b, update_s=u) for i in range(S)})
    r = train(heavy_chain(), chain_data(n), workers=S, mode=mode, max_active_keys=keys, min_update_frequency=muf,
              validate=False, shuffle=False, backend="simulated", costs=costs)  # fmt: skip
    return r.wall_s


def pipeline_gain(m: int, stages: int, c: float, u: float) -> float:
    return m * (stages * c + u) / ((m + stages - 1) * c + u)


@pytest.mark.parametrize(("f", "b", "u"), [(1.0, 1.0, 0.0), (1.0, 2.0, 0.5), (3.0, 1.0, 0.25)])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 6])
def test_pipeline_gain_matches_the_formula(f, b, u, m):
    n = 12  # a multiple of every m
    c = f + b
    sync = chain_makespan("sync", 1, n, f, b, u)
    assert sync == pytest.approx(n * (S * c + u), rel=1e-12)
    pipe = chain_makespan("pipeline", m, n, f, b, u)
    assert pipe == pytest.approx(n / m * ((m + S - 1) * c + u), rel=1e-12)
    assert sync / pipe == pytest.approx(pipeline_gain(m, S, c, u), rel=1e-12)
    if u == 0.0:
        assert sync / pipe == pytest.approx(m * S / (m + S - 1), rel=1e-12)


@pytest.mark.parametrize(("f", "b", "u"), [(1.0, 1.0, 0.0), (1.0, 2.0, 0.1), (2.0, 1.0, 0.5)])
def test_amp_gain_approaches_the_number_of_heavy_nodes(f, b, u):
    c = f + b
    n = 60
    amp = chain_makespan("amp", 8, n, f, b, u)
    # The first key crosses every stage forward and backward (S c); a stage sends its gradient on before
    # its own update, so only the last update lies on that path (+ u); every further key adds one
    # stage's period c + u.
    assert amp == pytest.approx(S * c + u + (n - 1) * (c + u), rel=1e-12)
    gain = chain_makespan("sync", 1, n, f, b, u) / amp
    assert gain == pytest.approx(n * (S * c + u) / (S * c + u + (n - 1) * (c + u)), rel=1e-12)
    assert gain > pipeline_gain(8, S, c, u)  # no drain, no fill after the first
    if u <= 0.1:
        assert 0.9 * S <= gain < S


@pytest.mark.parametrize(("keys", "muf"), [(S, 1), (S + 1, 1), (8, 2), (8, 4)])
@pytest.mark.parametrize(("f", "b", "u"), [(1.0, 2.0, 0.1), (2.0, 1.0, 0.5)])
def test_amp_steady_state_period_is_one_stage(keys, muf, f, b, u):
    # the fill may cost a bubble once, but every further key adds exactly c + u / min_update_frequency
    short, long = chain_makespan("amp", keys, 24, f, b, u, muf), chain_makespan("amp", keys, 48, f, b, u, muf)
    assert (long - short) / 24 == pytest.approx(f + b + u / muf, rel=1e-12)


def test_backward_messages_jump_the_forward_queue():
    # 8 keys enter stage 0 at once; key 0's gradient returns to stage 0 at (S - 1) f + S b = 5 and is taken
    # at once although forward messages of keys 5..7 are still waiting (forward first would start it at 8)
    costs = CostModel.zero(nodes={f"layer{i}": NodeCost(fwd_s=1.0, bwd_s=1.0) for i in range(S)})
    r = train(heavy_chain(), chain_data(8), workers=S, mode="amp", max_active_keys=8, validate=False,
              shuffle=False, backend="simulated", costs=costs)  # fmt: skip
    ev = r.trace.events()
    first = r.trace.node_names.index("layer0")
    rows = [(float(s_), int(p), int(k)) for s_, p, k, n in zip(ev["start"], ev["phase"], ev["key"], ev["node"],
                                                               strict=True) if n == first and p < 2]  # fmt: skip
    assert rows[:7] == [(0.0, 0, 0), (1.0, 0, 1), (2.0, 0, 2), (3.0, 0, 3), (4.0, 0, 4), (5.0, 1, 0), (6.0, 0, 5)]
    depth = ev["depth"][(ev["node"] == first) & (ev["phase"] == 1)]
    assert depth[0] > 0  # forwards were waiting when the backward was taken


def test_amp_with_one_key_is_sync_speed():
    f, b, u, n = 1.0, 1.0, 0.0, 6
    assert chain_makespan("amp", 1, n, f, b, u) == pytest.approx(n * S * (f + b), rel=1e-12)


# ------------------------------------------------------------------ CLI and benchmark contracts


def last_json_line(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


@pytest.mark.parametrize("model", ["mlp", "rnn"])
def test_cli_simulate_json(model, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    trace = tmp_path / "t.json"
    args = ["simulate", "--model", model, "--devices", "2", "--flops", "2T", "--bandwidth", "10Gb/s",
            "--max-active-keys", "3", "--trace", str(trace), "--json"]  # fmt: skip
    if model == "rnn":
        args += ["--n-train", "300", "--receive-overhead", "2e-6", "--receive-per-byte", "1e-9"]
    assert main(args) == 0
    out = last_json_line(capsys.readouterr().out)
    assert out.keys() >= {"throughput_per_s", "utilization", "bandwidth_bits_per_s", "makespan_s", "virtual"}
    assert out["virtual"] is True and out["costs"]["flops"] == 2e12
    assert out["costs"]["bandwidth_bits_per_s"] == 10e9
    assert (out["costs"]["receive_overhead_s"], out["costs"]["receive_s_per_byte"]) == (
        (2e-6, 1e-9) if model == "rnn" else (0.0, 0.0)
    )
    assert len(out["utilization"]) == 2 and out["throughput_per_s"] > 0 and out["makespan_s"] > 0
    assert any(e["ph"] == "X" for e in json.loads(trace.read_text())["traceEvents"])


def test_cli_simulate_refuses_bad_hardware(capsys: pytest.CaptureFixture[str]):
    for flag, value in (("--flops", "0"), ("--flops", "-1T"), ("--bandwidth", "0"), ("--bandwidth", "fast")):
        with pytest.raises(SystemExit):
            main(["simulate", "--model", "mlp", f"{flag}={value}"])
        assert "expected a number" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_simulator_quick_json(capsys: pytest.CaptureFixture[str]):
    assert main(["bench", "simulator", "--quick", "--json"]) == 0
    out = last_json_line(capsys.readouterr().out)
    assert out["benchmark"] == "simulator" and out["messages_per_s"] > 0 and out["messages"] > 0
    assert math.isfinite(out["virtual_makespan_s"])
