"""The GG-NN, ours (asynchronous, 2 workers) against two PyTorch baselines, same graphs, same run.

Tasks: bAbI-15-style deduction graphs (``babi15_graphs``, ``inflate_to`` nodes, 4 edge types, the answer's
animal type as one of 20 classes; final metric = validation accuracy) and, in a full run, random molecules
(``molecule_graphs``, 3 bond types, regression; final metric = validation MAE). Model everywhere: hidden 32,
4 propagation steps, an input Linear, one message Linear per edge type, a GRU update and the gated-sum
readout (``models.ggsnn``; torch: ``bench.torch_baselines.TorchGGNN``, the same math, checked against our
interpreter in ``tests/test_bench_dynamic.py``). Optimizer: Adam with the same learning rate.

- ours: keys of ``GRAPHS_PER_KEY`` = 10 graphs (``TORCH_BATCH``) as one disjoint union
  (``data.graphs.ggsnn_bucket``; validation keys of ``EVAL_BATCH`` graphs, the torch sides' evaluation
  batch), mode amp, 2 workers, ``max_active_keys`` keys in flight, every node
  updating after each gradient (so one update per 10 graphs, as torch), no trace recording.
- torch_dense: minibatches padded to the largest graph, one dense (B, N, N) adjacency per edge type (the
  paper's TensorFlow baseline).
- torch_scatter: minibatches concatenated, messages gathered per edge and ``index_add_``-ed into targets,
  segment-sum readout. Both torch sides take ``TORCH_BATCH`` graphs per Adam step (= ours'
  ``min_update_frequency``) and build their minibatch tensors inside the timed loop.

Every side starts from the same weights (``TorchGGNN(seed)``, exported into our layout for ours).
torch runs with ``torch.set_num_threads(2)``. All sides train the same epochs and evaluate after each; as in
``tree_vs_torch``, ``instances_per_s`` is the median over epochs of training graphs per second (evaluation
time included), ratio = ours / theirs. ``load_average_1min`` records the machine's load before and after:
on a shared 2-core machine, other processes make torch's 2 OpenMP threads stall far more than our workers.
Our regression MAE is measured by loading our final parameters into the torch model (the runtime reports
MSE only; ``tests/test_bench_dynamic.py`` shows that the two compute the same outputs).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import numpy as np

from amp_notebook.bench.common import report
from amp_notebook.data.graphs import (
    BABI15_FEATURE_WIDTH,
    BABI15_TYPES,
    GraphInstance,
    babi15_graphs,
    ggsnn_dataset,
)
from amp_notebook.data.molecules import BOND_TYPES, ELEMENTS, molecule_graphs

HIDDEN, STEPS = 32, 4
OPTIMIZER: dict[str, Any] = {"name": "adam", "lr": 3e-3}
OURS: dict[str, Any] = {"mode": "amp", "workers": 2, "max_active_keys": 2, "min_update_frequency": 1, "trace": False}
GRAPHS_PER_KEY = 10  # a key is a bucket of graphs (their disjoint union): one update per TORCH_BATCH graphs
TORCH_THREADS, TORCH_BATCH, EVAL_BATCH = 2, 10, 100


def task_spec(task: str) -> dict[str, Any]:
    """Edge types, feature width, model task and outputs of a benchmark task."""
    if task == "babi15":
        return {"types": 4, "width": BABI15_FEATURE_WIDTH, "kind": "classification", "outputs": len(BABI15_TYPES)}
    if task == "molecules":
        return {"types": len(BOND_TYPES), "width": len(ELEMENTS), "kind": "regression", "outputs": 1}
    raise ValueError(f"task: expected 'babi15' or 'molecules', got {task!r}")


def make_graphs(task: str, n_train: int, n_val: int, seed: int, inflate_to: int) -> tuple[list[GraphInstance], ...]:
    if task == "babi15":
        return (babi15_graphs(n_train, seed=seed, inflate_to=inflate_to, task="classification"),
                babi15_graphs(n_val, seed=seed + 1, inflate_to=inflate_to, task="classification"))  # fmt: skip
    return molecule_graphs(n_train, seed=seed), molecule_graphs(n_val, seed=seed + 1)


def ours(task: str, train_g: list[GraphInstance], val_g: list[GraphInstance], epochs: int, seed: int) -> dict[str, Any]:
    from amp_notebook.models.ggsnn import ggsnn
    from amp_notebook.runtime.train import TrainResult, train

    spec = task_spec(task)
    classes = spec["outputs"] if spec["kind"] == "classification" else None
    data = ggsnn_dataset(
        train_g, spec["types"], spec["kind"], STEPS, val_instances=val_g, num_classes=classes,
        graphs_per_key=GRAPHS_PER_KEY, val_graphs_per_key=EVAL_BATCH,
    )  # fmt: skip
    graph = ggsnn(spec["types"], spec["width"], HIDDEN, STEPS, spec["kind"], classes)
    start_from = _torch_model(task, seed).export()  # the torch sides' initial weights: every side starts alike
    r = train(graph, data, epochs=epochs, seed=seed, optimizer=OPTIMIZER, params=start_from, **OURS)
    assert isinstance(r, TrainResult)
    per_epoch, previous = [], 0.0
    for stats in r.history:  # every epoch trains every graph once
        per_epoch.append(len(train_g) / (stats.end_s - previous))
        previous = stats.end_s
    if spec["kind"] == "classification":
        metric, curve_metric = r.history[-1].val_accuracy, "val accuracy"
        curve = [e.val_accuracy for e in r.history]
    else:
        model = _torch_model(task, seed)
        model.load(r.params)
        metric, curve = _evaluate(task, model, val_g, scatter=True), [e.val_loss for e in r.history]
        curve_metric = "val MSE (the runtime's loss; MAE only after the last epoch)"
    return {
        "instances_per_s": statistics.median(per_epoch), "epoch_instances_per_s": per_epoch,
        "overall_instances_per_s": r.train_instances_per_s, "final_metric": metric, "curve": curve,
        "curve_metric": curve_metric, "wall_s": r.wall_s, "epochs_run": len(r.history),
        "settings": {**OURS, "graphs_per_key": GRAPHS_PER_KEY, "optimizer": OPTIMIZER},
    }  # fmt: skip


def _torch_model(task: str, seed: int) -> Any:
    from amp_notebook.bench.torch_baselines import TorchGGNN

    spec = task_spec(task)
    return TorchGGNN(spec["types"], spec["width"], HIDDEN, STEPS, spec["outputs"], seed=seed)


def _outputs(task: str, model: Any, graphs: list[GraphInstance], scatter: bool) -> Any:
    from amp_notebook.bench import torch_baselines as tb

    if scatter:
        return tb.scatter_forward(model, tb.scatter_batch(graphs))
    return tb.dense_forward(model, tb.dense_batch(graphs, task_spec(task)["types"]))


def _loss(task: str, outputs: Any, graphs: list[GraphInstance]) -> Any:
    import torch

    if task_spec(task)["kind"] == "classification":
        return torch.nn.functional.cross_entropy(outputs, torch.tensor([int(g.target) for g in graphs]))
    targets = torch.tensor([float(g.target) for g in graphs], dtype=outputs.dtype)
    return torch.nn.functional.mse_loss(outputs[:, 0], targets)


def _evaluate(task: str, model: Any, graphs: list[GraphInstance], scatter: bool) -> float:
    """Validation accuracy (classification) or mean absolute error (regression)."""
    import torch

    total = 0.0
    with torch.no_grad():
        for i in range(0, len(graphs), EVAL_BATCH):
            chunk = graphs[i : i + EVAL_BATCH]
            out = _outputs(task, model, chunk, scatter).float()
            if task_spec(task)["kind"] == "classification":
                total += float((out.argmax(1) == torch.tensor([int(g.target) for g in chunk])).sum())
            else:
                total += float((out[:, 0] - torch.tensor([float(g.target) for g in chunk])).abs().sum())
    return total / max(len(graphs), 1)


def torch_side(
    task: str, train_g: list[GraphInstance], val_g: list[GraphInstance], epochs: int, seed: int, scatter: bool
) -> dict[str, Any]:
    import torch

    torch.set_num_threads(TORCH_THREADS)
    model = _torch_model(task, seed)
    opt = torch.optim.Adam(model.parameters(), lr=OPTIMIZER["lr"])
    _loss(task, _outputs(task, model, train_g[:TORCH_BATCH], scatter), train_g[:TORCH_BATCH]).backward()  # warm-up
    rng = np.random.default_rng(seed)
    per_epoch: list[float] = []
    curve: list[float] = []
    start = time.perf_counter()
    for _ in range(epochs):
        epoch_start = time.perf_counter()
        order = rng.permutation(len(train_g))
        for i in range(0, len(order), TORCH_BATCH):
            chunk = [train_g[j] for j in order[i : i + TORCH_BATCH]]
            opt.zero_grad()
            _loss(task, _outputs(task, model, chunk, scatter), chunk).backward()
            opt.step()
        curve.append(_evaluate(task, model, val_g, scatter))
        per_epoch.append(len(order) / (time.perf_counter() - epoch_start))
    wall = time.perf_counter() - start
    return {
        "instances_per_s": statistics.median(per_epoch), "epoch_instances_per_s": per_epoch,
        "overall_instances_per_s": epochs * len(train_g) / wall, "final_metric": curve[-1], "curve": curve,
        "curve_metric": "val accuracy" if task_spec(task)["kind"] == "classification" else "val MAE",
        "wall_s": wall, "epochs_run": epochs,
        "settings": {"threads": TORCH_THREADS, "batch_graphs": TORCH_BATCH, "optimizer": OPTIMIZER,
                     "method": "scatter / index_add_" if scatter else "dense padded adjacency",
                     "torch": torch.__version__},
    }  # fmt: skip


def compare(task: str, n_train: int, n_val: int, epochs: int, seed: int, inflate_to: int) -> dict[str, Any]:
    """All three sides on one task; prints a table and returns the figures."""
    train_g, val_g = make_graphs(task, n_train, n_val, seed, inflate_to)
    load_before = os.getloadavg()
    a = ours(task, train_g, val_g, epochs, seed)
    dense = torch_side(task, train_g, val_g, epochs, seed, scatter=False)
    scatter = torch_side(task, train_g, val_g, epochs, seed, scatter=True)
    metric = "val accuracy" if task_spec(task)["kind"] == "classification" else "val MAE"
    result = {
        "ours": a, "torch_dense": dense, "torch_scatter": scatter,
        "ratio_vs_dense": a["instances_per_s"] / dense["instances_per_s"],
        "ratio_vs_scatter": a["instances_per_s"] / scatter["instances_per_s"],
        "task": task, "final_metric_name": metric, "n_train": n_train, "n_val": n_val, "epochs": epochs,
        "seed": seed, "model": {"hidden": HIDDEN, "steps": STEPS},
        "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0], "cpus": os.cpu_count()},
        **({"inflate_to": inflate_to} if task == "babi15" else {}),
    }  # fmt: skip
    rows: list[tuple[str, Any]] = [(task, f"graphs/s (median epoch)   {metric}")]
    for name, side in (("ours (amp, 2 workers)", a), ("torch dense", dense), ("torch scatter", scatter)):
        rows.append((name, f"{side['instances_per_s']:>10.0f}   {side['final_metric']:>18.4f}"))
    rows += [("ours / torch dense", f"{result['ratio_vs_dense']:.2f}"),
             ("ours / torch scatter", f"{result['ratio_vs_scatter']:.2f}")]  # fmt: skip
    print(report(rows))
    return result


def run(
    quick: bool = False, n_train: int = 2000, n_val: int = 500, epochs: int = 4, seed: int = 0, inflate_to: int = 54
) -> dict[str, Any]:  # fmt: skip
    """bAbI-15 at the top level of the result; a full run adds ``"molecules"`` (the same keys, regression)."""
    if quick:
        return compare("babi15", 100, 50, 3, seed, inflate_to)
    result = compare("babi15", n_train, n_val, epochs, seed, inflate_to)
    result["molecules"] = compare("molecules", n_train, n_val, epochs, seed, inflate_to)
    return result
