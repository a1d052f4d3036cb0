"""The binary Tree-LSTM, ours (asynchronous) against two PyTorch baselines, same data, same run.

Data: ``sentiment_tree_dataset`` (synthetic compositional sentiment trees, 3..12 words, a 5-class label at
every node). Model everywhere: embedding 64, hidden 64, binary Tree-LSTM leaf and branch cells, a classifier
at every node (``models.tree_lstm``; the torch side is ``bench.torch_baselines.TorchTreeLSTM``, the same
math, checked against our interpreter in ``tests/bench/test_bench_dynamic.py``). Optimizer: Adam, same learning rate.

Our sides (settings in ``SIDES``), mode amp, no trace recording, every side starting from the torch sides'
initial weights:

- ours: forest keys (``data.forest``): ``TREES_PER_KEY`` = 25 trees per key (the torch minibatch), run level
  by level by ``models.tree_lstm_forest`` (same cells, weights and node names; validation forests of
  ``EVAL_BATCH`` trees, the torch sides' evaluation batch), every node updating after each gradient,
  6 forests in flight, messages of up to 8 forests run as one call (``max_bundle``; the inbox serves the
  oldest key's messages first: serving the node with the most messages waiting ran 10% faster but ended
  at 97.8% node / 86.4% root accuracy instead of 99.7% / 97.6%, more stale gradients), one worker thread.
  A forest key's loss is the mean over its nodes (torch: the mean over trees of each tree's mean). The
  trees are bucketed once before training (``bucketing_s``, counted in ``overall_instances_per_s``); the
  key order is shuffled every epoch.
- ours_2_workers: the same on 2 worker threads (the forests' Linears on one, their cells on the other), with
  3 forests in flight instead of 6. On two workers at once the same keys in flight make the gradients
  staler: at 6 keys a gradient was 15-16 updates stale on average (4 on one worker), and 4 epochs ended at
  95-97% node and 75-85% root accuracy against 99% and 95-97% on one worker (3 seeds). At 3 keys it was 7-8
  updates stale, the accuracy one worker's within 0.4-5.2 root points, and the run as fast as at 6 keys.
- ours_per_tree: the paper's layout, one tree per key walked node by node with Collect (``models.tree_lstm``,
  fused cells), the paper's per-node update frequencies (embedding 1000 gradients, other nodes 50), with
  message bundling: 32 trees in flight, each node running up to ``max_bundle`` 128 of the messages waiting
  for it as one call, one worker thread; ``ratio_per_tree_vs_eager``. More trees in flight make bigger bundles
  but keep more states, caches and gradients waiting at once: on the native engine 128 trees ran a fifth
  to a quarter slower than 32 (``docs/measurements.md`` has the sweep).
- ours_per_tree_2_workers: the same on 2 worker threads.
- ours_per_tree_unbundled: the same layout without bundling on 2 workers, 8 trees in flight, as measured
  before bundling existed; ``ratio_per_tree_unbundled_vs_eager``.
- ours_python, ours_per_tree_python: ours and ours_per_tree on the Python engine.

Engines: every side but the ``_python`` ones runs on the default engine (``engine="auto"``: the native worker
loops wherever the extension is built), so the headline ratios are the default engine's; each side records
the engine that ran (``engine``), the table prints it, and ``engine_gain`` / ``engine_gain_per_tree`` divide
the default engine's throughput by the Python engine's. On the Python engine every message's glue holds the
GIL, so two worker threads on this 2-core VM take turns rather than overlap; the native engine's workers run
without it (both worker counts are reported).
- torch_eager: one tree at a time, a Python loop over its nodes (``eager_tree_losses``); gradients of a
  minibatch of 25 trees accumulate before each Adam step.
- torch_batched: minibatches of 25 trees run level by level (``batched_tree_losses``), one branch cell per
  depth across the minibatch; minibatches of consecutive trees whose index plans are built once before
  timing (as ours' forests are), in a new order every epoch.

Every side starts from the same weights (``TorchTreeLSTM(seed)``, exported into our layout for ours).
torch runs with ``torch.set_num_threads(2)`` (the same 2 cores). Each side trains the same number of epochs
and evaluates on the validation trees after every epoch; evaluation time counts, as it does in our
``train_instances_per_s``. Figures per side: ``instances_per_s`` = the median over epochs of training trees
per second of that epoch (the per-epoch values are in ``epoch_instances_per_s``), ``overall_instances_per_s``
over the whole run, ``final_metric`` = validation node-level accuracy after the last epoch and
``root_accuracy`` (whole-sentence accuracy). ratio = ours / theirs in ``instances_per_s``.
``load_average_1min`` records the machine's load before and after, flagged ``busy`` when it exceeded the
cores (other processes on a small machine distort both sides, torch's OpenMP threads most).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from amp_notebook.bench.common import interleaved_runs, load_line, machine_load, median_run, report
from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.data.sentiment import sentiment_tree_dataset

EMBED, HIDDEN, CLASSES = 64, 64, 5
OPTIMIZER: dict[str, Any] = {"name": "adam", "lr": 3e-3}
TREES_PER_KEY = 25  # = TORCH_BATCH: a forest key holds as many trees as a torch minibatch
_FOREST: dict[str, Any] = {"mode": "amp", "max_active_keys": 6, "min_update_frequency": 1, "trace": False,
                           "max_bundle": 8, "order": "oldest_key"}  # fmt: skip
_PER_TREE: dict[str, Any] = {"mode": "amp", "max_active_keys": 32, "trace": False, "max_bundle": 128,
                             "order": "largest_bundle"}  # fmt: skip
# our sides: name -> (layout, train settings)
SIDES: dict[str, tuple[str, dict[str, Any]]] = {
    "ours": ("forest", {**_FOREST, "workers": 1}),
    "ours_2_workers": ("forest", {**_FOREST, "workers": 2, "max_active_keys": 3}),  # staleness: module docstring
    "ours_per_tree": ("per_tree", {**_PER_TREE, "workers": 1}),
    "ours_per_tree_2_workers": ("per_tree", {**_PER_TREE, "workers": 2}),
    "ours_per_tree_unbundled": ("per_tree", {"mode": "amp", "workers": 2, "max_active_keys": 8, "trace": False}),
    "ours_python": ("forest", {**_FOREST, "workers": 1, "engine": "python"}),
    "ours_per_tree_python": ("per_tree", {**_PER_TREE, "workers": 1, "engine": "python"}),
}
TORCH_THREADS, TORCH_BATCH, EVAL_BATCH = 2, 25, 250


def ours(data: Dataset, epochs: int, seed: int, side: str = "ours") -> dict[str, Any]:
    """One of our sides (``SIDES``): forest keys (``TREES_PER_KEY`` trees each, level by level), or the
    paper's layout (one tree per key, node by node, the paper's update frequencies). Starts from the torch
    sides' initial weights."""
    from amp_notebook.bench.torch_baselines import TorchTreeLSTM
    from amp_notebook.data.forest import forest_dataset
    from amp_notebook.models.tree_lstm import (
        PAPER_EMBED_UPDATE_FREQUENCY,
        PAPER_UPDATE_FREQUENCY,
        root_accuracy,
        tree_lstm,
        tree_lstm_forest,
    )
    from amp_notebook.runtime.train import TrainResult, train

    vocab = int(data.meta["vocab_size"])  # type: ignore[call-overload]
    start_from = TorchTreeLSTM(vocab, EMBED, HIDDEN, CLASSES, seed=seed).export()
    bucketing_s = 0.0
    layout, run_settings = SIDES[side]
    if layout == "per_tree":
        graph, keys, settings = tree_lstm(vocab, EMBED, HIDDEN, CLASSES), data, dict(run_settings)
        settings["min_update_frequency"] = {"embed": PAPER_EMBED_UPDATE_FREQUENCY, "others": PAPER_UPDATE_FREQUENCY}
    else:
        t0 = time.perf_counter()
        keys = forest_dataset(data, TREES_PER_KEY, val_trees_per_key=EVAL_BATCH)
        bucketing_s = time.perf_counter() - t0
        graph = tree_lstm_forest(vocab, EMBED, HIDDEN, CLASSES)
        settings = {**run_settings, "trees_per_key": TREES_PER_KEY}
    r = train(graph, keys, epochs=epochs, seed=seed, optimizer=OPTIMIZER, params=start_from, **run_settings)
    assert isinstance(r, TrainResult)
    per_epoch: list[float] = []
    previous = 0.0
    for stats in r.history:  # every epoch trains every tree once
        per_epoch.append(len(data.train) / (stats.end_s - previous))
        previous = stats.end_s
    return {
        "instances_per_s": statistics.median(per_epoch),
        "epoch_instances_per_s": per_epoch,
        "overall_instances_per_s": len(data.train) * len(r.history) / (r.wall_s + bucketing_s),
        "final_metric": r.history[-1].val_accuracy,
        "root_accuracy": root_accuracy(r.params, data.val),
        "val_accuracy": [e.val_accuracy for e in r.history],
        "wall_s": r.wall_s,
        "bucketing_s": bucketing_s,
        "epochs_run": len(r.history),
        "engine": r.engine,
        "settings": {**settings, "optimizer": OPTIMIZER},
    }


def torch_side(data: Dataset, epochs: int, seed: int, batched: bool) -> dict[str, Any]:
    import torch

    from amp_notebook.bench import torch_baselines as tb

    torch.set_num_threads(TORCH_THREADS)
    model = tb.TorchTreeLSTM(data.meta["vocab_size"], EMBED, HIDDEN, CLASSES, seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=OPTIMIZER["lr"])

    def losses_and_logits(trees: list[Batch]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-node losses, logits and node -> tree index of a minibatch, by this side's method."""
        if batched:
            plan = tb.level_plan(trees)
            node_losses, logits = tb.batched_tree_losses(model, plan)
            return node_losses, logits, plan.node_tree
        pairs = [tb.eager_tree_losses(model, t) for t in trees]
        return torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs]), tb.node_tree_index(trees)

    _warm_up(data, losses_and_logits)
    rng = np.random.default_rng(seed)
    # level-batched: minibatches of consecutive trees with their level plans built once, before timing, as
    # ours builds its forests once; their order is shuffled every epoch. Eager: random minibatches.
    chunks = [data.train[i : i + TORCH_BATCH] for i in range(0, len(data.train), TORCH_BATCH)]
    plans = [tb.level_plan(trees) for trees in chunks] if batched else []
    per_epoch: list[float] = []
    node_acc: list[float] = []
    root_acc = 0.0
    start = time.perf_counter()
    for _ in range(epochs):
        epoch_start = time.perf_counter()
        order = rng.permutation(len(data.train))
        for b in rng.permutation(len(chunks)):
            if batched:
                node_losses, _ = tb.batched_tree_losses(model, plans[b])
                node_tree, count = plans[b].node_tree, len(chunks[b])
            else:
                trees = [data.train[j] for j in order[b * TORCH_BATCH : (b + 1) * TORCH_BATCH]]
                node_losses, _, node_tree = losses_and_logits(trees)
                count = len(trees)
            opt.zero_grad()
            tb.minibatch_loss(node_losses, node_tree, count).backward()
            opt.step()
        accuracy, root_acc = _evaluate(data.val, losses_and_logits)
        node_acc.append(accuracy)
        per_epoch.append(len(order) / (time.perf_counter() - epoch_start))
    wall = time.perf_counter() - start
    return {
        "instances_per_s": statistics.median(per_epoch),
        "epoch_instances_per_s": per_epoch,
        "overall_instances_per_s": epochs * len(data.train) / wall,
        "final_metric": node_acc[-1],
        "root_accuracy": root_acc,
        "val_accuracy": node_acc,
        "wall_s": wall,
        "epochs_run": epochs,
        "settings": {"threads": TORCH_THREADS, "batch_trees": TORCH_BATCH,
                     "method": "level-wise batched" if batched else "one tree at a time, node loop",
                     "optimizer": OPTIMIZER, "torch": torch.__version__},
    }  # fmt: skip


def _warm_up(data: Dataset, losses_and_logits: Callable[[list[Batch]], tuple[Any, Any, Any]]) -> None:
    """One untimed forward and backward pass (torch initialises its kernels and allocator lazily)."""
    node_losses, _, _ = losses_and_logits(data.train[:TORCH_BATCH])
    node_losses.sum().backward()


def _evaluate(
    val: list[Batch], losses_and_logits: Callable[[list[Batch]], tuple[Any, Any, Any]]
) -> tuple[float, float]:
    """Node-level and root accuracy on the validation trees (the root is last in each tree's post-order)."""
    import torch

    correct = nodes = roots = 0
    with torch.no_grad():
        for i in range(0, len(val), EVAL_BATCH):
            trees = val[i : i + EVAL_BATCH]
            _, logits, node_tree = losses_and_logits(trees)
            labels = torch.from_numpy(np.concatenate([t.inputs["labels"] for t in trees]))
            hit = logits.argmax(1) == labels
            correct += int(hit.sum())
            nodes += hit.numel()
            last = torch.cumsum(torch.bincount(node_tree, minlength=len(trees)), 0) - 1
            roots += int(hit[last].sum())
    return correct / max(nodes, 1), roots / max(len(val), 1)


def run(
    quick: bool = False, n_train: int = 2000, n_val: int = 500, epochs: int = 4, seed: int = 0, repeats: int = 3
) -> dict[str, Any]:  # fmt: skip
    """Train all sides on the same trees, ``repeats`` times each, interleaved with the order flipping every
    round (``--quick``: once); each side is reported by its run of median throughput, with every run's
    figures beside it, and the ratios are of the medians (module docstring)."""
    if quick:
        n_train, n_val, epochs, repeats = 200, 60, 3, 1
    data = sentiment_tree_dataset(n_train=n_train, n_val=n_val, seed=seed)
    load_before = machine_load()["after"]

    def side(name: str) -> Callable[[], dict[str, Any]]:
        return lambda: ours(data, epochs, seed, name)

    contenders: dict[str, Callable[[], dict[str, Any]]] = {name: side(name) for name in SIDES}
    contenders["torch_eager"] = lambda: torch_side(data, epochs, seed, batched=False)
    contenders["torch_batched"] = lambda: torch_side(data, epochs, seed, batched=True)
    runs = interleaved_runs(repeats, contenders)
    load = machine_load(load_before)
    medians = {name: median_run(runs[name]) for name in runs}
    a, per_tree, unbundled = medians["ours"], medians["ours_per_tree"], medians["ours_per_tree_unbundled"]
    eager, batched = medians["torch_eager"], medians["torch_batched"]
    result = {
        **medians,
        "ratio_per_tree_vs_eager": per_tree["instances_per_s"] / eager["instances_per_s"],
        "ratio_per_tree_2_workers_vs_eager": medians["ours_per_tree_2_workers"]["instances_per_s"]
        / eager["instances_per_s"],
        "ratio_per_tree_unbundled_vs_eager": unbundled["instances_per_s"] / eager["instances_per_s"],
        "ratio_2_workers_vs_batched": medians["ours_2_workers"]["instances_per_s"] / batched["instances_per_s"],
        "ratio_per_tree_vs_batched": per_tree["instances_per_s"] / batched["instances_per_s"],
        "ratio_per_tree_2_workers_vs_batched": medians["ours_per_tree_2_workers"]["instances_per_s"]
        / batched["instances_per_s"],
        "ratio_per_tree_vs_eager_per_round": [
            o["instances_per_s"] / e["instances_per_s"]
            for o, e in zip(runs["ours_per_tree"], runs["torch_eager"], strict=True)
        ],
        "engine_gain": a["instances_per_s"] / medians["ours_python"]["instances_per_s"],
        "engine_gain_per_tree": per_tree["instances_per_s"] / medians["ours_per_tree_python"]["instances_per_s"],
        "ratio_vs_eager": a["instances_per_s"] / eager["instances_per_s"],
        "ratio_vs_batched": a["instances_per_s"] / batched["instances_per_s"],
        "ratio_vs_eager_per_round": [
            o["instances_per_s"] / e["instances_per_s"] for o, e in zip(runs["ours"], runs["torch_eager"], strict=True)
        ],
        "repeats": repeats, "n_train": n_train, "n_val": n_val, "epochs": epochs, "seed": seed,
        "model": {"embedding_dim": EMBED, "hidden": HIDDEN, "classes": CLASSES},
        "load_average_1min": load,
    }  # fmt: skip
    rows: list[tuple[str, Any]] = [("", "trees/s (median epoch)   val node acc   val root acc")]
    sides = (("ours: forests, bundled, 1 worker", a),
             ("ours: forests, bundled, 2 workers, 3 in flight", medians["ours_2_workers"]),
             ("ours: one tree per key, bundled, 1 worker", per_tree),
             ("ours: one tree per key, bundled, 2 workers", medians["ours_per_tree_2_workers"]),
             ("ours: one tree per key, unbundled, 2 workers", unbundled),
             ("ours: forests, bundled, 1 worker", medians["ours_python"]),
             ("ours: one tree per key, bundled, 1 worker", medians["ours_per_tree_python"]),
             ("torch eager", eager), ("torch level-batched", batched))  # fmt: skip
    for name, side in sides:
        label = f"{name} [{side['engine']}]" if "engine" in side else name
        rows.append((label, f"{side['instances_per_s']:>10.0f}   {side['final_metric']:>20.4f}"
                            f"   {side['root_accuracy']:>12.4f}"))  # fmt: skip
    rows += [("ours / torch eager", f"{result['ratio_vs_eager']:.2f} (rounds: "
              f"{', '.join(f'{r:.2f}' for r in result['ratio_vs_eager_per_round'])})"),
             ("ours / torch batched", f"{result['ratio_vs_batched']:.2f}"),
             ("ours one tree per key, bundled / torch eager", f"{result['ratio_per_tree_vs_eager']:.2f} (rounds: "
              f"{', '.join(f'{r:.2f}' for r in result['ratio_per_tree_vs_eager_per_round'])})"),
             ("ours one tree per key, bundled / torch level-batched", f"{result['ratio_per_tree_vs_batched']:.2f}"),
             ("  on 2 workers / torch level-batched (2 threads)",
              f"{result['ratio_per_tree_2_workers_vs_batched']:.2f}"),
             ("  unbundled / torch eager", f"{result['ratio_per_tree_unbundled_vs_eager']:.2f}"),
             ("default engine / Python engine", f"forests {result['engine_gain']:.2f}, one tree per key "
              f"{result['engine_gain_per_tree']:.2f}"),
             ("runs per side", f"{repeats}, interleaved; medians shown"), load_line(load)]  # fmt: skip
    print(report(rows))
    return result
