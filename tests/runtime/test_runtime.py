"""The threaded runtime against the reference interpreter, plain SGD and its own invariants.

Small data throughout (digits in keys of 100, a few hundred list-reduction instances) so every run takes
a fraction of a second.
"""

from __future__ import annotations

import math
import threading
from collections import Counter

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.data import Batch, Dataset
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.ir.ops import Cond
from amp_notebook.optim import make_optimizer
from amp_notebook.runtime.backends import threads as threads_backend
from amp_notebook.runtime.reference import train_reference
from amp_notebook.runtime.session import DataError, RunConfig, Session
from amp_notebook.runtime.train import train
from amp_notebook.runtime.worker import NodeError
from tests.conftest import lists_dataset

FWD, BWD, UPDATE = 0, 1, 2
MLP_LINEARS = ("linear1", "linear2", "linear3", "linear4")


@pytest.fixture(scope="module")
def lists() -> Dataset:
    return lists_dataset(n_train=500, n_val=150)


def small_mlp():
    return models.mlp(input_width=64, hidden=32)


def small_rnn(replicas: int = 1):
    return models.rnn(hidden=16, embedding_dim=8, replicas=replicas)


def worker_threads_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("amp-worker") and t.is_alive()]


def assert_params_close(actual, expected, rtol: float) -> None:
    assert set(actual) == set(expected)
    for name in expected:
        assert set(actual[name]) == set(expected[name]), name
        for k, v in expected[name].items():
            scale = max(float(np.max(np.abs(v))), 1e-300)
            err = float(np.max(np.abs(actual[name][k] - v))) / scale
            assert err <= rtol, f"{name}.{k}: relative error {err:.3g} > {rtol}"


def run_with_keys(graph, dataset, **kwargs):
    """train(...) that also returns the KeyInfo of every completed key, in completion order."""
    infos = []
    result = train(graph, dataset, on_key_done=infos.append, **kwargs)
    return result, infos


def trace_counts(result) -> Counter:
    """(node name, phase, key) -> number of messages handled (a bundle's row counts once for each of its keys)."""
    ev = result.trace.events()
    names = result.trace.node_names
    bundles = result.trace.bundle_keys()
    counts: Counter = Counter()
    for w, row, n, p, k, m in zip(*(ev[c].tolist() for c in ("worker", "row", "node", "phase", "key", "messages")),
                                  strict=True):  # fmt: skip
        for key in bundles[(w, row)] if m > 1 else [k]:
            counts[(names[n], int(p), int(key))] += 1
    return counts


def messages_in_phase(result, phase: int) -> int:
    ev = result.trace.events()
    return int(np.sum(ev["messages"][ev["phase"] == phase]))


# ------------------------------------------------------------------ sync runtime == interpreter


@pytest.mark.parametrize(
    ("model", "workers"),
    [("mlp", 1), ("mlp", 2), ("rnn", 2), ("rnn", 3), ("rnn_x2", 2), ("rnn_x2", 3)],
)
def test_sync_runtime_equals_interpreter(digits, lists, model, workers):
    if model == "mlp":
        graph, dataset = small_mlp(), digits
    else:
        graph, dataset = small_rnn(replicas=2 if model == "rnn_x2" else 1), lists
    seed = 3
    start = graph.init_params(seed, np.float64)

    interp = Interpreter(graph, params=start, dtype=np.float64)
    train_reference(interp, dataset, epochs=2, seed=seed)
    expected = interp.params()

    result = train(
        graph, dataset, workers=workers, mode="sync", epochs=2, seed=seed, dtype="float64", params=start,
    )  # fmt: skip
    assert_params_close(result.params, expected, rtol=1e-12)
    # and training moved them: the comparison is not trivially between two copies of the start
    moved = max(float(np.max(np.abs(expected[n]["W"] - start[n]["W"]))) for n in expected if "W" in expected[n])
    assert moved > 1e-3
    if model.startswith("rnn_x"):
        # the replicas were averaged at the last epoch's end
        for k in ("W", "b"):
            np.testing.assert_array_equal(result.params["step0"][k], result.params["step1"][k])


# ------------------------------------------------------------------ amp, one key, muf 1 == plain SGD


def torch_plain_sgd(start, dataset, epochs: int, seed: int, lr: float):
    """Plain SGD on the MLP with torch autograd, keys in the controller's documented order (each epoch
    ``np.random.default_rng(seed).shuffle(np.arange(n))`` from one generator)."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    tensors = {
        name: {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in p.items()}
        for name, p in start.items()
    }
    rng = np.random.default_rng(seed)
    order_seen = []
    for _ in range(epochs):
        order = np.arange(len(dataset.train))
        rng.shuffle(order)
        for i in order.tolist():
            order_seen.append(i)
            batch = dataset.train[i]
            h = torch.tensor(batch.inputs["x"], dtype=torch.float64)
            for j, name in enumerate(MLP_LINEARS):
                h = h @ tensors[name]["W"] + tensors[name]["b"]
                if j < len(MLP_LINEARS) - 1:
                    h = torch.relu(h)
            loss = F.cross_entropy(h, torch.tensor(batch.inputs["target"], dtype=torch.long))
            loss.backward()
            with torch.no_grad():
                for p in tensors.values():
                    for t in p.values():
                        t -= lr * t.grad
                        t.grad = None
    params = {name: {k: t.detach().numpy().copy() for k, t in p.items()} for name, p in tensors.items()}
    return params, order_seen


def test_amp_one_key_update_every_gradient_is_plain_sgd(digits):
    graph = small_mlp()
    seed, epochs, lr = 7, 2, 0.1
    start = graph.init_params(seed, np.float64)
    expected, order = torch_plain_sgd(start, digits, epochs, seed, lr)

    result, infos = run_with_keys(
        graph, digits, workers=2, mode="amp", max_active_keys=1, min_update_frequency=1, epochs=epochs,
        seed=seed, dtype="float64", params=start, optimizer={"name": "sgd", "lr": lr},
    )  # fmt: skip
    # the keys ran in the replicated order (validation keys after each epoch's training keys)
    index = {id(b): i for i, b in enumerate(digits.train)}
    trained = [index[id(info.batch)] for info in infos if info.train]
    assert trained == order
    assert_params_close(result.params, expected, rtol=1e-9)


# ------------------------------------------------------------------ staleness


def bwd_rows_at_parameterized(result) -> int:
    ev = result.trace.events()
    names = result.trace.node_names
    parameterized = {i for i, n in enumerate(names) if n.startswith(("linear", "step", "embed", "out"))}
    rows = zip(ev["node"].tolist(), ev["phase"].tolist(), ev["messages"].tolist(), strict=True)
    return sum(m for n, p, m in rows if p == BWD and n in parameterized)


@pytest.mark.parametrize(("mode", "keys"), [("sync", 1), ("pipeline", 4), ("pipeline", 7)])
def test_staleness_is_zero_in_sync_and_pipeline(digits, lists, mode, keys):
    for graph, dataset in ((small_mlp(), digits), (small_rnn(), lists)):
        result = train(graph, dataset, workers=2, mode=mode, max_active_keys=keys, epochs=2, seed=1)
        st = result.trace.staleness()
        assert len(st["value"]) > 0
        assert np.all(st["value"] == 0), f"{mode}: staleness {np.unique(st['value'])}"
        summary = result.staleness()
        assert summary["max"] == 0 and summary["mean"] == 0
        assert summary["count"] == len(st["value"]) == bwd_rows_at_parameterized(result)


def test_staleness_is_positive_under_amp_with_several_keys(digits):
    result = train(small_mlp(), digits, workers=2, mode="amp", max_active_keys=4, epochs=2, seed=1)
    st = result.trace.staleness()
    assert result.staleness()["max"] > 0
    assert np.all(st["value"] >= 0)
    assert result.staleness()["count"] == len(st["value"]) == bwd_rows_at_parameterized(result)
    # one staleness row per (parameterized node, training key): the MLP's Linears see one gradient per key
    names = result.trace.node_names
    per = Counter((names[n], k) for n, k in zip(st["node"].tolist(), st["key"].tolist(), strict=True))
    assert set(per.values()) == {1}
    assert {n for n, _ in per} == set(MLP_LINEARS)
    assert len(per) == 4 * 2 * len(digits.train)


def test_staleness_counts_match_backward_messages_rnn_amp(lists):
    result = train(small_rnn(replicas=2), lists, workers=3, mode="amp", max_active_keys=4, epochs=1, seed=2)
    assert result.staleness()["count"] == bwd_rows_at_parameterized(result) > 0


# ------------------------------------------------------------------ replica averaging


@pytest.mark.parametrize("replicas", [2, 3])
def test_session_average_replicas_is_exact_mean(lists, replicas):
    graph = small_rnn(replicas=replicas)
    session = Session(graph, lists, RunConfig(workers=2, dtype="float64"), make_optimizer("sgd"))
    group = [session.plan.index[f"step{i}"] for i in range(replicas)]
    assert session.plan.replica_groups == (tuple(group),)
    rng = np.random.default_rng(0)
    for i in group:
        for p in session.contexts[i].params.values():
            p[...] = rng.standard_normal(p.shape)
    before = {i: {k: v.copy() for k, v in session.contexts[i].params.items()} for i in group}
    held = {i: {k: v for k, v in session.contexts[i].params.items()} for i in group}
    others = {k: v.copy() for k, v in session.contexts[session.plan.index["out"]].params.items()}

    session.average_replicas()

    for k in ("W", "b"):
        mean = sum(before[i][k] for i in group) / replicas
        first = session.contexts[group[0]].params[k]
        np.testing.assert_allclose(first, mean, rtol=1e-15, atol=0)
        for i in group:
            np.testing.assert_array_equal(session.contexts[i].params[k], first)  # bitwise identical
            assert session.contexts[i].params[k] is held[i][k]  # updated in place
    for k, v in others.items():  # non-replicated nodes untouched
        np.testing.assert_array_equal(session.contexts[session.plan.index["out"]].params[k], v)


def test_replica_averaging_through_a_run(lists, monkeypatch):
    """In amp mode the replicas drift apart during an epoch; before the epoch's validation keys they become
    bitwise equal, holding the mean of what they held just before, and the epoch's end leaves them so."""
    calls = []
    original = Session.average_replicas

    def spy(self):
        group = [self.plan.index["step0"], self.plan.index["step1"]]
        before = [{k: v.copy() for k, v in self.contexts[i].params.items()} for i in group]
        original(self)
        after = [{k: v.copy() for k, v in self.contexts[i].params.items()} for i in group]
        calls.append((before, after))

    monkeypatch.setattr(Session, "average_replicas", spy)
    result = train(small_rnn(replicas=2), lists, workers=2, mode="amp", max_active_keys=3, epochs=3, seed=4,
                   dtype="float64")  # fmt: skip
    assert len(calls) == 6  # per epoch: before validation, then the epoch's end
    for before, after in calls[0::2]:
        for k in ("W", "b"):
            assert not np.array_equal(before[0][k], before[1][k]), "replicas did not drift apart: nothing tested"
            np.testing.assert_array_equal(after[0][k], after[1][k])
            np.testing.assert_allclose(after[0][k], (before[0][k] + before[1][k]) / 2, rtol=1e-15, atol=0)
    for before, after in calls[1::2]:
        for k in ("W", "b"):  # validation trained nothing: the epoch's end finds them equal and leaves them
            np.testing.assert_array_equal(before[0][k], before[1][k])
            np.testing.assert_array_equal(after[0][k], before[0][k])
    last = calls[-1][1]
    for k in ("W", "b"):
        np.testing.assert_array_equal(result.params["step0"][k], last[0][k])
        np.testing.assert_array_equal(result.params["step1"][k], last[1][k])


# ------------------------------------------------------------------ errors inside nodes


def mlp_with_cond(predicate: str):
    """The MLP with a Cond on the logits whose two branches merge again in a Phi."""
    from amp_notebook.ir.graph import Graph

    g = Graph("mlp_cond")
    h = g.input("x", width=64)
    h = g.relu(g.linear(h, 16, name="linear1"))
    yes, no = g.cond(g.linear(h, 10, name="linear2"), predicate, name="check")
    g.softmax_cross_entropy(g.phi(yes, no, name="merge"), g.input("target", dtype="int"), name="loss")
    return g


@pytest.mark.parametrize(
    ("predicate", "cause"),
    [("key < missing_field", "missing_field"), ("1 // (key - key) > 0", "ZeroDivisionError")],
)
@pytest.mark.parametrize("mode", ["amp", "sync", "pipeline"])
def test_failing_cond_predicate_surfaces_as_node_error(digits, predicate, cause, mode):
    graph = mlp_with_cond(predicate)
    graph.validate(require_loss=True)  # the problem only shows when a message arrives
    with pytest.raises(NodeError) as info:
        train(graph, digits, workers=2, mode=mode, max_active_keys=4, epochs=2, seed=0)
    err = info.value
    assert err.node == "check" and err.kind == "Cond" and err.direction == "fwd" and err.port == "in"
    assert "key" in err.state
    text = str(err)
    assert "'check'" in text and f"state {err.state}" in text and cause in text
    assert worker_threads_alive() == []


def test_failing_predicate_mid_loop_names_the_state(lists):
    """An RNN whose loop Cond fails at t == 3: the error names the node and a state with t=3, while other
    keys are in flight on other workers; all worker threads are gone afterwards."""
    graph = small_rnn()
    graph.nodes["more"].op = Cond("1 // (t - 3) > -100 and t < length")
    with pytest.raises(NodeError) as info:
        train(graph, lists, workers=3, mode="amp", max_active_keys=4, epochs=1, seed=0)
    err = info.value
    assert err.node == "more" and err.state["t"] == 3
    assert "'more'" in str(err) and "t=3" in str(err) and "ZeroDivisionError" in str(err)
    assert worker_threads_alive() == []


# ------------------------------------------------------------------ flushes


@pytest.mark.parametrize(("mode", "keys"), [("pipeline", 4), ("pipeline", 3), ("pipeline", 15), ("sync", 1)])
def test_update_rows_equal_flushes(digits, mode, keys):
    epochs = 2
    result, _infos = run_with_keys(
        small_mlp(), digits, workers=2, mode=mode, max_active_keys=keys, epochs=epochs, seed=0
    )
    n_train = len(digits.train)
    flushes = epochs * (n_train if mode == "sync" else math.ceil(n_train / keys))
    counts = trace_counts(result)
    for name in MLP_LINEARS:
        updates = sum(c for (n, p, _), c in counts.items() if n == name and p == UPDATE)
        assert updates == flushes, f"{name}: {updates} update rows, {flushes} flushes"
    # no other node updates
    assert {n for (n, p, _) in counts if p == UPDATE} == set(MLP_LINEARS)
    # flushes carry negative ids, distinct from every key id
    assert all(k < 0 for (_, p, k) in counts if p == UPDATE)
    assert len({k for (_, p, k) in counts if p == UPDATE}) == flushes


@pytest.mark.parametrize("muf", [1, 2, 4])
def test_amp_updates_every_min_update_frequency_gradients(digits, muf):
    result = train(small_mlp(), digits, workers=2, mode="amp", max_active_keys=3, min_update_frequency=muf,
                   epochs=2, seed=0)  # fmt: skip
    counts = trace_counts(result)
    for name in MLP_LINEARS:
        bwd = sum(c for (n, p, _), c in counts.items() if n == name and p == BWD)
        updates = sum(c for (n, p, _), c in counts.items() if n == name and p == UPDATE)
        assert bwd == 2 * len(digits.train)
        assert updates == bwd // muf


# ------------------------------------------------------------------ credit counting and trace rows


@pytest.mark.parametrize(
    ("mode", "keys", "workers"), [("amp", 4, 2), ("amp", 8, 3), ("pipeline", 5, 2), ("sync", 1, 2)]
)
def test_every_key_completes_with_each_message_traced_once_mlp(digits, mode, keys, workers):
    epochs = 2
    result, infos = run_with_keys(small_mlp(), digits, workers=workers, mode=mode, max_active_keys=keys,
                                  epochs=epochs, seed=5)  # fmt: skip
    per_epoch = len(digits.train) + len(digits.val)
    assert len(infos) == epochs * per_epoch
    assert len({i.key for i in infos}) == len(infos)
    assert sum(i.train for i in infos) == epochs * len(digits.train)

    counts = trace_counts(result)
    for info in infos:
        k = info.key
        for name in MLP_LINEARS:
            assert counts[(name, FWD, k)] == 1
            assert counts[(name, BWD, k)] == (1 if info.train else 0)
        for name in ("relu1", "relu2", "relu3", "x", "target"):
            assert counts[(name, FWD, k)] == 1
        assert counts[("loss", FWD, k)] == 2  # logits and target
    # totals: 11 forward messages per key, 7 backward per training key, nothing else
    keys = {i.key for i in infos}
    n_train = sum(i.train for i in infos)
    assert {k for (_, phase, k) in counts if phase != UPDATE} == keys
    assert messages_in_phase(result, FWD) == 11 * len(infos)
    assert messages_in_phase(result, BWD) == 7 * n_train


@pytest.mark.parametrize(
    ("replicas", "mode", "keys"), [(1, "amp", 4), (2, "amp", 6), (1, "sync", 1), (2, "pipeline", 3)]
)
def test_every_key_completes_with_each_message_traced_once_rnn(lists, replicas, mode, keys):
    result, infos = run_with_keys(small_rnn(replicas), lists, workers=3, mode=mode, max_active_keys=keys,
                                  epochs=1, seed=6)  # fmt: skip
    assert len(infos) == len(lists.train) + len(lists.val)
    counts = trace_counts(result)
    fwd_total = bwd_total = 0
    for info in infos:
        k, n = info.key, info.batch.fields["length"]
        assert info.batch.inputs["tokens"].shape[0] == n
        for name in ("embed", "loop", "tick", "more"):
            assert counts[(name, FWD, k)] == n
            assert counts[(name, BWD, k)] == (n if info.train else 0)
        # every step of a key runs through one replica: step{key % replicas}
        steps = ["step"] if replicas == 1 else [f"step{i}" for i in range(replicas)]
        used = [s for s in steps if counts[(s, FWD, k)]]
        step = "step" if replicas == 1 else f"step{k % replicas}"
        assert used == [step], f"key {k} ran through replicas {used}"
        assert counts[(step, FWD, k)] == n
        assert counts[(step, BWD, k)] == (n if info.train else 0)
        assert counts[("cat", FWD, k)] == 2 * n
        assert counts[("out", FWD, k)] == 1 and counts[("out", BWD, k)] == int(info.train)
        assert counts[("loss", FWD, k)] == 2
        per_step = 8 + (2 if replicas > 1 else 0)  # + replica_route and replica_merge
        fwd_total += per_step * n + 8
        bwd_total += ((7 + (2 if replicas > 1 else 0)) * n + 1) if info.train else 0
    assert messages_in_phase(result, FWD) == fwd_total
    assert messages_in_phase(result, BWD) == bwd_total


# ------------------------------------------------------------------ history


@pytest.mark.parametrize("mode", ["amp", "sync", "pipeline"])
def test_history_has_one_entry_per_epoch(digits, mode):
    epochs = 3
    result = train(small_mlp(), digits, workers=2, mode=mode, max_active_keys=4, epochs=epochs, seed=0)
    assert len(result.history) == epochs
    assert [e.epoch for e in result.history] == list(range(epochs))
    assert len(result.val_accuracy) == epochs
    assert all(a is not None and 0.0 <= a <= 1.0 for a in result.val_accuracy)
    assert result.train_instances == epochs * digits.train_instances
    for e in result.history:
        assert e.train_instances == digits.train_instances
        assert e.val_instances == digits.val_instances
        assert np.isfinite(e.train_loss) and np.isfinite(e.val_loss)
    ends = [e.end_s for e in result.history]
    assert ends == sorted(ends) and ends[-1] <= result.wall_s
    summary = result.summary()
    assert summary["val_accuracy"] == result.val_accuracy and summary["epochs"] == epochs
    assert summary["train_instances"] == epochs * digits.train_instances


def test_history_without_validation(digits):
    result = train(small_mlp(), digits, workers=2, epochs=2, validate=False, seed=0)
    assert result.val_accuracy == [None, None]
    assert all(e.val_instances == 0 for e in result.history)
    assert result.train_instances == 2 * digits.train_instances


# ------------------------------------------------------------------ data mismatches


@pytest.fixture
def no_threads(monkeypatch):
    """Fail the test if a backend is even constructed (so no worker thread can have started)."""

    def refuse(self, session):
        raise AssertionError("the threaded backend was constructed although the data did not fit")

    monkeypatch.setattr(threads_backend.ThreadedBackend, "__init__", refuse)


def test_missing_payload_raises_data_error_before_threads(digits, no_threads):
    strip = [Batch(inputs={"x": b.inputs["x"]}, size=b.size) for b in digits.train]
    dataset = Dataset("digits_without_target", strip, digits.val, num_classes=10)
    with pytest.raises(DataError, match="target"):
        train(small_mlp(), dataset, workers=2, epochs=1)
    assert worker_threads_alive() == []


def test_missing_payload_in_validation_keys(digits, no_threads):
    val = [Batch(inputs={"target": b.inputs["target"]}, size=b.size) for b in digits.val]
    dataset = Dataset("digits_bad_val", digits.train, val, num_classes=10)
    with pytest.raises(DataError, match=r"'x'"):
        train(small_mlp(), dataset, workers=2, epochs=1)


def test_missing_payload_in_a_middle_key_raises_data_error_before_threads(digits, no_threads):
    """Not only the first and last keys are checked: one key in the middle without its target fails early,
    naming the key and the input (rather than a KeyError from the driver once threads run)."""
    train_keys = list(digits.train)
    b = train_keys[5]
    train_keys[5] = Batch(inputs={"x": b.inputs["x"]}, size=b.size)
    dataset = Dataset("digits_one_bad_key", train_keys, digits.val, num_classes=10)
    with pytest.raises(DataError, match=r"train\[5\].*'target'"):
        train(small_mlp(), dataset, workers=2, epochs=1)
    assert worker_threads_alive() == []


def test_input_width_mismatch_raises_data_error_before_threads(digits, no_threads):
    with pytest.raises(DataError, match=r"'x'.*width 32"):
        train(models.mlp(input_width=32, hidden=16), digits, workers=2, epochs=1)
    assert worker_threads_alive() == []


def test_wrong_param_shapes_raise_data_error(digits, no_threads):
    params = models.mlp(input_width=64, hidden=16).init_params(0)
    with pytest.raises(DataError, match="linear1"):
        train(small_mlp(), digits, workers=2, epochs=1, params=params)
