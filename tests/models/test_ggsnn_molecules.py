"""The GG-NN molecules regression of ``bench.ggsnn_vs_torch``: ours and torch compute the same loss and
gradient for a benchmark-sized bucket, and the torch sides train with exactly our optimizer settings
(learning-rate decay included), so that a difference between the sides can only come from asynchrony."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from amp_notebook.bench import ggsnn_vs_torch as bench
from amp_notebook.bench import torch_baselines as tb
from amp_notebook.data.graphs import ggsnn_bucket
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.models import ggsnn

F64 = torch.float64


def test_a_benchmark_bucket_has_torchs_loss_and_gradient() -> None:
    """One key of the benchmark (10 molecules, hidden 32, 4 steps, targets in their own units ~14): our
    interpreter's loss and every gradient equal torch autograd of the benchmark's own loss (``mse_loss``,
    a mean over the bucket's graphs) on the same weights. Sum instead of mean, or a loss scaled otherwise
    than torch's, would show here."""
    spec = bench.task_spec("molecules")
    types, width, hidden, steps = spec["types"], spec["width"], bench.HIDDEN, bench.STEPS
    graphs = bench.make_graphs("molecules", bench.GRAPHS_PER_KEY, 1, seed=3, inflate_to=54)[0]
    assert len(graphs) == bench.GRAPHS_PER_KEY and np.mean([g.target for g in graphs]) > 5  # unnormalized
    model = tb.TorchGGNN(types, width, hidden, steps, outputs=1, seed=7, dtype=F64)
    interp = Interpreter(ggsnn(types, width, hidden, steps, "regression"), params=model.export(), dtype=np.float64)
    batch = ggsnn_bucket(graphs, types, steps, "regression")
    grads = interp.gradients(batch, key=0)
    (report,) = interp.run_key(batch, key=1, train=False)

    prepared = {"batch": tb.scatter_batch(graphs, dtype=F64), "n": len(graphs),
                "targets": torch.tensor([float(g.target) for g in graphs], dtype=F64)}  # fmt: skip
    loss, _ = bench._loss_and_correct("molecules", model, prepared, scatter=True)
    loss.backward()
    assert report["loss"] == pytest.approx(loss.item(), rel=1e-10)
    as_grads = tb.TorchGGNN(types, width, hidden, steps, outputs=1, seed=0, dtype=F64)
    with torch.no_grad():  # the gradients in our layout: export is linear (transposes, concatenation)
        for target, source in zip(as_grads.parameters(), model.parameters(), strict=True):
            assert source.grad is not None
            target.copy_(source.grad)
    expected = as_grads.export()
    assert set(grads) == set(expected)
    for node, by_name in expected.items():
        for name, value in by_name.items():
            np.testing.assert_allclose(grads[node][name], value, rtol=1e-7, atol=1e-10, err_msg=f"{node}.{name}")


@pytest.mark.slow
def test_every_side_trains_molecules_with_the_same_optimizer() -> None:
    spec = bench.optimizer_for("molecules")
    assert spec["name"] == "adam" and spec["lr"] == bench.OPTIMIZER["lr"] and 0 < spec["lr_decay"] < 1
    assert bench.optimizer_for("babi15") == bench.OPTIMIZER  # bAbI-15 keeps a constant rate
    model = tb.TorchGGNN(3, 5, hidden=4, steps=2, outputs=1)
    opt, decay = bench.torch_optimizer(
        model, {"name": "adam", "lr": 2e-3, "beta1": 0.8, "beta2": 0.99, "eps": 1e-7, "lr_decay": 0.5}
    )
    assert isinstance(opt, torch.optim.Adam) and decay == 0.5
    assert opt.defaults["lr"] == 2e-3 and opt.defaults["betas"] == (0.8, 0.99) and opt.defaults["eps"] == 1e-7
    for unmirrored in ({"name": "adam", "lr": 1e-3, "clip_norm": 1.0}, {"name": "sgd", "lr": 0.1}):
        with pytest.raises(ValueError, match="mirrors Adam"):
            bench.torch_optimizer(model, unmirrored)
    with pytest.raises(ValueError, match="lr_decay"):
        bench.torch_optimizer(model, {"name": "adam", "lr": 1e-3, "lr_decay": 1.5})


def test_ours_in_sync_mode_ends_where_the_torch_side_ends_with_the_lr_decay(monkeypatch: Any) -> None:
    """One key at a time (sync), ours takes torch's Adam steps on torch's minibatches in torch's order, the
    learning rate decaying after each epoch on both sides: the two end with the same validation MAE. A
    decay applied on one side only would part them (checked with the decay off on the torch side)."""
    monkeypatch.setitem(bench.OPTIMIZER_BY_TASK, "molecules", {"lr_decay": 0.2})
    monkeypatch.setitem(bench.OURS_BY_TASK, "molecules", {**bench.OURS_BY_TASK["molecules"], "mode": "sync"})
    train_g, val_g = bench.make_graphs("molecules", 60, 30, seed=1, inflate_to=54)
    ours = bench.ours("molecules", train_g, val_g, epochs=3, seed=1)
    assert ours["settings"]["optimizer"]["lr_decay"] == 0.2
    theirs = bench.torch_side("molecules", train_g, val_g, epochs=3, seed=1, scatter=True)
    assert theirs["settings"]["optimizer"] == ours["settings"]["optimizer"]
    assert ours["final_metric"] == pytest.approx(theirs["final_metric"], rel=1e-4)
    monkeypatch.setitem(bench.OPTIMIZER_BY_TASK, "molecules", {})
    constant = bench.torch_side("molecules", train_g, val_g, epochs=3, seed=1, scatter=True)
    assert abs(constant["final_metric"] - ours["final_metric"]) > 1e-3
