"""The paper's models on embedded data, as the reproduction runs them: graph, data, settings and a PyTorch peer.

One :class:`Workload` per row of the paper's Table 2 (``mlp``, ``rnn``, ``rnn-2-replicas``, ``tree-lstm``,
``ggsnn``, ``bilstm-tagger``), in the paper's layout: the MLP on keys of 100 digits, the list-reduction
RNN on buckets of up to 100 equal-length lists (with the step Linear replicated twice behind Cond/Phi for
``rnn-2-replicas``), the Tree-LSTM one tree per key with the paper's update frequencies (embedding 1000,
the other nodes 50), the GGSNN one bAbI-15 graph per key (54 nodes, node selection) and the BiLSTM tagger
one sentence per key. ``quick=True`` gives the same models on a few keys (a smoke test: figures mean
nothing).

Every peer is PyTorch 2 on this machine with 2 intra-op threads (the same 2 cores), on the same data,
reusing the benchmark modules' peers (``bench/rnn_vs_torch``, ``bench/tree_vs_torch``,
``bench/ggsnn_vs_torch``, ``bench/tagger_vs_torch`` where it exists; the MLP's is ``bench/peers.py``);
each returns training instances per second of one epoch. torch is imported only when a peer runs.

The BiLSTM tagger is looked up at run time (``amp_notebook.models.bilstm_tagger`` and
``amp_notebook.data.ner.synthetic_ner_dataset``): where it is missing, :func:`workload` raises
:class:`MissingModelError` and the experiments report the row as not available.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from amp_notebook.data.batch import Dataset
from amp_notebook.errors import AmpError, SettingError
from amp_notebook.ir.graph import Graph

MODELS = ("mlp", "rnn", "rnn-2-replicas", "tree-lstm", "ggsnn", "bilstm-tagger")
PEER_THREADS = 2


class MissingModelError(AmpError, LookupError):
    """A model of the paper that this checkout does not have yet."""


@dataclass
class Workload:
    """A model of the paper ready to train: its graph, data, optimizer and run settings, and its peer."""

    name: str
    graph: Graph
    data: Dataset
    optimizer: dict[str, Any]
    settings: dict[str, Any]  # train() keyword arguments besides the knobs an experiment turns
    layout: str  # what one key holds, in words
    peer: Callable[[], float] | None = None  # PyTorch: training instances per second of one epoch
    peer_name: str = ""
    target: float | None = None  # validation accuracy Fig. 6 and Fig. 5 aim at
    meta: dict[str, Any] = field(default_factory=dict)


def workload(name: str, quick: bool = False, seed: int = 0) -> Workload:
    """The workload of one Table 2 row (module docstring); ``quick``: a few keys only."""
    builders: dict[str, Callable[[bool, int], Workload]] = {
        "mlp": _mlp, "rnn": _rnn, "rnn-2-replicas": _rnn_replicas, "tree-lstm": _tree_lstm, "ggsnn": _ggsnn,
        "bilstm-tagger": _tagger,
    }  # fmt: skip
    if name not in builders:
        raise SettingError("model", f"reproduce: unknown model {name!r}; expected one of {MODELS}")
    return builders[name](quick, seed)


def available(models: Sequence[str], quick: bool, seed: int, notes: dict[str, str]) -> Iterator[Workload]:
    """The workloads of ``models`` that this checkout has, in order; a missing one is noted in ``notes``."""
    for name in models:
        try:
            yield workload(name, quick=quick, seed=seed)
        except MissingModelError as exc:
            notes[name] = str(exc)


def _mlp(quick: bool, seed: int) -> Workload:
    from amp_notebook.bench.common import repeat_epochs
    from amp_notebook.data.digits import load_digits_dataset
    from amp_notebook.models.mlp import mlp

    digits = load_digits_dataset(batch_size=100, seed=seed)
    data = repeat_epochs(digits, 1 if quick else 8)
    data = Dataset(data.name, data.train, digits.val, digits.num_classes, digits.meta)
    optimizer = {"name": "sgd", "lr": 0.05}

    def peer() -> float:
        from amp_notebook.bench.peers import torch_mlp

        return torch_mlp(data, hidden=784, lr=optimizer["lr"], seed=seed, threads=PEER_THREADS)

    return Workload(
        "mlp", mlp(input_width=int(digits.meta["input_width"]), hidden=784), data, optimizer,  # type: ignore[call-overload]
        {"min_update_frequency": 1}, "100 digits per key (the paper's 4-layer MLP, 784 hidden)", peer,
        "PyTorch MLP, minibatches of 100", target=0.9,
    )  # fmt: skip


def _rnn_data(quick: bool, seed: int) -> Dataset:
    from amp_notebook.data.list_reduction import list_reduction_dataset

    n_train, n_val = (2_000, 200) if quick else (20_000, 2_000)
    return list_reduction_dataset(n_train=n_train, n_val=n_val, seed=seed)


RNN_OPTIMIZER = {"name": "adam", "lr": 3e-3, "clip_norm": 5.0, "lr_decay": 0.85}


def _rnn_peer(data: Dataset, seed: int) -> Callable[[], float]:
    def peer() -> float:
        from amp_notebook.bench.rnn_vs_torch import torch_baseline

        one_epoch = Dataset(data.name, data.train, data.val[:1], data.num_classes, data.meta)  # evaluation ~free
        return float(torch_baseline(one_epoch, target=2.0, max_epochs=1, seed=seed)["instances_per_s"])

    return peer


def _rnn(quick: bool, seed: int, replicas: int = 1) -> Workload:
    from amp_notebook.models.rnn import rnn

    data = _rnn_data(quick, seed)
    name = "rnn" if replicas == 1 else f"rnn-{replicas}-replicas"
    layout = "a bucket of up to 100 equal-length lists per key" + (
        "" if replicas == 1 else f"; the step Linear replicated {replicas}x (key % {replicas}), averaged each epoch"
    )
    return Workload(
        name, rnn(replicas=replicas), data, dict(RNN_OPTIMIZER), {"min_update_frequency": 10}, layout,
        _rnn_peer(data, seed), "PyTorch nn.RNN, packed, minibatches of 100", target=0.96,
    )  # fmt: skip


def _rnn_replicas(quick: bool, seed: int) -> Workload:
    return _rnn(quick, seed, replicas=2)


def _tree_lstm(quick: bool, seed: int) -> Workload:
    from amp_notebook.bench import tree_vs_torch as tvt
    from amp_notebook.data.sentiment import sentiment_tree_dataset
    from amp_notebook.models.tree_lstm import tree_lstm

    n_train, n_val = (60, 20) if quick else (600, 100)
    data = sentiment_tree_dataset(n_train=n_train, n_val=n_val, seed=seed)
    vocab = int(data.meta["vocab_size"])  # type: ignore[call-overload]

    def peer() -> float:
        small_val = Dataset(data.name, data.train, data.val[:1], data.num_classes, data.meta)
        return float(tvt.torch_side(small_val, 1, seed, batched=False)["instances_per_s"])

    return Workload(
        "tree-lstm", tree_lstm(vocab, tvt.EMBED, tvt.HIDDEN, tvt.CLASSES), data, dict(tvt.OPTIMIZER),
        {"min_update_frequency": 1}, "one tree per key (embedding updates every 1000 gradients, the rest every 50)",
        peer, "PyTorch eager, one tree at a time, 25 per step", target=0.8,
    )  # fmt: skip


def _ggsnn(quick: bool, seed: int) -> Workload:
    from amp_notebook.bench import ggsnn_vs_torch as gvt
    from amp_notebook.data.graphs import BABI15_FEATURE_WIDTH, babi15_graphs, ggsnn_dataset
    from amp_notebook.models.ggsnn import ggsnn

    n_train, n_val = (40, 20) if quick else (600, 100)
    train_g = babi15_graphs(n_train, seed=seed, inflate_to=54, task="node_selection")
    val_g = babi15_graphs(n_val, seed=seed + 1, inflate_to=54, task="node_selection")
    data = ggsnn_dataset(train_g, 4, "node_selection", gvt.STEPS, val_instances=val_g, name="babi15",
                         val_graphs_per_key=gvt.EVAL_BATCH)  # fmt: skip
    graph = ggsnn(4, BABI15_FEATURE_WIDTH, gvt.HIDDEN, gvt.STEPS, "node_selection")
    for node in gvt.LOOP_NODES:  # one gradient per propagation step: update once per key's worth
        graph.nodes[node].min_update_frequency = gvt.STEPS

    def peer() -> float:
        return float(gvt.torch_side("babi15", train_g, val_g[:1], 1, seed, scatter=False)["instances_per_s"])

    return Workload(
        "ggsnn", graph, data, gvt.optimizer_for("babi15"), {"min_update_frequency": 1},
        "one bAbI-15 graph per key (54 nodes, 4 edge types, node selection)", peer,
        "PyTorch GG-NN, dense adjacency, minibatches of 10", target=0.99,
    )  # fmt: skip


def _tagger(quick: bool, seed: int) -> Workload:
    try:
        models = importlib.import_module("amp_notebook.models")
        ner = importlib.import_module("amp_notebook.data.ner")
        build, dataset = models.bilstm_tagger, ner.synthetic_ner_dataset
    except (ImportError, AttributeError) as exc:
        raise MissingModelError(
            "bilstm-tagger: amp_notebook.models.bilstm_tagger / amp_notebook.data.ner.synthetic_ner_dataset are not "
            f"in this checkout ({exc}); the row is left empty until the tagger lands"
        ) from None
    n_train, n_val = (12, 6) if quick else (200, 50)  # a sentence per key runs hundreds of messages
    data = dataset(n_train=n_train, n_val=n_val, seed=seed)
    graph = build(**_tagger_sizes(data))

    peer, optimizer = None, {"name": "adam", "lr": 3e-3, "clip_norm": 5.0}
    try:  # the tagger's own benchmark holds its PyTorch peer (same model, same weights policy)
        bench = importlib.import_module("amp_notebook.bench.tagger_vs_torch")
    except ImportError:
        bench = None
    if bench is not None and hasattr(bench, "torch_side"):
        optimizer = dict(getattr(bench, "OPTIMIZER", optimizer))

        def peer() -> float:
            small_val = Dataset(data.name, data.train, data.val[:1], data.num_classes, data.meta)
            return float(bench.torch_side(small_val, 1, seed, batched=False)["instances_per_s"])

    return Workload(
        "bilstm-tagger", graph, data, optimizer, {"min_update_frequency": 1},
        "one sentence per key (Distribute by word frequency, Collect per sentence)", peer,
        "PyTorch eager, one sentence at a time" if peer else "", target=0.9,
    )  # fmt: skip


def _tagger_sizes(data: Dataset) -> dict[str, Any]:
    """The tagger builder's size arguments from the dataset's meta (whatever of them it records)."""
    keys = ("vocab_size", "char_vocab_size", "num_tags", "n_tags", "chars")
    return {k: data.meta[k] for k in keys if k in data.meta}


__all__ = ["MODELS", "MissingModelError", "Workload", "available", "workload"]
