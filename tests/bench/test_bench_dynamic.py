"""The PyTorch baselines of the dynamic-model benchmarks compute what they claim (float64, no timings).

The eager and the level-wise batched Tree-LSTM give the same node losses, tree losses and gradients; the
dense-adjacency and the scatter GGNN give the same outputs and gradients; and each torch model, loaded with
the initial parameters of our graph, gives our reference interpreter's loss and gradients, so the
benchmarks compare one model implemented three ways.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amp_notebook.bench import torch_baselines as tb
from amp_notebook.data.batch import Batch
from amp_notebook.data.graphs import (
    BABI15_TYPES,
    GraphInstance,
    babi15_graphs,
    ggsnn_batch,
    ggsnn_bucket,
)
from amp_notebook.data.molecules import molecule_graphs
from amp_notebook.data.sentiment import sentiment_tree_dataset
from amp_notebook.data.trees import Tree, Vocab, tree_batch
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.models import ggsnn, tree_lstm

F64 = torch.float64


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in model.named_parameters():
        out[name] = torch.zeros_like(p) if p.grad is None else p.grad.clone()
    model.zero_grad()
    return out


def _assert_same_grads(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-10, atol=1e-12, msg=name)
    assert any(bool(g.abs().sum() > 0) for g in a.values())


# ------------------------------------------------------------------------------------------------- Tree-LSTM
@pytest.fixture(scope="module")
def trees() -> tuple[list[Batch], int]:
    data = sentiment_tree_dataset(n_train=12, n_val=0, seed=4)
    vocab = Vocab(tuple(data.meta["vocab"]))
    lone_leaf = tree_batch(Tree.leaf(3, "good"), vocab)  # no branch at all: the plan has no level
    return [*data.train, lone_leaf], len(vocab)


def test_level_plan_puts_children_before_parents(trees: tuple[list[Batch], int]) -> None:
    batch, _ = trees
    plan = tb.level_plan(batch)
    n_leaves = int(sum(t.inputs["is_leaf"].sum() for t in batch))
    computed = n_leaves
    for left, right in plan.levels:
        assert int(torch.max(torch.cat([left, right]))) < computed  # every child row exists already
        computed += left.numel()
    assert sorted(plan.node_rows.tolist()) == list(range(computed))
    assert plan.labels.numel() == computed == sum(t.inputs["positions"].size for t in batch)


def test_eager_and_level_batched_tree_lstm_agree(trees: tuple[list[Batch], int]) -> None:
    batch, vocab_size = trees
    model = tb.TorchTreeLSTM(vocab_size, embedding_dim=5, hidden=4, seed=1, dtype=F64)
    pairs = [tb.eager_tree_losses(model, t) for t in batch]
    eager_nodes = torch.cat([p[0] for p in pairs])
    node_tree = tb.node_tree_index(batch)
    tb.minibatch_loss(eager_nodes, node_tree, len(batch)).backward()
    eager_grads = _grads(model)

    plan = tb.level_plan(batch)
    batched_nodes, logits = tb.batched_tree_losses(model, plan)
    torch.testing.assert_close(batched_nodes, eager_nodes.detach(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(logits, torch.cat([p[1] for p in pairs]).detach(), rtol=1e-12, atol=1e-14)
    assert torch.equal(plan.node_tree, node_tree)
    tb.minibatch_loss(batched_nodes, plan.node_tree, plan.n_trees).backward()
    _assert_same_grads(_grads(model), eager_grads)


def test_minibatch_loss_is_the_mean_of_tree_means() -> None:
    losses = torch.tensor([1.0, 3.0, 10.0], dtype=F64)
    assert tb.minibatch_loss(losses, torch.tensor([0, 0, 1]), 2).item() == pytest.approx((2.0 + 10.0) / 2)


def test_torch_tree_lstm_with_our_weights_gives_our_interpreters_loss_and_gradients(
    trees: tuple[list[Batch], int],
) -> None:
    batch, vocab_size = trees
    interp = Interpreter(tree_lstm(vocab_size, embedding_dim=5, hidden=4), seed=2, dtype=np.float64)
    model = tb.TorchTreeLSTM(vocab_size, embedding_dim=5, hidden=4, dtype=F64)
    model.load(interp.params())
    for key, tree in enumerate(batch[:4]):
        ours = sum(r["loss"] for r in interp.run_key(tree, key=key, train=False))
        node_losses, _ = tb.eager_tree_losses(model, tree)
        assert node_losses.sum().item() == pytest.approx(ours, rel=1e-12)

    tree = batch[0]
    grads = interp.gradients(tree, key=99)
    tb.eager_tree_losses(model, tree)[0].sum().backward()
    torch_grads = _grads(model)
    for role, node in tb.TREE_LSTM_NAMES.items():
        for name, grad in grads[node].items():
            expected = torch_grads[role if name == "E" else f"{role}_{name}"]
            np.testing.assert_allclose(grad, expected.numpy(), rtol=1e-6, atol=1e-12, err_msg=f"{node}.{name}")


# ------------------------------------------------------------------------------------------------------ GGNN
def _molecules() -> list[GraphInstance]:
    graphs = molecule_graphs(6, seed=3, max_heavy_atoms=5)
    assert len({g.num_nodes for g in graphs}) > 1  # padding is exercised
    assert any(not np.any(g.edge_types == 2) for g in graphs)  # so is an edge type absent from a graph
    return graphs


@pytest.mark.parametrize("source", ["babi", "molecules"])
def test_dense_and_scatter_ggnn_agree(source: str) -> None:
    if source == "babi":
        graphs, types, outputs = babi15_graphs(4, seed=1, inflate_to=10, task="classification"), 4, 20
    else:
        graphs, types, outputs = _molecules(), 3, 1
    width = graphs[0].feature_width
    model = tb.TorchGGNN(types, width, hidden=6, steps=3, outputs=outputs, seed=5, dtype=F64)
    dense = tb.dense_forward(model, tb.dense_batch(graphs, types, dtype=F64))
    dense.pow(2).sum().backward()
    dense_grads = _grads(model)
    scatter = tb.scatter_forward(model, tb.scatter_batch(graphs, dtype=F64))
    torch.testing.assert_close(scatter, dense, rtol=1e-10, atol=1e-12)
    scatter.pow(2).sum().backward()
    _assert_same_grads(_grads(model), dense_grads)
    alone = tb.scatter_forward(model, tb.scatter_batch(graphs[1:2], dtype=F64))  # batching changes nothing
    torch.testing.assert_close(alone[0], scatter[1], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_torch_ggnn_with_our_weights_gives_our_interpreters_loss(task: str) -> None:
    steps, hidden = 3, 5
    if task == "classification":
        graphs, types, outputs = babi15_graphs(3, seed=2, inflate_to=9, task="classification"), 4, len(BABI15_TYPES)
    else:
        graphs, types, outputs = _molecules()[:3], 3, 1
    width = graphs[0].feature_width
    graph = ggsnn(types, width, hidden=hidden, steps=steps, task=task, classes=outputs if outputs > 1 else None)
    interp = Interpreter(graph, seed=4, dtype=np.float64)
    model = tb.TorchGGNN(types, width, hidden, steps, outputs=outputs, dtype=F64)
    model.load(interp.params())
    out = tb.scatter_forward(model, tb.scatter_batch(graphs, dtype=F64))
    if task == "classification":
        targets = torch.tensor([int(g.target) for g in graphs])
        expected = torch.nn.functional.cross_entropy(out, targets, reduction="none")
    else:
        expected = (out[:, 0] - torch.tensor([float(g.target) for g in graphs], dtype=F64)) ** 2
    for key, g in enumerate(graphs):
        ours = sum(r["loss"] for r in interp.run_key(ggsnn_batch(g, types, steps, task), key=key, train=False))
        assert ours == pytest.approx(expected[key].item(), rel=1e-10)


def test_node_selection_dense_scatter_and_our_interpreter_agree() -> None:
    """bAbI-15 node selection, graphs of different sizes: torch dense (padded, -inf logits), torch scatter
    (segment softmax) and our interpreter on one bucket give one loss, and both torch sides one gradient."""
    steps, hidden, types = 3, 5, 4
    graphs = [babi15_graphs(1, seed=k, inflate_to=size)[0] for k, size in enumerate((9, 6, 12))]
    graph = ggsnn(types, graphs[0].feature_width, hidden=hidden, steps=steps, task="node_selection")
    interp = Interpreter(graph, seed=4, dtype=np.float64)
    model = tb.TorchGGNN(types, graphs[0].feature_width, hidden, steps, dtype=F64, node_selection=True)
    model.load(interp.params())
    targets = torch.tensor([int(g.target) for g in graphs])
    dense_loss = torch.nn.functional.cross_entropy(tb.dense_forward(model, tb.dense_batch(graphs, types, dtype=F64)),
                                                   targets)  # fmt: skip
    dense_loss.backward()
    dense_grads = _grads(model)
    batch = tb.scatter_batch(graphs, dtype=F64)
    rows = targets + torch.tensor([0, 9, 15])
    scatter_loss, correct = tb.segment_cross_entropy(tb.scatter_forward(model, batch), batch.node_graph, rows, 3)
    scatter_loss.backward()
    _assert_same_grads(_grads(model), dense_grads)
    assert scatter_loss.item() == pytest.approx(dense_loss.item(), rel=1e-10)
    (report,) = interp.run_key(ggsnn_bucket(graphs, types, steps, "node_selection"), key=0, train=False)
    assert report["loss"] == pytest.approx(dense_loss.item(), rel=1e-10)
    assert report["correct"] == int(correct)
    exported = model.export()
    assert {n: {k: v.shape for k, v in p.items()} for n, p in exported.items()} == {
        name: node.op.param_shapes() for name, node in graph.nodes.items() if node.op.param_shapes()
    }


@pytest.mark.slow
@pytest.mark.parametrize("side", ["ours", "ours_per_graph"])
def test_the_benchmark_reaches_its_babi15_bar_in_a_ci_sized_run(side: str) -> None:
    """The benchmark's own training of ours (same settings, 54-node graphs; 10 graphs per key, and one graph per
    key with bundling) on a CI-sized set: the full run reaches 100% validation accuracy (``TARGETS``); 500
    graphs and 3 epochs reach 1.0 on seeds 0-4 in under 2 s each on an idle machine, so the bar here is 0.95.
    The run takes 5 epochs: asynchronous training follows the machine's timing, and with two busy processes
    beside it 3 epochs of the 10-graph side ended below 1.0 in 3 runs of 14 (0.98, 0.87, 0.86), 5 epochs at
    1.0 in 10 of 10.
    (The one graph per key side once updated after every graph with 128 graphs in flight and never learned:
    4.6%.)"""
    from amp_notebook.bench import ggsnn_vs_torch as bench

    train_g, val_g = bench.make_graphs("babi15", 500, 100, seed=0, inflate_to=54)
    result = bench.ours("babi15", train_g, val_g, epochs=5, seed=0, side=side)
    assert result["final_metric"] >= 0.95
    assert bench.epochs_to_target([0.3, 0.99, 1.0], 1.0) == 3 and bench.epochs_to_target([0.5], 1.0) is None


def test_torch_models_export_the_weights_they_load() -> None:
    """``export`` is ``load``'s inverse, so both sides of a benchmark can start from the same weights."""
    tree = tb.TorchTreeLSTM(11, 3, 4, 5, seed=1, dtype=F64)
    params = tree.export()
    assert set(params) == {"embed", "leaf_gates", "branch_gates", "classify"}
    other = tb.TorchTreeLSTM(11, 3, 4, 5, seed=2, dtype=F64)
    other.load(params)
    for a, b in zip(tree.parameters(), other.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    net = tb.TorchGGNN(4, 6, hidden=5, steps=2, outputs=3, seed=1, dtype=F64)
    graph = ggsnn(4, 6, hidden=5, steps=2, task="classification", classes=3)
    exported = net.export()
    expected = {name: node.op.param_shapes() for name, node in graph.nodes.items() if node.op.param_shapes()}
    assert {n: {k: v.shape for k, v in g.items()} for n, g in exported.items()} == expected
    other_net = tb.TorchGGNN(4, 6, hidden=5, steps=2, outputs=3, seed=2, dtype=F64)
    other_net.load(exported)
    for a, b in zip(net.parameters(), other_net.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
