"""Forest keys (several trees per key, run level by level): the layout of ``data.forest``, and
``models.tree_lstm_forest`` against torch autograd (float64), the interpreter and a short training run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amp_notebook.bench import torch_baselines as tb
from amp_notebook.data.batch import Batch
from amp_notebook.data.forest import forest_batch, forest_dataset
from amp_notebook.data.sentiment import sentiment_tree_dataset
from amp_notebook.data.trees import Tree, Vocab, tree_batch
from amp_notebook.errors import SettingError
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.models import tree_lstm_forest
from amp_notebook.models.tree_lstm import root_accuracy
from amp_notebook.runtime.train import TrainResult, train
from tests.models.test_models_dynamic import train_both

H, EMB = 4, 3


@pytest.fixture(scope="module")
def trees() -> tuple[list[Batch], int]:
    data = sentiment_tree_dataset(n_train=7, n_val=0, seed=4)
    vocab = Vocab(tuple(data.meta["vocab"]))  # type: ignore[arg-type]
    lone_leaf = tree_batch(Tree.leaf(3, "good"), vocab)  # a tree without branches, in a bucket with others
    return [*data.train[:3], lone_leaf, *data.train[3:]], len(vocab)


def test_forest_rows_put_children_before_parents_and_keep_labels(trees: tuple[list[Batch], int]) -> None:
    batch, _ = trees
    forest = forest_batch(batch)
    n_leaves = sum(int(t.inputs["is_leaf"].sum()) for t in batch)
    assert forest.size == len(batch)
    assert forest.inputs["leaf_rows"].tolist() == list(range(n_leaves))
    assert forest.inputs["leaf_words"].tolist() == np.concatenate([t.inputs["leaf_words"] for t in batch]).tolist()
    left, right, rows = forest.inputs["left"], forest.inputs["right"], forest.inputs["rows"]
    assert (left[:, 0] == rows[:, 0]).all() and (right[:, 0] == rows[:, 0]).all()
    assert sorted(rows[:, 1].tolist()) == list(range(n_leaves, forest.fields["n_nodes"]))
    level_of = dict(zip(rows[:, 1].tolist(), rows[:, 0].tolist(), strict=True))
    for level, child in np.concatenate([left, right]).tolist():  # a child is a leaf or of a lower level
        assert child < n_leaves or level_of[child] < level
    assert forest.fields["levels"] == int(rows[:, 0].max()) + 1
    # every tree's labels appear, the roots' included
    assert sorted(forest.inputs["labels"].tolist()) == sorted(np.concatenate([t.inputs["labels"] for t in batch]))
    roots = forest.inputs["root_rows"].tolist()
    assert [forest.inputs["labels"][r] for r in roots] == [int(t.inputs["labels"][-1]) for t in batch]
    assert roots[3] < n_leaves  # the lone leaf is its own root


def test_forest_gradients_equal_torch_autograd(trees: tuple[list[Batch], int]) -> None:
    batch, vocab_size = trees
    graph = tree_lstm_forest(vocab_size, EMB, H)
    graph.validate(require_loss=True)
    interp = Interpreter(graph, seed=2, dtype=np.float64)
    forest = forest_batch(batch)
    grads = interp.gradients(forest, key=0)
    for ctx in interp.contexts:
        assert not ctx.cache and not ctx.joins
    (report,) = interp.run_key(forest, key=1, train=False)
    model = tb.TorchTreeLSTM(vocab_size, EMB, H, 5, dtype=torch.float64)
    model.load(interp.params())
    node_losses = torch.cat([tb.eager_tree_losses(model, t)[0] for t in batch])
    loss = node_losses.mean()  # a forest key's loss: the mean over all its nodes
    assert report["loss"] == pytest.approx(loss.item(), rel=1e-12)
    loss.backward()
    expected = {"embed": {"E": model.embed}, **{
        name: {"W": getattr(model, f"{role}_W"), "b": getattr(model, f"{role}_b")}
        for role, name in (("leaf", "leaf_gates"), ("branch", "branch_gates"), ("classify", "classify"))
    }}  # fmt: skip
    assert set(grads) == set(expected)
    for node, group in expected.items():
        for name, param in group.items():
            assert param.grad is not None
            np.testing.assert_allclose(grads[node][name], param.grad.numpy(), rtol=1e-6, atol=1e-12, err_msg=node)


def test_forest_of_lone_leaves_has_no_levels(trees: tuple[list[Batch], int]) -> None:
    batch, vocab_size = trees
    forest = forest_batch([batch[3], batch[3]])
    assert forest.fields["levels"] == 0 and forest.inputs["rows"].shape == (0, 2)
    interp = Interpreter(tree_lstm_forest(vocab_size, EMB, H), seed=0, dtype=np.float64)
    interp.gradients(forest, key=0)
    (report,) = interp.run_key(forest, key=1, train=False)
    assert report["n"] == 2


def test_forest_sync_runtime_equals_the_interpreter() -> None:
    ds = forest_dataset(sentiment_tree_dataset(n_train=9, n_val=4, seed=1), trees_per_key=3)
    assert [b.size for b in ds.train] == [3, 3, 3] and ds.meta["trees_per_key"] == 3
    train_both(tree_lstm_forest(int(ds.meta["vocab_size"]), EMB, H), ds)  # type: ignore[call-overload]


def test_forest_dataset_rejects_a_bad_bucket_size() -> None:
    with pytest.raises(SettingError, match="trees_per_key: expected an integer >= 1") as info:
        forest_dataset(sentiment_tree_dataset(n_train=2, n_val=0, seed=0), trees_per_key=0)
    assert isinstance(info.value, ValueError) and info.value.setting == "trees_per_key"


# Majority class (neutral) is ~0.48 of the validation nodes; two epochs of 400 trees in forests of 10
# (~1 s) reach about 0.85 node accuracy, so the bar leaves a margin for scheduling differences.
FOREST_NODE_ACCURACY_BAR = 0.75


@pytest.mark.slow
def test_forest_tree_lstm_learns_synthetic_sentiment_in_a_short_run() -> None:
    trees = sentiment_tree_dataset(n_train=400, n_val=100, seed=0)
    ds = forest_dataset(trees, trees_per_key=10)
    g = tree_lstm_forest(int(ds.meta["vocab_size"]), 16, 16)  # type: ignore[call-overload]
    result = train(g, ds, workers=2, mode="amp", max_active_keys=3, optimizer={"name": "adam", "lr": 0.01}, epochs=2)
    assert isinstance(result, TrainResult)
    accuracy = result.val_accuracy[-1]
    assert accuracy is not None and accuracy >= FOREST_NODE_ACCURACY_BAR
    root = root_accuracy(result.params, trees.val)  # the per-tree numpy forward reads the same weights
    assert root is not None and 0.0 <= root <= 1.0
