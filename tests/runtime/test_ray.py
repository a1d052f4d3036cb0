"""The Ray backend on a 2-raylet cluster on this machine: the same numbers, the same accounting, clean faults.

Every test runs on the session's ``ray_cluster`` (two raylets, so worker 0 and worker 1 sit on different
Ray nodes and every message between them crosses nodes). Runs are small; each still pays a few seconds of
actor start-up, so the module is in the slow tier.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.data import Dataset
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.ir.ops import Cond
from amp_notebook.runtime.reference import train_reference
from amp_notebook.runtime.run import Run
from amp_notebook.runtime.train import train
from amp_notebook.runtime.worker import NodeError
from tests.conftest import digits_dataset, lists_dataset

pytestmark = pytest.mark.slow
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def lists() -> Dataset:
    return lists_dataset(n_train=300, n_val=60)


@pytest.fixture(scope="module")
def small_digits() -> Dataset:
    return digits_dataset(batch_size=20)


def small_mlp():
    return models.mlp(input_width=64, hidden=32)


def small_rnn(replicas: int = 1):
    return models.rnn(hidden=16, embedding_dim=8, replicas=replicas)


def row_counts(result) -> Counter:
    ev = result.trace.events()
    return Counter(zip(ev["node"].tolist(), ev["phase"].tolist(), ev["key"].tolist(), strict=True))


def until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {DEADLINE_S} s for {what}")
        time.sleep(0.05)


def no_live_actors() -> bool:
    from amp_notebook.runtime.backends.ray import live_actors

    return not live_actors()


# ------------------------------------------------------------------ the same numbers as the oracle


@pytest.mark.parametrize(("model", "workers"), [("mlp", 2), ("rnn_x2", 3)])
def test_sync_on_ray_equals_the_reference_interpreter(ray_cluster, digits, lists, model, workers):
    graph, dataset = (small_mlp(), digits) if model == "mlp" else (small_rnn(replicas=2), lists)
    start = graph.init_params(3, np.float64)
    interp = Interpreter(graph, params=start, dtype=np.float64)
    train_reference(interp, dataset, epochs=2, seed=3)
    expected = interp.params()
    result = train(graph, dataset, workers=workers, mode="sync", epochs=2, seed=3, dtype="float64", params=start,
                   backend="ray", address=ray_cluster.address)  # fmt: skip
    for name, p in expected.items():
        for k, v in p.items():
            np.testing.assert_allclose(result.params[name][k], v, rtol=1e-12, atol=1e-14, err_msg=f"{name}.{k}")
    moved = max(float(np.max(np.abs(expected[n]["W"] - start[n]["W"]))) for n in expected if "W" in expected[n])
    assert moved > 1e-3
    if model == "rnn_x2":  # replicas averaged at the last epoch's end, in the actors
        np.testing.assert_array_equal(result.params["step0"]["W"], result.params["step1"]["W"])
    # the workers sat on different Ray nodes: messages crossed nodes
    nodes = {w["ray_node"] for w in result.backend_stats["workers"]}
    assert len(nodes) == 2
    assert {w["worker"] for w in result.backend_stats["workers"]} == set(range(workers))
    # the loss of every key reached the controller (validation accuracy per epoch, as on threads)
    assert all(e.val_accuracy is not None for e in result.history) and len(result.history) == 2


def test_trace_rows_and_staleness_match_threads_in_kind(ray_cluster, digits):
    """One trace row per handled message and update, as on threads; one staleness row per gradient; zero
    staleness in sync and pipeline modes, positive staleness under amp with several keys; times on the
    driver's clock."""
    graph = small_mlp()
    # one message per row: bundles form by timing, which differs between the backends
    common = {"workers": 2, "epochs": 1, "seed": 1, "validate": True, "max_bundle": 1}
    for mode, keys in (("sync", 1), ("pipeline", 4), ("amp", 4)):
        on_ray = train(graph, digits, mode=mode, max_active_keys=keys, backend="ray", **common)
        on_threads = train(graph, digits, mode=mode, max_active_keys=keys, **common)
        assert row_counts(on_ray) == row_counts(on_threads)
        st_ray, st_threads = on_ray.staleness(), on_threads.staleness()
        assert st_ray["count"] == st_threads["count"] == 4 * len(digits.train)
        if mode in ("sync", "pipeline"):
            assert st_ray["max"] == st_threads["max"] == 0
        else:
            assert st_ray["max"] > 0 and st_ray["mean"] > 0
        ev = on_ray.trace.events()
        assert ev["start"].min() >= -0.01 and ev["end"].max() <= on_ray.wall_s + 0.01
        assert set(ev["worker"].tolist()) == {0, 1}
        stats = on_ray.backend_stats
        assert stats["missed_trace_rows"] == 0
        assert all(0 <= w["error_s"] < 0.05 for w in stats["workers"])  # half the best ping round trip
        # one machine: every process reads the same monotonic clock, so the true offset is 0
        assert all(abs(w["offset_s"]) <= w["error_s"] + 1e-3 for w in stats["workers"])
    assert no_live_actors()


def test_amp_replicas_train_and_report_like_threads(ray_cluster, lists):
    result = train(small_rnn(replicas=2), lists, workers=3, mode="amp", max_active_keys=4,
                   min_update_frequency=5, epochs=2, seed=2, backend="ray",
                   optimizer={"name": "adam", "lr": 3e-3})  # fmt: skip
    assert len(result.history) == 2
    assert result.history[-1].train_loss < result.history[0].train_loss
    assert result.staleness()["count"] > 0
    assert result.train_instances == 2 * sum(b.size for b in lists.train)
    assert result.report() is not None  # reports work on a Ray run's trace
    assert result.trace.to_chrome()["traceEvents"]


def test_bundles_run_in_the_actors_and_their_keys_reach_the_trace(ray_cluster, small_digits):
    """Message bundling in the actors: bundle rows carry their message count, and the member rows (which
    keys a bundle ran) travel to the driver with row indices that match the bundles' event rows."""
    result = train(small_mlp(), small_digits, workers=2, mode="amp", max_active_keys=8, max_bundle=8,
                   validate=False, epochs=1, backend="ray")  # fmt: skip
    ev = result.trace.events()
    bundles = result.trace.bundle_keys()
    by_row = {(int(w), int(r)): int(m) for w, r, m in zip(ev["worker"], ev["row"], ev["messages"], strict=True)}
    assert bundles, "no bundle formed with 8 keys in flight"
    for where, keys in bundles.items():
        assert by_row[where] == len(keys) > 1
    # a bundle's outputs for the other worker left in one call: fewer calls than messages
    sent = result.backend_stats["workers"]
    assert sum(w["calls_sent"] for w in sent) < sum(w["messages_sent"] for w in sent)
    # every training message was handled once: forward rows' messages add up to the keys times the nodes
    handled = Counter()
    for node, phase, m in zip(ev["node"].tolist(), ev["phase"].tolist(), ev["messages"].tolist(), strict=True):
        handled[(node, phase)] += m
    x = result.trace.node_names.index("linear1")
    assert handled[(x, 0)] == handled[(x, 1)] == len(small_digits.train)


# ------------------------------------------------------------------ faults


def mlp_with_cond(predicate: str):
    from amp_notebook.ir.graph import Graph

    g = Graph("cond_mlp")
    h = g.relu(g.linear(g.input("x", width=64), 16, name="linear1"))
    yes, no = g.cond(g.linear(h, 10, name="linear2"), predicate, name="check")
    g.softmax_cross_entropy(g.phi(yes, no, name="merge"), g.input("target", dtype="int"), name="loss")
    return g


def test_a_node_error_in_an_actor_is_the_same_node_error(ray_cluster, digits):
    with pytest.raises(NodeError) as info:
        train(mlp_with_cond("1 // (key - key) > 0"), digits, workers=2, mode="amp", epochs=1, backend="ray")
    err = info.value
    assert err.node == "check" and err.kind == "Cond" and err.direction == "fwd" and err.port == "in"
    assert "ZeroDivisionError" in str(err) and "key" in err.state
    until(no_live_actors, "the actors of the failed run to be gone")


def test_an_error_mid_loop_names_its_state(ray_cluster, lists):
    graph = small_rnn()
    graph.nodes["more"].op = Cond("1 // (t - 3) > -100 and t < length")
    with pytest.raises(NodeError) as info:
        train(graph, lists, workers=2, mode="amp", max_active_keys=4, epochs=1, backend="ray")
    assert info.value.node == "more" and info.value.state["t"] == 3
    until(no_live_actors, "the actors of the failed run to be gone")


def test_an_actor_that_dies_stops_the_run_with_an_error_naming_it(ray_cluster, small_digits):
    import ray

    from amp_notebook.runtime.backends.ray import WorkerLostError

    run = train(small_mlp(), small_digits, workers=2, mode="amp", max_active_keys=2, epochs=10_000,
                validate=False, backend="ray", background=True)  # fmt: skip
    try:
        until(lambda: run.status["keys_done"] > 3, "the run to make progress")
        ray.kill(run._backend.hosts[1])
        with pytest.raises(WorkerLostError) as info:
            run.wait(timeout=DEADLINE_S)
    finally:
        run.stop()
    err = info.value
    assert err.worker == 1 and "linear2" in err.nodes and "worker 1" in str(err) and "linear2" in str(err)
    assert run.state == "failed"
    until(no_live_actors, "every actor of the failed run to be gone")


# ------------------------------------------------------------------ live control of a background run


def test_a_background_ray_run_takes_live_changes_and_leaves_no_actor(ray_cluster, small_digits):
    run = train(small_mlp(), small_digits, workers=2, mode="amp", max_active_keys=2, epochs=10_000,
                validate=False, backend="ray", background=True)  # fmt: skip
    assert isinstance(run, Run)
    hosts = run._backend.hosts

    def knobs(w: int) -> dict:
        import ray

        return ray.get(hosts[w].knobs.remote())

    try:
        until(lambda: run.status["keys_done"] > 2, "the run to make progress")
        run.set_min_update_frequency("linear3", 7)
        index = run._session.plan.index["linear3"]
        assert all(knobs(w)["min_update_frequency"][index] == 7 for w in range(2))
        run.set_max_bundle(None, 4)
        assert all(knobs(w)["max_bundle"] == [4] * len(run._session.plan.names) for w in range(2))
        run.set_max_active_keys(3)
        assert run.status["max_active_keys"] == 3
        until(lambda: run.status["keys_in_flight"] == 3, "a third key to be admitted")
        run.pause()
        assert all(knobs(w)["paused"] for w in range(2))
        assert run.state == "paused"
        run.resume()
        assert not any(knobs(w)["paused"] for w in range(2))
        done = run.status["keys_done"]
        until(lambda: run.status["keys_done"] > done + 2, "progress after resume")
        rows = run.trace.since().events["start"]
        assert len(rows) > 0  # trace rows reached the driver while the run went
    finally:
        run.stop()
    assert run.state == "finished"
    result = run.wait()
    assert len(result.trace.events()["start"]) > 0
    until(no_live_actors, "the actors of the stopped run to be gone")


def test_cli_trains_on_a_ray_cluster(ray_cluster, capsys):
    import json

    from amp_notebook.cli import main

    assert main(["train", "--model", "mlp", "--backend", "ray", "--address", ray_cluster.address,
                 "--epochs", "1", "--quiet", "--json"]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["backend"] == "ray" and summary["train_instances"] > 0
    assert [w["worker"] for w in summary["ray"]["workers"]] == [0, 1]


def test_the_backend_options_are_checked_before_anything_starts(digits):
    with pytest.raises(ValueError, match="address= names a Ray cluster"):
        train(small_mlp(), digits, address="127.0.0.1:6379")
