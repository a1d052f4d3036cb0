"""The model zoo's registry: every zoo model by name, with the data it learns from and settings that learn.

One entry per model holds what the command line, the graph builder and Python need to train it out of the
box, so each fact lives here once:

* ``name``: the one spelling used everywhere (``amp-notebook train --model tree-lstm``, the builder's model
  menu, ``zoo.get("tree-lstm")``); the same name with ``_`` for ``-`` is accepted as an alias, so
  ``zoo.get("tree_lstm")`` finds the same entry;
* ``graph(data)``: the model's IR graph, sized for ``data`` (vocabularies, feature widths), with the
  recommended per-node ``min_update_frequency`` values set on its nodes;
* ``dataset(size, seed)``: generated data, seeded, at the ``"default"`` size (what ``amp-notebook train``
  uses) or a ``"small"`` one (seconds per epoch; what tests and the builder's first run use);
* ``settings``: the recommended training settings (optimizer, keys in flight, update frequencies,
  bundling, epochs): ``amp.train(graph, data, **entry.settings.train_kwargs())``.

``amp.train`` with no settings at all also learns on every entry (its defaults are Adam, which takes
bounded steps however many partial gradients a node receives per key); the recommended settings learn
faster. The documentation's command-line page (docs/cli.md) says what each reaches with them.

    from amp_notebook.models import zoo

    entry = zoo.get("rnn")
    data = entry.dataset("small", seed=0)
    result = amp.train(entry.graph(data), data, **entry.settings.train_kwargs())
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from amp_notebook.data.batch import Dataset
from amp_notebook.errors import AmpError
from amp_notebook.ir.graph import Graph

SIZES = ("default", "small")


class ZooError(AmpError, ValueError):
    """An unknown zoo model name or dataset size."""


@dataclass(frozen=True)
class Settings:
    """Training settings that learn: the keywords of ``amp.train`` (``train_kwargs``), plus the per-node
    update frequencies that ``ZooModel.graph`` sets on the graph's nodes (a node's own value wins over the
    run's ``min_update_frequency``)."""

    optimizer: Mapping[str, Any]
    max_active_keys: int = 4
    min_update_frequency: int = 1
    node_min_update_frequency: Mapping[str, int] = field(default_factory=dict)
    max_bundle: int | None = None  # None: train's default (bundles of up to 16 in amp mode)
    epochs: int = 3
    workers: int = 2
    mode: str = "amp"

    def train_kwargs(self) -> dict[str, Any]:
        """``amp.train`` keywords: ``amp.train(graph, data, **settings.train_kwargs(), seed=1)``."""
        kwargs = {
            "workers": self.workers, "mode": self.mode, "max_active_keys": self.max_active_keys,
            "min_update_frequency": self.min_update_frequency, "optimizer": dict(self.optimizer),
            "epochs": self.epochs,
        }  # fmt: skip
        return kwargs if self.max_bundle is None else {**kwargs, "max_bundle": self.max_bundle}


@dataclass(frozen=True)
class ZooModel:
    """One zoo model: how to build its graph and its data, and the settings it learns with."""

    name: str
    description: str
    make_graph: Callable[[Dataset], Graph]
    make_dataset: Callable[[int, int, int], Dataset]  # (n_train, n_val, seed)
    sizes: Mapping[str, tuple[int, int]]  # size -> (n_train, n_val), instances; empty: the data has one size
    settings: Settings
    aliases: tuple[str, ...] = ()

    def dataset(self, size: str = "default", seed: int = 0, *, n_train: int | None = None,
                n_val: int | None = None) -> Dataset:  # fmt: skip
        """Generated data at ``size`` (``"default"`` or ``"small"``), seeded; ``n_train``/``n_val`` override
        the size's instance counts (the MLP's embedded digits have one size)."""
        if size not in SIZES:
            raise ZooError(f"zoo model {self.name!r}: no dataset size {size!r}; sizes: {list(SIZES)}")
        if not self.sizes:
            if n_train is not None or n_val is not None:
                raise ZooError(f"zoo model {self.name!r}: its data has one size; leave out n_train and n_val")
            return self.make_dataset(0, 0, seed)
        default_train, default_val = self.sizes[size]
        return self.make_dataset(n_train or default_train, n_val or default_val, seed)

    def graph(self, data: Dataset | None = None) -> Graph:
        """The model's graph sized for ``data`` (default: the small dataset of seed 0), with the recommended
        per-node update frequencies set."""
        graph = self.make_graph(data if data is not None else self.dataset("small"))
        for node, frequency in self.settings.node_min_update_frequency.items():
            graph.nodes[node].min_update_frequency = frequency
        return graph


def _digits(batch_size: int) -> Callable[[int, int, int], Dataset]:
    def make(n_train: int, n_val: int, seed: int) -> Dataset:
        from amp_notebook.data.digits import load_digits_dataset

        return load_digits_dataset(batch_size=batch_size, seed=seed)  # the embedded digits: one size

    return make


def _lists(n_train: int, n_val: int, seed: int) -> Dataset:
    from amp_notebook.data.list_reduction import list_reduction_dataset

    return list_reduction_dataset(n_train=n_train, n_val=n_val, seed=seed)


def _trees(n_train: int, n_val: int, seed: int) -> Dataset:
    from amp_notebook.data.sentiment import sentiment_tree_dataset

    return sentiment_tree_dataset(n_train=n_train, n_val=n_val, seed=seed)


def _sentences(n_train: int, n_val: int, seed: int) -> Dataset:
    from amp_notebook.data.ner import synthetic_ner_dataset

    return synthetic_ner_dataset(n_train=n_train, n_val=n_val, seed=seed)


DIGITS_PER_KEY = 25
GGSNN_STEPS = 4
BABI15_NODES = 8  # nodes per bAbI-15 graph: the original task's size


def _babi15(task: str) -> Callable[[int, int, int], Dataset]:
    def make(n_train: int, n_val: int, seed: int) -> Dataset:
        from amp_notebook.data.graphs import BABI15_TYPES, babi15_graphs, ggsnn_dataset

        train = babi15_graphs(n_train, seed=seed, inflate_to=BABI15_NODES, task=task)  # type: ignore[arg-type]
        val = babi15_graphs(n_val, seed=seed + 1, inflate_to=BABI15_NODES, task=task)  # type: ignore[arg-type]
        classes = len(BABI15_TYPES) if task == "classification" else None
        return ggsnn_dataset(train, 4, task, GGSNN_STEPS, val_instances=val, num_classes=classes, name="babi15")  # type: ignore[arg-type]

    return make


def _molecules(n_train: int, n_val: int, seed: int) -> Dataset:
    from amp_notebook.data.graphs import ggsnn_dataset
    from amp_notebook.data.molecules import molecule_graphs

    train, val = molecule_graphs(n_train, seed=seed), molecule_graphs(n_val, seed=seed + 1)
    return ggsnn_dataset(train, 3, "regression", GGSNN_STEPS, val_instances=val, name="molecules")


def _ggsnn_graph(data: Dataset) -> Graph:
    from amp_notebook.models.ggsnn import ggsnn

    meta = data.meta
    task = str(meta["task"])
    classes = data.num_classes if task == "classification" else None
    return ggsnn(int(meta["n_edge_types"]), int(meta["feature_width"]), steps=int(meta["steps"]), task=task,  # type: ignore[call-overload]
                 classes=classes)  # fmt: skip


def _mlp_graph(data: Dataset) -> Graph:
    from amp_notebook.models.mlp import mlp

    return mlp(input_width=int(data.meta["input_width"]), hidden=784)  # type: ignore[call-overload]


def _rnn_graph(replicas: int) -> Callable[[Dataset], Graph]:
    def make(data: Dataset) -> Graph:
        from amp_notebook.models.rnn import rnn

        return rnn(vocab_size=int(data.meta["vocab_size"]), replicas=replicas)  # type: ignore[call-overload]

    return make


def _tree_lstm_graph(data: Dataset) -> Graph:
    from amp_notebook.models.tree_lstm import tree_lstm

    return tree_lstm(int(data.meta["vocab_size"]))  # type: ignore[call-overload]


def _tagger_graph(data: Dataset) -> Graph:
    from amp_notebook.models.bilstm_tagger import bilstm_tagger

    sizes = {k: int(data.meta[k]) for k in ("vocab_size", "char_vocab_size", "num_tags")}  # type: ignore[call-overload]
    return bilstm_tagger(**sizes, update_frequency=None)  # the registry sets the per-node values


def _tree_lstm_frequencies() -> dict[str, int]:
    from amp_notebook.models.tree_lstm import PAPER_EMBED_UPDATE_FREQUENCY, PAPER_UPDATE_FREQUENCY, tree_lstm

    return {
        name: PAPER_EMBED_UPDATE_FREQUENCY if name == "embed" else PAPER_UPDATE_FREQUENCY
        for name in tree_lstm(1).parameterized()
    }


def _tagger_frequencies() -> dict[str, int]:
    from amp_notebook.models.bilstm_tagger import UPDATE_FREQUENCY

    return dict(UPDATE_FREQUENCY)


RNN_SETTINGS = Settings(
    optimizer={"name": "adam", "lr": 3e-3, "clip_norm": 5.0, "lr_decay": 0.85}, min_update_frequency=10
)
GGSNN_SETTINGS = Settings(optimizer={"name": "adam", "lr": 3e-3})
LISTS = {"default": (100_000, 10_000), "small": (20_000, 1_000)}

ENTRIES: tuple[ZooModel, ...] = (
    ZooModel(
        "mlp", "the paper's 4-layer MLP (784 hidden) on the 8x8 digits in keys of 25 images",
        _mlp_graph, _digits(DIGITS_PER_KEY), {},
        Settings(optimizer={"name": "adam", "lr": 1e-3, "lr_decay": 0.7}),
    ),
    ZooModel(
        "rnn", "the variable-length RNN of the paper's Fig. 2 on list reduction (keys of 100 lists)",
        _rnn_graph(1), _lists, LISTS, RNN_SETTINGS,
    ),
    ZooModel(
        "rnn-x2", "the list-reduction RNN with its step Linear replicated twice (keys alternate between copies)",
        _rnn_graph(2), _lists, LISTS, RNN_SETTINGS,
    ),
    ZooModel(
        "tree-lstm", "the binary Tree-LSTM on synthetic sentiment trees, one tree per key, a loss at every node",
        _tree_lstm_graph, _trees, {"default": (2_000, 500), "small": (600, 100)},
        Settings(optimizer={"name": "adam", "lr": 0.01}, node_min_update_frequency=_tree_lstm_frequencies()),
    ),
    ZooModel(
        "ggsnn", "a gated graph network answering bAbI task 15 by node selection, one graph per key",
        _ggsnn_graph, _babi15("node_selection"), {"default": (1_000, 200), "small": (300, 100)}, GGSNN_SETTINGS,
        aliases=("ggsnn-node-selection",),
    ),
    ZooModel(
        "ggsnn-classification", "the gated graph network classifying bAbI-15 graphs by the answer's type",
        _ggsnn_graph, _babi15("classification"), {"default": (3_000, 500), "small": (1_500, 300)}, GGSNN_SETTINGS,
    ),
    ZooModel(
        "ggsnn-regression", "the gated graph network regressing a property of generated molecules",
        _ggsnn_graph, _molecules, {"default": (1_000, 200), "small": (500, 100)}, GGSNN_SETTINGS,
    ),
    ZooModel(
        "bilstm-tagger", "the BiLSTM tagger with a character model on synthetic NER sentences, one per key",
        _tagger_graph, _sentences, {"default": (1_000, 200), "small": (200, 60)},
        Settings(
            optimizer={"name": "adam", "lr": 3e-3, "clip_norm": 5.0}, node_min_update_frequency=_tagger_frequencies()
        ),
    ),
)  # fmt: skip

ZOO: Mapping[str, ZooModel] = MappingProxyType({entry.name: entry for entry in ENTRIES})
NAMES: tuple[str, ...] = tuple(ZOO)
_ALIASES = {
    alias: entry.name
    for entry in ENTRIES
    for alias in {entry.name.replace("-", "_"), *entry.aliases, *(a.replace("-", "_") for a in entry.aliases)}
}


def get(name: str) -> ZooModel:
    """The zoo entry called ``name`` (or its ``_`` spelling, or an alias)."""
    entry = ZOO.get(name) or ZOO.get(_ALIASES.get(name, ""))
    if entry is None:
        raise ZooError(f"unknown zoo model {name!r}; the zoo has {list(NAMES)}")
    return entry


def canonical(name: str) -> str:
    """The zoo's own spelling of ``name`` (``tree_lstm`` -> ``tree-lstm``)."""
    return get(name).name


__all__ = [
    "DIGITS_PER_KEY", "ENTRIES", "NAMES", "SIZES", "ZOO", "Settings", "ZooError", "ZooModel", "canonical", "get",
]  # fmt: skip
