"""The model zoo's registry: one entry per model, the same names everywhere, data and settings that fit.

Each entry's graph is built for its own small dataset and must validate and accept that data; its
recommended settings must be ones ``train`` accepts (a two-key run with them); the builder's model menu
and the command line must read their names and defaults from the registry. That the settings and the
plain defaults *learn* is the slow tier's job (``test_defaults_learn.py``).
"""

from __future__ import annotations

import argparse
import re

import numpy as np
import pytest

from amp_notebook import cli_train
from amp_notebook.data import Dataset
from amp_notebook.errors import AmpError
from amp_notebook.models import zoo
from amp_notebook.runtime.train import TrainResult, train
from amp_notebook.ui.builder_model import ZOO_MODELS, BuilderError, BuilderModel


@pytest.fixture(scope="module", params=zoo.NAMES)
def entry_and_data(request: pytest.FixtureRequest) -> tuple[zoo.ZooModel, Dataset]:
    entry = zoo.get(request.param)
    return entry, entry.dataset("small", seed=0)


def test_names_are_lowercase_hyphenated_and_their_underscore_spelling_is_an_alias() -> None:
    assert len(set(zoo.NAMES)) == len(zoo.NAMES) >= 8
    for name in zoo.NAMES:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name), name
        assert zoo.get(name.replace("-", "_")) is zoo.get(name)
        assert zoo.canonical(name.replace("-", "_")) == name
    assert zoo.get("ggsnn-node-selection") is zoo.get("ggsnn") is zoo.get("ggsnn_node_selection")


def test_an_unknown_name_is_refused_with_the_list_of_models() -> None:
    with pytest.raises(zoo.ZooError, match=r"unknown zoo model 'resnet'; the zoo has \['mlp', 'rnn'") as info:
        zoo.get("resnet")
    assert isinstance(info.value, AmpError) and isinstance(info.value, ValueError)
    with pytest.raises(zoo.ZooError, match=r"no dataset size 'huge'"):
        zoo.get("rnn").dataset("huge")
    with pytest.raises(zoo.ZooError, match=r"one size; leave out n_train"):
        zoo.get("mlp").dataset(n_train=100)


def test_each_graph_validates_with_the_recommended_per_node_frequencies(entry_and_data) -> None:
    entry, data = entry_and_data
    graph = entry.graph(data)
    graph.validate(require_loss=True)
    per_node = {n: graph.nodes[n].min_update_frequency for n in graph.parameterized()}
    for node, frequency in entry.settings.node_min_update_frequency.items():
        assert per_node[node] == frequency, (entry.name, node)
    assert len(data.train) > 0 and len(data.val) > 0


def test_datasets_are_seeded_and_sized(entry_and_data) -> None:
    entry, data = entry_and_data
    again = entry.dataset("small", seed=0)
    first, repeat = data.train[0].inputs, again.train[0].inputs
    assert first.keys() == repeat.keys()
    assert all(np.array_equal(first[k], repeat[k]) for k in first)
    if entry.sizes:
        n_train, n_val = entry.sizes["small"]
        assert data.train_instances == n_train and data.val_instances == n_val
        assert entry.sizes["default"][0] > n_train


def test_recommended_settings_run_on_the_entrys_own_data(entry_and_data) -> None:
    entry, data = entry_and_data
    few = Dataset(data.name, data.train[:2], data.val[:1], data.num_classes, data.meta)
    kwargs = {**entry.settings.train_kwargs(), "epochs": 1}
    result = train(entry.graph(data), few, seed=0, **kwargs)
    assert isinstance(result, TrainResult) and len(result.history) == 1


def test_the_builder_and_the_command_line_read_the_registry() -> None:
    assert tuple(ZOO_MODELS) == zoo.NAMES
    builder = BuilderModel()
    builder.load_model("tree_lstm")  # the underscore spelling still loads
    assert builder.graph.nodes["embed"].min_update_frequency == 1000
    with pytest.raises(BuilderError, match=r"unknown zoo model 'resnet'"):
        builder.load_model("resnet")
    parser = argparse.ArgumentParser()
    cli_train.add_train_arguments(parser)
    for name in zoo.NAMES:
        args = parser.parse_args(["--model", name.replace("-", "_")])  # the underscore spelling: the same model
        assert args.model == name
        settings = cli_train.settings_for(args)
        assert settings == {**settings, **zoo.get(name).settings.train_kwargs()}  # every recommended setting
