"""The GG-NN, ours (asynchronous, 2 workers) against two PyTorch baselines, same graphs, same run: each
side trains ``repeats`` = 3 times, the sides interleaved, and the medians are reported (one run of each
varied by up to 1.5x on this shared 2-core VM; ``--quick`` runs each once).

Tasks: bAbI-15-style deduction graphs (``babi15_graphs``, ``inflate_to`` = 54 nodes as in the AMPNet paper,
4 edge types) answered as in Li et al. (2016) and the paper, by node selection: a softmax over each graph's
nodes picks the answer node. Target: 100% validation accuracy (``TARGETS``); every side reports
``epochs_to_target`` (the first epoch at the target, or None) and ``reached_target``; final metric =
validation accuracy after the last epoch. A full run adds random molecules (``molecule_graphs``, 3 bond
types, regression; final metric = validation MAE, no target). Model everywhere: hidden 32, 4 propagation
steps, an input Linear, one message Linear per edge type, a GRU update and the readout (``models.ggsnn``;
torch: ``bench.torch_baselines.TorchGGNN``, the same math, checked against our interpreter in
``tests/bench/test_bench_dynamic.py``). Optimizer: Adam with the same settings on every side (``optimizer_for``:
``OPTIMIZER`` with ``OPTIMIZER_BY_TASK``'s additions; the torch sides build ``torch.optim.Adam`` from the same
lr, betas and eps and multiply the lr by the same ``lr_decay`` after each epoch, as our runtime's
``Optimizer.end_epoch`` does); float32 everywhere.

Molecules: the learning rate decays by ``lr_decay`` = 0.7 per epoch on every side. With a constant lr, Adam
keeps this regression (sum-pooled readout, unnormalized extensive targets, mean ~14, std ~7) oscillating to
the end, and gradients one update stale (ours, 2 keys in flight: mean staleness ~0.5) widen the oscillation,
so ours' last-epoch validation MAE was a draw from it (0.17 to 1.12 over seeds 0-5, three runs each, 7 of 18
above 0.35). Plain torch fed one-step-stale gradients does the same (MAE 0.42 to 0.68 over seeds 0-3, against
0.16 to 0.19), so it is asynchrony, not our runtime; in sync mode ours ends with torch's MAE. With the decay:
ours 0.19 to 0.38 (median 0.23, against 0.27; 1 of 18 above 0.35), torch's median 0.183 (0.180 without). On one
worker a second key in flight adds no throughput there, so ours trains molecules with 1 key in flight
(``OURS_BY_TASK``): no stale gradient, sync's MAE. The 2-worker sides keep their keys in flight: a pipeline needs
them.

- ours: keys of ``GRAPHS_PER_KEY`` = 10 graphs (``TORCH_BATCH``) as one disjoint union
  (``data.graphs.ggsnn_bucket``; validation keys of ``EVAL_BATCH`` graphs, the torch sides' evaluation
  batch), the fused edge step (one Linear 'edges' for all edge types, one TypedEdgeSum), mode amp, one
  worker thread, ``max_active_keys`` = 8 keys in flight (molecules: 1; ``OURS_BY_TASK``), messages of up to
  4 keys run as one call (``max_bundle``, the inbox serving the node with the most messages waiting), no
  trace recording. Updates: one per key, as torch's one per minibatch: the nodes outside the loop update
  after each gradient (one per key), the three inside it ('edges', 'gru_x', 'gru_h', ``LOOP_NODES``) get
  one gradient per propagation step and so update after ``STEPS`` of them.
- ours_2_workers: the setting measured before bundling: 2 workers in the "balanced" placement
  (propagation on one, GRU and readout on the other: a two-stage pipeline), 4 keys in flight, no bundling.
- ours_per_graph: the paper's layout, one graph per key (validation keys too), with message bundling:
  ``max_active_keys`` 20 graphs in flight, each node running up to ``max_bundle`` 10 of the messages
  waiting for it as one call, one worker; every node updates once per 10 graphs' gradients (the torch
  minibatch; the loop's Linears after ``10 * STEPS``); ``ratio_per_graph_vs_dense``,
  ``ratio_per_graph_vs_scatter``.
- ours_per_graph_2_workers: the same on 2 workers in the balanced placement.

- ours_python, ours_per_graph_python: ours and ours_per_graph on the Python engine.

Engines: every side but the ``_python`` ones runs on the default engine (``engine="auto"``: the native worker
loops wherever the extension is built), so the headline ratios are the default engine's; each side records
the engine that ran (``engine``, printed in the table), and ``engine_gain`` / ``engine_gain_per_graph``
divide the default engine's throughput by the Python engine's. On the Python engine every message's glue
holds the GIL, so two worker threads on this 2-core VM take turns rather than overlap (both worker counts
are reported).
- torch_dense: minibatches padded to the largest graph, one dense (B, N, N) adjacency per edge type (the
  paper's TensorFlow baseline); node selection takes a cross-entropy over each graph's padded row of node
  scores (padding at -inf).
- torch_scatter: minibatches concatenated, messages gathered per edge and ``index_add_``-ed into targets;
  node selection is a softmax per graph segment (``segment_cross_entropy``), the readout of the regression a
  segment sum. Both torch sides take ``TORCH_BATCH`` graphs per Adam step; their minibatch tensors
  (consecutive graphs, as ours' keys) are built once before timing, as ours' keys are, and their order is
  shuffled every epoch.

Every side starts from the same weights (``TorchGGNN(seed)``, exported into our layout for ours).
torch runs with ``torch.set_num_threads(2)``. All sides train the same epochs and evaluate after each; as in
``tree_vs_torch``, ``instances_per_s`` is the median over epochs of training graphs per second (evaluation
time included), ratio = ours / theirs. ``load_average_1min`` records the machine's load before and after
(``busy`` when it exceeded the cores):
on a shared 2-core machine, other processes make torch's 2 OpenMP threads stall far more than our workers.
Our regression MAE is measured by loading our final parameters into the torch model (the runtime reports
MSE only; ``tests/bench/test_bench_dynamic.py`` shows that the two compute the same outputs).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from amp_notebook.bench.common import interleaved_runs, load_line, machine_load, median_run, report
from amp_notebook.data.graphs import (
    BABI15_FEATURE_WIDTH,
    GraphInstance,
    babi15_graphs,
    ggsnn_dataset,
)
from amp_notebook.data.molecules import BOND_TYPES, ELEMENTS, molecule_graphs
from amp_notebook.errors import SettingError

HIDDEN, STEPS = 32, 4
OPTIMIZER: dict[str, Any] = {"name": "adam", "lr": 3e-3}
# Per task, added to OPTIMIZER on every side (see the module docstring): the molecules' lr decays per epoch.
OPTIMIZER_BY_TASK: dict[str, dict[str, Any]] = {"molecules": {"lr_decay": 0.7}}
OURS: dict[str, Any] = {"mode": "amp", "workers": 1, "max_active_keys": 8, "min_update_frequency": 1,
                        "max_bundle": 4, "order": "largest_bundle", "dtype": "float32", "trace": False}  # fmt: skip
# the same on two worker threads, in the layout measured before bundling (2 stages: propagation, GRU + readout)
OURS_2_WORKERS: dict[str, Any] = {"workers": 2, "max_active_keys": 4, "max_bundle": 1, "order": "oldest_key",
                                  "placement": "balanced"}  # fmt: skip
# The molecules' regression loses accuracy to stale gradients (module docstring), and one worker gains nothing from a
# second key in flight there: on the native engine, 1 key against 2 ran 24.3k against 24.8k graphs/s (3 rounds) and
# ended at validation MAE 0.18, 0.27 and 0.18 over seeds 0-2 (sync's, and the Python engine's at 1 key, to the
# digit) against 0.25, 0.30 and 0.30 at 2 keys (mean staleness 0.5). So ours runs that task with 1 key in flight.
OURS_BY_TASK: dict[str, dict[str, Any]] = {"molecules": {"max_active_keys": 1}}
# One graph per key: 20 graphs in flight, bundles of up to 10 messages, and every node updating once per 10
# graphs' gradients (the torch minibatch). Updating after every graph with 128 graphs in flight never learned
# bAbI-15 (4.6% after 4 epochs; Adam steps on one stale graph each).
OURS_PER_GRAPH: dict[str, Any] = {"max_active_keys": 20, "max_bundle": 10, "min_update_frequency": 10,
                                  "order": "largest_bundle"}  # fmt: skip
# our sides: name -> (one graph per key?, settings over OURS and OURS_BY_TASK)
SIDES: dict[str, tuple[bool, dict[str, Any]]] = {
    "ours": (False, {}),
    "ours_2_workers": (False, OURS_2_WORKERS),
    "ours_per_graph": (True, OURS_PER_GRAPH),
    "ours_per_graph_2_workers": (True, {**OURS_PER_GRAPH, "workers": 2, "placement": "balanced"}),
    "ours_python": (False, {"engine": "python"}),
    "ours_per_graph_python": (True, {**OURS_PER_GRAPH, "engine": "python"}),
}
LOOP_NODES = ("edges", "gru_x", "gru_h")  # the parameterized nodes inside the propagation loop
GRAPHS_PER_KEY = 10  # a key is a bucket of graphs (their disjoint union): one update per TORCH_BATCH graphs
TORCH_THREADS, TORCH_BATCH, EVAL_BATCH = 2, 10, 100
# bAbI-15's target, as in Li et al. (2016) and the AMPNet paper: every validation question answered
TARGETS: dict[str, float] = {"babi15": 1.0}


def optimizer_for(task: str) -> dict[str, Any]:
    """The optimizer spec every side of ``task`` trains with: ``OPTIMIZER`` plus ``OPTIMIZER_BY_TASK[task]``."""
    return {**OPTIMIZER, **OPTIMIZER_BY_TASK.get(task, {})}


def torch_optimizer(model: Any, spec: dict[str, Any]) -> tuple[Any, float]:
    """``torch.optim.Adam`` with our Adam's settings from ``spec``, and the lr factor to apply after each epoch.

    The two take the same bias-corrected steps (eps meets sqrt(v) before the bias correction in ours, after
    it in torch: no difference at eps = 1e-8). A setting the torch side would not mirror (another optimizer;
    ``clip_norm``, which ours applies to each node's gradient on its own) is refused, not silently dropped.
    """
    import torch

    from amp_notebook.optim import Adam

    settings = {k: v for k, v in spec.items() if k != "name"}
    if spec.get("name") != "adam" or settings.get("clip_norm") is not None:
        raise SettingError("optimizer", f"torch side: mirrors Adam without clip_norm only, got {spec!r}")
    ours = Adam(**settings)  # validates the settings as our runtime would
    opt = torch.optim.Adam(model.parameters(), lr=ours.lr, betas=(ours.beta1, ours.beta2), eps=ours.eps)
    return opt, ours.lr_decay


def epochs_to_target(curve: list[float], target: float) -> int | None:
    """The first epoch (1-based) whose validation accuracy reaches ``target``; None if none does."""
    return next((epoch for epoch, value in enumerate(curve, 1) if value >= target), None)


def task_spec(task: str) -> dict[str, Any]:
    """Edge types, feature width, model task and outputs of a benchmark task."""
    if task == "babi15":
        return {"types": 4, "width": BABI15_FEATURE_WIDTH, "kind": "node_selection", "outputs": 1}
    if task == "molecules":
        return {"types": len(BOND_TYPES), "width": len(ELEMENTS), "kind": "regression", "outputs": 1}
    raise SettingError("task", f"task: expected 'babi15' or 'molecules', got {task!r}")


def make_graphs(task: str, n_train: int, n_val: int, seed: int, inflate_to: int) -> tuple[list[GraphInstance], ...]:
    if task == "babi15":
        return (babi15_graphs(n_train, seed=seed, inflate_to=inflate_to, task="node_selection"),
                babi15_graphs(n_val, seed=seed + 1, inflate_to=inflate_to, task="node_selection"))  # fmt: skip
    return molecule_graphs(n_train, seed=seed), molecule_graphs(n_val, seed=seed + 1)


def ours(
    task: str, train_g: list[GraphInstance], val_g: list[GraphInstance], epochs: int, seed: int, side: str = "ours"
) -> dict[str, Any]:  # fmt: skip
    """One of our sides (``SIDES``): keys of ``GRAPHS_PER_KEY`` graphs, or one graph per key."""
    from amp_notebook.models.ggsnn import ggsnn
    from amp_notebook.runtime.train import TrainResult, train

    spec = task_spec(task)
    per_graph, overrides = SIDES[side]
    settings = {**OURS, **OURS_BY_TASK.get(task, {}), **overrides}
    classes = spec["outputs"] if spec["kind"] == "classification" else None
    per_key = 1 if per_graph else GRAPHS_PER_KEY
    data = ggsnn_dataset(
        train_g, spec["types"], spec["kind"], STEPS, val_instances=val_g, num_classes=classes,
        graphs_per_key=per_key, val_graphs_per_key=1 if per_graph else EVAL_BATCH,
    )  # fmt: skip
    graph = ggsnn(spec["types"], spec["width"], HIDDEN, STEPS, spec["kind"], classes)
    for name in LOOP_NODES:  # each gets one gradient per propagation step of a key: update once per key's worth
        graph.nodes[name].min_update_frequency = STEPS * settings["min_update_frequency"]
    start_from = _torch_model(task, seed).export()  # the torch sides' initial weights: every side starts alike
    optimizer = optimizer_for(task)
    r = train(graph, data, epochs=epochs, seed=seed, optimizer=optimizer, params=start_from, **settings)
    assert isinstance(r, TrainResult)
    per_epoch, previous = [], 0.0
    for stats in r.history:  # every epoch trains every graph once
        per_epoch.append(len(train_g) / (stats.end_s - previous))
        previous = stats.end_s
    if spec["kind"] != "regression":
        metric, curve_metric = r.history[-1].val_accuracy, "val accuracy"
        curve = [e.val_accuracy for e in r.history]
    else:
        model = _torch_model(task, seed)
        model.load(r.params)
        val_batches = [_prepare(task, val_g[i : i + EVAL_BATCH], True) for i in range(0, len(val_g), EVAL_BATCH)]
        metric, curve = _evaluate(task, model, val_batches, scatter=True), [e.val_loss for e in r.history]
        curve_metric = "val MSE (the runtime's loss; MAE only after the last epoch)"
    return {
        "instances_per_s": statistics.median(per_epoch), "epoch_instances_per_s": per_epoch,
        "overall_instances_per_s": r.train_instances_per_s, "final_metric": metric, "curve": curve,
        "curve_metric": curve_metric, "wall_s": r.wall_s, "epochs_run": len(r.history), "engine": r.engine,
        "settings": {**settings, "graphs_per_key": per_key, "optimizer": optimizer,
                     "loop_nodes_min_update_frequency": STEPS * settings["min_update_frequency"]},
    }  # fmt: skip


def _torch_model(task: str, seed: int) -> Any:
    from amp_notebook.bench.torch_baselines import TorchGGNN

    spec = task_spec(task)
    selection = spec["kind"] == "node_selection"
    return TorchGGNN(spec["types"], spec["width"], HIDDEN, STEPS, spec["outputs"], seed=seed, node_selection=selection)


def _prepare(task: str, graphs: list[GraphInstance], scatter: bool) -> dict[str, Any]:
    """One minibatch's tensors (built once, before timing, as ours builds its keys once)."""
    import torch

    from amp_notebook.bench import torch_baselines as tb

    kind = task_spec(task)["kind"]
    batch = tb.scatter_batch(graphs) if scatter else tb.dense_batch(graphs, task_spec(task)["types"])
    prepared: dict[str, Any] = {"batch": batch, "n": len(graphs)}
    if kind == "regression":
        prepared["targets"] = torch.tensor([float(g.target) for g in graphs])
    else:
        prepared["targets"] = torch.tensor([int(g.target) for g in graphs])
    if kind == "node_selection" and scatter:  # targets as rows of the concatenated nodes
        prepared["offsets"] = torch.tensor(np.cumsum([0] + [g.num_nodes for g in graphs[:-1]]))
    return prepared


def _loss_and_correct(task: str, model: Any, prepared: dict[str, Any], scatter: bool) -> tuple[Any, float]:
    """The minibatch's mean loss and, but for regression, how many of its graphs the model gets right."""
    import torch

    from amp_notebook.bench import torch_baselines as tb

    kind = task_spec(task)["kind"]
    batch, targets = prepared["batch"], prepared["targets"]
    out = tb.scatter_forward(model, batch) if scatter else tb.dense_forward(model, batch)
    if kind == "regression":
        return torch.nn.functional.mse_loss(out[:, 0], targets.to(out.dtype)), float("nan")
    if kind == "node_selection" and scatter:
        loss, correct = tb.segment_cross_entropy(out, batch.node_graph, targets + prepared["offsets"], prepared["n"])
        return loss, float(correct)
    # classification logits (B, classes), or node selection logits (B, N) over each padded graph's nodes
    return torch.nn.functional.cross_entropy(out, targets), float((out.detach().argmax(1) == targets).sum())


def _evaluate(task: str, model: Any, batches: list[dict[str, Any]], scatter: bool) -> float:
    """Validation accuracy (classification, node selection) or mean absolute error (regression)."""
    import torch

    from amp_notebook.bench import torch_baselines as tb

    total, n = 0.0, 0
    with torch.no_grad():
        for prepared in batches:
            n += prepared["n"]
            if task_spec(task)["kind"] != "regression":
                total += _loss_and_correct(task, model, prepared, scatter)[1]
                continue
            batch = prepared["batch"]
            out = tb.scatter_forward(model, batch) if scatter else tb.dense_forward(model, batch)
            total += float((out.float()[:, 0] - prepared["targets"].float()).abs().sum())
    return total / max(n, 1)


def torch_side(
    task: str, train_g: list[GraphInstance], val_g: list[GraphInstance], epochs: int, seed: int, scatter: bool
) -> dict[str, Any]:
    import torch

    torch.set_num_threads(TORCH_THREADS)
    model = _torch_model(task, seed)
    optimizer = optimizer_for(task)
    opt, lr_decay = torch_optimizer(model, optimizer)
    # minibatches of consecutive graphs built once, before timing, as ours builds its keys once; their
    # order is shuffled every epoch
    batches = [_prepare(task, train_g[i : i + TORCH_BATCH], scatter) for i in range(0, len(train_g), TORCH_BATCH)]
    val_batches = [_prepare(task, val_g[i : i + EVAL_BATCH], scatter) for i in range(0, len(val_g), EVAL_BATCH)]
    _loss_and_correct(task, model, batches[0], scatter)[0].backward()  # warm-up
    rng = np.random.default_rng(seed)
    per_epoch: list[float] = []
    curve: list[float] = []
    start = time.perf_counter()
    for _ in range(epochs):
        epoch_start = time.perf_counter()
        for j in rng.permutation(len(batches)):
            opt.zero_grad()
            _loss_and_correct(task, model, batches[j], scatter)[0].backward()
            opt.step()
        for group in opt.param_groups:  # as our runtime's Optimizer.end_epoch, after each epoch
            group["lr"] *= lr_decay
        curve.append(_evaluate(task, model, val_batches, scatter))
        per_epoch.append(len(train_g) / (time.perf_counter() - epoch_start))
    wall = time.perf_counter() - start
    return {
        "instances_per_s": statistics.median(per_epoch), "epoch_instances_per_s": per_epoch,
        "overall_instances_per_s": epochs * len(train_g) / wall, "final_metric": curve[-1], "curve": curve,
        "curve_metric": "val MAE" if task_spec(task)["kind"] == "regression" else "val accuracy",
        "wall_s": wall, "epochs_run": epochs,
        "settings": {"threads": TORCH_THREADS, "batch_graphs": TORCH_BATCH, "optimizer": optimizer,
                     "method": "scatter / index_add_" if scatter else "dense padded adjacency",
                     "torch": torch.__version__},
    }  # fmt: skip


def compare(
    task: str, n_train: int, n_val: int, epochs: int, seed: int, inflate_to: int, repeats: int = 3
) -> dict[str, Any]:  # fmt: skip
    """All three sides on one task, ``repeats`` times each, interleaved (the order flips every round, see
    ``interleaved_medians``); prints a table and returns the figures. Each side is reported by its run of
    median throughput (lower middle for an even count), with every run's throughput and final metric beside
    it; the ratios are of the median throughputs, and ``ratio_vs_dense_per_round`` pairs the runs of a round.
    """
    train_g, val_g = make_graphs(task, n_train, n_val, seed, inflate_to)
    load_before = machine_load()["after"]

    def our_side(name: str) -> Callable[[], dict[str, Any]]:
        return lambda: ours(task, train_g, val_g, epochs, seed, name)

    sides: dict[str, Callable[[], dict[str, Any]]] = {name: our_side(name) for name in SIDES}
    sides["torch_dense"] = lambda: torch_side(task, train_g, val_g, epochs, seed, scatter=False)
    sides["torch_scatter"] = lambda: torch_side(task, train_g, val_g, epochs, seed, scatter=True)
    runs = interleaved_runs(repeats, sides)
    load = machine_load(load_before)
    medians = {name: median_run(runs[name]) for name in sides}
    a, per_graph, dense, scatter = (medians[n] for n in ("ours", "ours_per_graph", "torch_dense", "torch_scatter"))
    metric = "val MAE" if task_spec(task)["kind"] == "regression" else "val accuracy"
    target = TARGETS.get(task)
    if target is not None:
        for side in medians.values():
            side["epochs_to_target"] = epochs_to_target(side["curve"], target)
            side["reached_target"] = side["epochs_to_target"] is not None
    pairs = zip(runs["ours"], runs["torch_dense"], strict=True)
    per_round = [o["instances_per_s"] / d["instances_per_s"] for o, d in pairs]
    result = {
        **medians,
        "ratio_vs_dense": a["instances_per_s"] / dense["instances_per_s"],
        "ratio_2_workers_vs_dense": medians["ours_2_workers"]["instances_per_s"] / dense["instances_per_s"],
        "ratio_per_graph_2_workers_vs_dense": medians["ours_per_graph_2_workers"]["instances_per_s"]
        / dense["instances_per_s"],
        "ratio_vs_scatter": a["instances_per_s"] / scatter["instances_per_s"],
        "ratio_per_graph_vs_dense": per_graph["instances_per_s"] / dense["instances_per_s"],
        "ratio_per_graph_vs_scatter": per_graph["instances_per_s"] / scatter["instances_per_s"],
        "engine_gain": a["instances_per_s"] / medians["ours_python"]["instances_per_s"],
        "engine_gain_per_graph": per_graph["instances_per_s"] / medians["ours_per_graph_python"]["instances_per_s"],
        "ratio_vs_dense_per_round": per_round, "repeats": repeats,
        "task": task, "final_metric_name": metric, "target_metric": target, "n_train": n_train, "n_val": n_val,
        "epochs": epochs, "seed": seed, "model": {"hidden": HIDDEN, "steps": STEPS},
        "load_average_1min": load,
        **({"inflate_to": inflate_to} if task == "babi15" else {}),
    }  # fmt: skip
    rows: list[tuple[str, Any]] = [(task, f"graphs/s (median epoch)   {metric}   epochs to {target}")]
    for name, side in (("ours: 10 graphs per key, 1 worker", a),
                       ("ours: 10 graphs per key, 2 workers", medians["ours_2_workers"]),
                       ("ours: one graph per key, bundled, 1 worker", per_graph),
                       ("ours: one graph per key, bundled, 2 workers", medians["ours_per_graph_2_workers"]),
                       ("ours: 10 graphs per key, 1 worker", medians["ours_python"]),
                       ("ours: one graph per key, bundled, 1 worker", medians["ours_per_graph_python"]),
                       ("torch dense", dense), ("torch scatter", scatter)):  # fmt: skip
        reached = side.get("epochs_to_target", "-")
        label = f"{name} [{side['engine']}]" if "engine" in side else name
        rows.append((label, f"{side['instances_per_s']:>10.0f}   {side['final_metric']:>18.4f}   {reached}"))
    rows += [("ours / torch dense", f"{result['ratio_vs_dense']:.2f} (rounds: "
              f"{', '.join(f'{r:.2f}' for r in per_round)})"),
             ("ours / torch scatter", f"{result['ratio_vs_scatter']:.2f}"),
             ("ours one graph per key / torch dense, scatter", f"{result['ratio_per_graph_vs_dense']:.2f}, "
              f"{result['ratio_per_graph_vs_scatter']:.2f}"),
             ("default engine / Python engine", f"10 graphs per key {result['engine_gain']:.2f}, one graph per "
              f"key {result['engine_gain_per_graph']:.2f}"),
             ("runs per side", f"{repeats}, interleaved; medians shown"), load_line(load)]  # fmt: skip
    print(report(rows))
    return result


def run(
    quick: bool = False, n_train: int = 2000, n_val: int = 500, epochs: int = 4, seed: int = 0, inflate_to: int = 54
) -> dict[str, Any]:  # fmt: skip
    """bAbI-15 at the top level of the result; a full run adds ``"molecules"`` (the same keys, regression)."""
    if quick:
        return compare("babi15", 500, 100, 3, seed, inflate_to, repeats=1)  # as the CI-sized convergence test
    result = compare("babi15", n_train, n_val, epochs, seed, inflate_to)
    result["molecules"] = compare("molecules", n_train, n_val, epochs, seed, inflate_to)
    return result
