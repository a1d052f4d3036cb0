"""The zoo written as Python (``models.as_python``) and compiled equals the hand-built zoo.

Same weights (the compiled graphs name every parameterized node as the zoo does), float64: the reference
interpreter gives the same loss and the same gradients (relative error <= 1e-6; in practice exact), and
training in sync mode on the threaded runtime gives the same accuracy and the same parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pytest

import amp_notebook as amp
from amp_notebook import models
from amp_notebook.data.batch import Dataset
from amp_notebook.data.graphs import BABI15_FEATURE_WIDTH, BABI15_TYPES, babi15_graphs, ggsnn_dataset
from amp_notebook.data.sentiment import sentiment_tree_dataset
from amp_notebook.ir.graph import Graph
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.models import as_python
from tests.conftest import digits_dataset, lists_dataset

RTOL = 1e-6
Params = dict[str, dict[str, np.ndarray]]


@dataclass
class Case:
    zoo: Callable[[], Graph]
    compiled: Callable[[], Graph]
    data: Callable[[], Dataset]
    keys: int  # training keys compared one by one


@cache
def trees() -> Dataset:
    return sentiment_tree_dataset(n_train=40, n_val=12, seed=1)


@cache
def babi() -> Dataset:
    graphs = babi15_graphs(36, seed=2, inflate_to=8, task="classification")
    return ggsnn_dataset(
        graphs[:24], 5, "classification", 3, val_instances=graphs[24:], num_classes=len(BABI15_TYPES), graphs_per_key=3
    )


CASES = {
    "mlp": Case(
        lambda: models.mlp(input_width=64, hidden=32),
        lambda: amp.compile(as_python.mlp, hidden=32),
        lambda: digits_dataset(),
        3,
    ),
    "rnn": Case(
        lambda: models.rnn(hidden=16, embedding_dim=8),
        lambda: amp.compile(as_python.rnn, hidden=16, embedding_dim=8),
        lambda: lists_dataset(),
        4,
    ),
    "tree_lstm": Case(
        lambda: models.tree_lstm(trees().meta["vocab_size"], embedding_dim=8, hidden=6),
        lambda: amp.compile(as_python.tree_lstm, vocab_size=trees().meta["vocab_size"], embedding_dim=8, hidden=6),
        trees,
        4,
    ),
    "ggsnn": Case(
        lambda: models.ggsnn(5, BABI15_FEATURE_WIDTH, 6, 3, "classification", len(BABI15_TYPES)),
        lambda: amp.compile(
            as_python.ggsnn,
            feature_width=BABI15_FEATURE_WIDTH,
            edge_types=5,
            hidden=6,
            steps=3,
            classes=len(BABI15_TYPES),
        ),
        babi,
        3,
    ),
}


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    scale = max(float(np.max(np.abs(expected))), 1e-300)
    return float(np.max(np.abs(np.asarray(actual) - np.asarray(expected)))) / scale


def assert_params_close(actual: Params, expected: Params, what: str) -> None:
    assert set(actual) == set(expected), f"{what}: parameter nodes differ: {sorted(actual)} vs {sorted(expected)}"
    for node, group in expected.items():
        assert set(actual[node]) == set(group)
        for name, value in group.items():
            err = relative_error(actual[node][name], value)
            assert err <= RTOL, f"{what} {node}/{name}: relative error {err:.3g} > {RTOL}"


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_zoo_model_has_the_zoo_weights(name: str) -> None:
    case = CASES[name]
    zoo, compiled = case.zoo(), case.compiled()
    assert sorted(compiled.parameterized()) == sorted(zoo.parameterized())
    for node in zoo.parameterized():
        assert compiled.nodes[node].op == zoo.nodes[node].op, node
        assert compiled.nodes[node].min_update_frequency == zoo.nodes[node].min_update_frequency, node
    assert compiled.compiled_from is not None and zoo.compiled_from is None


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_zoo_model_gives_the_zoo_loss_and_gradients(name: str) -> None:
    case = CASES[name]
    zoo, compiled = case.zoo(), case.compiled()
    params = zoo.init_params(seed=7, dtype=np.float64)
    data = case.data()
    for key, batch in enumerate(data.train[: case.keys]):
        ours, theirs = Interpreter(compiled, params=params), Interpreter(zoo, params=params)
        grads, expected = ours.gradients(batch, key=key), theirs.gradients(batch, key=key)
        losses = sorted(r["loss"] for r in ours.reports)
        expected_losses = sorted(r["loss"] for r in theirs.reports)
        assert len(losses) == len(expected_losses) >= 1
        for got, want in zip(losses, expected_losses, strict=True):
            assert abs(got - want) <= RTOL * abs(want), f"{name} key {key}: loss {got} vs {want}"
        assert_params_close(grads, expected, f"{name} key {key} gradient")


def train_sync(graph: Graph, data: Dataset, params: Params, epochs: int) -> Any:
    start = {n: {k: v.copy() for k, v in p.items()} for n, p in params.items()}
    return amp.train(
        graph,
        data,
        workers=2,
        mode="sync",
        epochs=epochs,
        seed=3,
        dtype="float64",
        params=start,
        optimizer={"name": "adam", "lr": 0.01},
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_compiled_zoo_model_trains_to_the_zoo_accuracy(name: str) -> None:
    case = CASES[name]
    zoo, compiled = case.zoo(), case.compiled()
    params = zoo.init_params(seed=11, dtype=np.float64)
    data = case.data()
    ours, theirs = train_sync(compiled, data, params, 2), train_sync(zoo, data, params, 2)
    assert ours.val_accuracy == pytest.approx(theirs.val_accuracy, abs=1e-9), (ours.val_accuracy, theirs.val_accuracy)
    train_loss = [e.train_loss for e in theirs.history]
    assert [e.train_loss for e in ours.history] == pytest.approx(train_loss, rel=RTOL)
    assert train_loss[-1] < train_loss[0], f"{name}: the budget is too small to show learning: {train_loss}"
    assert_params_close(ours.params, theirs.params, f"{name} after training")
