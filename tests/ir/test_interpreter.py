"""The reference interpreter: its invariant checks, and whole-graph gradients against finite differences."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.data import Batch
from amp_notebook.ir.graph import Graph, Ref
from amp_notebook.ir.interpret import Interpreter, InvariantError
from amp_notebook.ir.message import State
from amp_notebook.ir.ops import Identity, NodeContext
from amp_notebook.runtime.reference import train_reference
from tests.conftest import digits_dataset, lists_dataset

EPS = 1e-6


def assert_quiescent(interp: Interpreter) -> None:
    for ctx in interp.contexts:
        assert not ctx.cache, f"{ctx.name} still caches {list(ctx.cache)}"
        assert not ctx.joins, f"{ctx.name} still joins {list(ctx.joins)}"


@pytest.fixture(scope="module")
def digits() -> Any:
    return digits_dataset(batch_size=25)


@pytest.fixture(scope="module")
def lists() -> Any:
    return lists_dataset(n_train=48, n_val=12, bucket_size=4, max_len=6, seed=3)


# ------------------------------------------------------------------------------------- running
def test_mlp_runs_training_and_validation_keys(digits: Any) -> None:
    interp = Interpreter(models.mlp(hidden=16))
    for key, batch in enumerate(digits.train[:4]):
        reports = interp.run_key(batch, key=key, train=True)
        assert len(reports) == 1
        assert reports[0]["key"] == key and reports[0]["n"] == batch.size
        assert np.isfinite(reports[0]["loss"]) and 0 <= reports[0]["correct"] <= batch.size
        assert_quiescent(interp)
    grads = {c.name: {k: v.copy() for k, v in c.grads.items()} for c in interp.contexts if c.grads}
    assert set(grads) == {"linear1", "linear2", "linear3", "linear4"}
    assert all(np.any(g != 0) for group in grads.values() for g in group.values())
    for key, batch in enumerate(digits.val[:2], start=100):
        (report,) = interp.run_key(batch, key=key, train=False)
        assert report["key"] == key
        assert_quiescent(interp)
    # validation keys send no backward, so the gradients did not move
    for c in interp.contexts:
        for k, v in c.grads.items():
            np.testing.assert_array_equal(v, grads[c.name][k])


@pytest.mark.parametrize("replicas", [1, 2])
def test_rnn_runs_every_bucket(lists: Any, replicas: int) -> None:
    interp = Interpreter(models.rnn(hidden=6, embedding_dim=4, replicas=replicas))
    lengths = set()
    for key, batch in enumerate(lists.train):
        (report,) = interp.run_key(batch, key=key, train=True)
        assert report["n"] == batch.size and np.isfinite(report["loss"])
        lengths.add(batch.fields["length"])
        assert_quiescent(interp)
    assert len(lengths) > 2, "the buckets should cover several sequence lengths"
    for key, batch in enumerate(lists.val, start=1000):
        interp.run_key(batch, key=key, train=False)
        assert_quiescent(interp)
    if replicas == 2:
        # keys are routed round-robin: both copies of the step received gradients
        by_name = {c.name: c for c in interp.contexts}
        assert by_name["step0"].n_grads > 0 and by_name["step1"].n_grads > 0
        # key k runs through replica k % 2 (Graph.replicate routes on key % replicas)
        for i in (0, 1):
            assert by_name[f"step{i}"].grad_keys == {k for k in range(len(lists.train)) if k % 2 == i}


def test_rnn_step_gets_one_gradient_message_per_time_step(lists: Any) -> None:
    interp = Interpreter(models.rnn(hidden=6, embedding_dim=4))
    batch = lists.train[0]
    interp.gradients(batch, key=0)
    by_name = {c.name: c for c in interp.contexts}
    assert by_name["step"].n_grads == batch.fields["length"]
    assert by_name["embed"].n_grads == batch.fields["length"]
    assert by_name["out"].n_grads == 1


def test_train_runs_epochs_and_leaves_nothing_behind(digits: Any) -> None:
    interp = Interpreter(models.mlp(hidden=16), optimizer={"name": "sgd", "lr": 0.5})
    epochs = train_reference(interp, digits, epochs=2, seed=1)
    assert [e["epoch"] for e in epochs] == [0, 1]
    for e in epochs:
        train = [r for r in e["reports"] if r["train"]]
        val = [r for r in e["reports"] if not r["train"]]
        assert sum(r["n"] for r in train) == digits.train_instances
        assert sum(r["n"] for r in val) == digits.val_instances
    assert_quiescent(interp)


# ------------------------------------------------------------------------------ invariant checks
def _regression_graph(middle: Any) -> Graph:
    """x (width 3) -> middle(g, x) -> Linear 'fc' -> MSE against y (joined on the key alone)."""
    g = Graph("g")
    x = g.input("x", width=3)
    h = middle(g, x)
    g.mse(g.linear(h, 2, name="fc"), g.input("y", width=2), name="loss", match_on=("key",))
    return g


def _regression_batch(**fields: int) -> Batch:
    rng = np.random.default_rng(0)
    return Batch({"x": rng.standard_normal((4, 3)), "y": rng.standard_normal((4, 2))}, size=4, fields=fields)


def test_non_invertible_isu_is_caught_and_named() -> None:
    g = _regression_graph(lambda g, x: g.isu(x, forward={"t": "t + 1"}, backward={"t": "t"}, name="bad_tick"))
    interp = Interpreter(g)
    with pytest.raises(InvariantError) as info:
        interp.run_key(_regression_batch(t=0), key=0)
    message = str(info.value)
    assert "Isu 'bad_tick' is not invertible" in message
    assert "t=1" in message and "t=0" in message


def test_invertible_isu_passes() -> None:
    g = _regression_graph(lambda g, x: g.isu(x, forward={"t": "t * 2 + 1"}, backward={"t": "(t - 1) // 2"}))
    interp = Interpreter(g)
    interp.run_key(_regression_batch(t=5), key=0)
    assert_quiescent(interp)


class _Leaky(Identity):
    """Caches on forward and forgets to pop on backward."""

    def forward(self, ctx: NodeContext, port: str, x: Any, state: State) -> Any:
        if ctx.train:
            ctx.cache[state] = x
        return [("out", x, state)]


class _Echo(Identity):
    """Sends every backward message twice."""

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Any:
        return [("in", g, state), ("in", g, state)]


class _Swallow(Identity):
    """Never sends a backward message, although its input wants one."""

    def backward(self, ctx: NodeContext, port: str, g: Any, state: State) -> Any:
        return []


def _with_custom(op: Identity) -> Graph:
    def middle(g: Graph, x: Ref) -> Ref:
        h = g.linear(x, 3, name="first")
        return Ref(g.add_node(op, [h], name="custom").name)

    return _regression_graph(middle)


def test_leftover_cache_is_caught_and_named() -> None:
    interp = Interpreter(_with_custom(_Leaky()))
    with pytest.raises(InvariantError, match="_Leaky 'custom' still holds cache/join entries after key 7"):
        interp.run_key(_regression_batch(), key=7)


def test_duplicate_backward_is_caught_and_named() -> None:
    interp = Interpreter(_with_custom(_Echo()))
    with pytest.raises(InvariantError, match="Linear 'first' received a backward message at output 'out'"):
        interp.run_key(_regression_batch(), key=0)


def test_missing_backward_is_caught_and_named() -> None:
    interp = Interpreter(_with_custom(_Swallow()))
    with pytest.raises(InvariantError, match=r"Linear 'first' sent a forward message from 'out'.*never came"):
        interp.run_key(_regression_batch(), key=0)


# ------------------------------------------------------------------ gradients of whole graphs
def _loss(interp: Interpreter, batch: Batch, key: int) -> float:
    reports = interp.run_key(batch, key=key, train=False)
    return float(sum(r["loss"] for r in reports))


def check_gradients_against_finite_differences(interp: Interpreter, batch: Batch, key: int) -> int:
    analytic = interp.gradients(batch, key=key)
    assert_quiescent(interp)
    by_name = {c.name: c for c in interp.contexts}
    checked = 0
    for node, grads in analytic.items():
        for name, grad in grads.items():
            p = by_name[node].params[name]
            numeric = np.zeros_like(p)
            for idx in np.ndindex(p.shape):
                old = p[idx]
                p[idx] = old + EPS
                up = _loss(interp, batch, key)
                p[idx] = old - EPS
                down = _loss(interp, batch, key)
                p[idx] = old
                numeric[idx] = (up - down) / (2 * EPS)
            np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-9, err_msg=f"{node}.{name}")
            checked += p.size
    return checked


def _bucket(lists: Any, length: int) -> Batch:
    return next(b for b in lists.train if b.fields["length"] == length and b.size == 4)


@pytest.mark.parametrize("length", [2, 5])
def test_rnn_gradients_match_finite_differences(lists: Any, length: int) -> None:
    interp = Interpreter(models.rnn(vocab_size=14, hidden=5, embedding_dim=3), seed=11, dtype=np.float64)
    batch = _bucket(lists, length)
    assert batch.inputs["tokens"].shape == (length, 4)
    checked = check_gradients_against_finite_differences(interp, batch, key=0)
    assert checked == 14 * 3 + (3 + 5) * 5 + 5 + 5 * 10 + 10


@pytest.mark.parametrize("key", [0, 1])
def test_replicated_rnn_gradients_match_finite_differences(lists: Any, key: int) -> None:
    interp = Interpreter(models.rnn(vocab_size=14, hidden=5, embedding_dim=3, replicas=2), seed=5)
    batch = _bucket(lists, 4)
    check_gradients_against_finite_differences(interp, batch, key=key)
    # only the replica the key was routed to (key % 2) holds a gradient
    grads = interp.gradients(batch, key=key)
    assert [name for name in ("step0", "step1") if np.any(grads[name]["W"])] == [f"step{key % 2}"]


def test_mlp_gradients_match_finite_differences(digits: Any) -> None:
    interp = Interpreter(models.mlp(hidden=4, layers=3), seed=2)
    batch = digits.train[0]
    small = Batch({k: v[:6] for k, v in batch.inputs.items()}, size=6)
    check_gradients_against_finite_differences(interp, small, key=0)


def test_gradients_leave_parameters_alone(lists: Any) -> None:
    interp = Interpreter(models.rnn(vocab_size=14, hidden=5, embedding_dim=3), seed=1)
    before = interp.params()
    interp.gradients(_bucket(lists, 3), key=0)
    for node, group in before.items():
        for name, value in group.items():
            np.testing.assert_array_equal(interp.params()[node][name], value)
