"""Native runs against the Python engine and the reference interpreter.

In sync mode and float64 on one worker, every zoo model trains to the same parameters on the native engine,
on the Python engine and in the reference interpreter (ops with no native kernel yet run through the bridge,
and the result says which). Each zoo model's own optimizer (Adam with clip_norm and lr_decay, ...) agrees
between the engines too. Checkpoints taken on one engine resume bit for bit on either.
"""

from __future__ import annotations

import numpy as np
import pytest

from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.engine import native
from amp_notebook.engine.plan import check
from amp_notebook.engine.specs import native_kernel
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.models import zoo
from amp_notebook.runtime.reference import train_reference
from amp_notebook.runtime.train import TrainResult, train
from tests.conftest import digits_dataset

SGD = {"name": "sgd", "lr": 0.01}
GENTLE = {"ggsnn-regression": {"name": "sgd", "lr": 1e-4}}  # its targets are large: 0.01 diverges (both engines)


def few_keys(data: Dataset, train_keys: int = 6, val_keys: int = 3) -> Dataset:
    return Dataset(data.name, list(data.train[:train_keys]), list(data.val[:val_keys]), data.num_classes, data.meta)


def relative_error(actual: dict, expected: dict) -> float:
    assert set(actual) == set(expected)
    worst = 0.0
    for node, group in expected.items():
        assert set(actual[node]) == set(group), node
        for k, v in group.items():
            scale = max(float(np.max(np.abs(v))), 1e-300)
            worst = max(worst, float(np.max(np.abs(actual[node][k] - v))) / scale)
    return worst


def run(graph, data, engine: str, **settings) -> TrainResult:
    result = train(graph, data, engine=engine, dtype="float64", validate=True, **settings)
    assert isinstance(result, TrainResult) and result.engine == engine
    return result


@pytest.mark.parametrize("name", list(zoo.ZOO))
def test_every_zoo_model_trains_alike_on_both_engines_and_in_the_interpreter(name: str) -> None:
    entry = zoo.get(name)
    data = few_keys(entry.dataset("small", seed=0))
    graph = entry.graph(data)
    start = graph.init_params(1, np.float64)
    optimizer = GENTLE.get(name, SGD)
    interp = Interpreter(graph, params=start, dtype=np.float64, optimizer=optimizer)
    train_reference(interp, data, epochs=2, seed=1)
    expected = interp.params()
    settings = {"workers": 1, "mode": "sync", "epochs": 2, "seed": 1, "params": start, "optimizer": optimizer}
    python, native = run(graph, data, "python", **settings), run(graph, data, "native", **settings)
    assert relative_error(python.params, expected) <= 1e-12
    assert relative_error(native.params, expected) <= 1e-12
    assert relative_error(native.params, start) > 1e-4  # training moved them
    for a, b in zip(native.history, python.history, strict=True):
        assert a.train_loss == pytest.approx(b.train_loss, rel=1e-12)
        assert a.val_loss == pytest.approx(b.val_loss, rel=1e-12)
        assert (a.train_accuracy, a.val_accuracy) == (b.train_accuracy, b.val_accuracy)
    for moving in ("recent_loss", "recent_accuracy"):  # the live curves' averages, per report (columns on native)
        mine, theirs = getattr(native.session, moving), getattr(python.session, moving)
        assert (mine is None) == (theirs is None), moving
        assert mine is None or mine == pytest.approx(theirs, rel=1e-12), moving
    assert native.python_nodes == tuple(n for n in graph.nodes if not native_kernel(graph.nodes[n].op))
    assert native.summary()["engine_used"] == "native"
    assert python.summary()["python_nodes"] == list(graph.nodes)
    assert len(native.trace.events()["end"]) == len(python.trace.events()["end"])


@pytest.mark.parametrize("name", ["mlp", "rnn-x2", "tree-lstm", "bilstm-tagger"])
def test_zoo_models_own_optimizers_agree_between_the_engines(name: str) -> None:
    """Adam (with clip_norm and lr_decay), in sync mode over 2 epochs on 2 workers: the native optimizer and the
    learning rate handed over at the epoch end. Adam divides by the root of tiny second moments, which turns
    last-bit differences of the kernels' sums into larger ones: 1e-9, not 1e-12."""
    entry = zoo.get(name)
    data = few_keys(entry.dataset("small", seed=0))
    graph = entry.graph(data)
    start = graph.init_params(2, np.float64)
    settings = {"workers": 2, "mode": "sync", "epochs": 2, "seed": 2, "params": start,
                "optimizer": dict(entry.settings.optimizer)}  # fmt: skip
    python, native = run(graph, data, "python", **settings), run(graph, data, "native", **settings)
    assert relative_error(native.params, python.params) <= 1e-9
    assert relative_error(native.params, start) > 1e-4


def with_fields(data: Dataset, count: int) -> Dataset:
    """``data`` whose keys carry ``count`` more state fields ``a0``, ``a1``, ... (sorted before the models' own,
    so those take the higher slots), each key's values its own."""

    def more(batches, base: int) -> list[Batch]:
        return [Batch(b.inputs, b.size, {**b.fields, **{f"a{i}": (base + k) * 10 + i for i in range(count)}})
                for k, b in enumerate(batches)]  # fmt: skip

    return Dataset(data.name, more(data.train, 0), more(data.val, 100), data.num_classes, data.meta)


@pytest.mark.parametrize("name", ["rnn-x2", "tree-lstm"])
def test_states_of_more_fields_than_a_state_holds_inline_train_alike(name: str) -> None:
    """A native State keeps its first slots inline and any beyond them in a block of its own. With 8 more
    fields in every key, the models' own fields (the RNN's loop counter, the tree's heap position) live in
    that block, where Isu, Cond, Flatmap and Collect read and write them and joins match on them; the run
    still equals the Python engine's, also in amp mode on 2 workers."""
    entry = zoo.get(name)
    data = with_fields(few_keys(entry.dataset("small", seed=0)), 8)
    graph = entry.graph(data)
    names = list(graph.nodes)
    layout = check(names, [graph.nodes[n].op for n in names], data.train[0].fields).layout
    assert len(layout) > native().status()["inline_slots"], layout
    start = graph.init_params(3, np.float64)
    settings = {"workers": 1, "mode": "sync", "epochs": 2, "seed": 3, "params": start, "optimizer": SGD}
    python, native_run = run(graph, data, "python", **settings), run(graph, data, "native", **settings)
    assert relative_error(native_run.params, python.params) <= 1e-12
    assert relative_error(native_run.params, start) > 1e-4
    amp = {**settings, "workers": 2, "mode": "amp", "max_active_keys": 4, "max_bundle": 1}
    python, native_run = run(graph, data, "python", **amp), run(graph, data, "native", **amp)
    assert native_run.history[-1].train_instances == python.history[-1].train_instances > 0
    assert len(native_run.trace.events()["end"]) == len(python.trace.events()["end"])


def test_amp_runs_keep_the_python_engines_accounting() -> None:
    """amp mode on 2 workers: every message one trace row, one staleness row per gradient at a parameterized
    node, an update after every min_update_frequency gradients, and the same counts as the Python engine."""
    data = few_keys(digits_dataset(batch_size=20), 30, 6)
    entry = zoo.get("mlp")
    graph = entry.graph(data)
    counts = {}
    for engine in ("python", "native"):
        r = run(graph, data, engine, workers=2, mode="amp", max_active_keys=6, min_update_frequency=3, epochs=2,
                max_bundle=1, seed=0, optimizer={"name": "momentum", "lr": 0.01})  # fmt: skip
        events, staleness = r.trace.events(), r.trace.staleness()
        phases = np.bincount(events["phase"], minlength=3)
        counts[engine] = (int(phases[0]), int(phases[1]), len(staleness["value"]))
        gradients = np.bincount(staleness["node"])
        assert int(phases[2]) == int(np.sum(gradients // 3))  # an update per 3 gradients of a node
        assert staleness["value"].min() >= 0 and r.staleness()["max"] >= 1  # asynchrony showed
        assert r.history[-1].train_instances == sum(b.size for b in data.train)
    assert counts["native"] == counts["python"]


def test_checkpoints_resume_bit_for_bit_across_engines(tmp_path) -> None:
    data = few_keys(digits_dataset(batch_size=20), 12, 4)
    graph = zoo.get("mlp").graph(data)
    settings = {"workers": 2, "mode": "sync", "seed": 4, "optimizer": {"name": "adam", "lr": 1e-3}}
    whole = run(graph, data, "native", epochs=3, **settings)
    for first, second in (("native", "native"), ("native", "python"), ("python", "native")):
        part = run(graph, data, first, epochs=1, **settings)
        path = part.save_checkpoint(tmp_path / f"{first}.npz")
        resumed = train(graph, data, engine=second, dtype="float64", epochs=3, resume=path, **settings)
        assert isinstance(resumed, TrainResult)
        if first == second == "native":
            assert relative_error(resumed.params, whole.params) == 0.0
        else:  # the engines agree to rounding
            assert relative_error(resumed.params, whole.params) <= 1e-9


def test_gradients_a_kernel_holds_back_reach_the_contexts_when_the_run_stops() -> None:
    """The per-tree layout's Linear nodes queue one-row gradients and add them at an update or when Python
    reads the accumulators. With no update in the run, every gradient must still be in the contexts at its
    end (what a checkpoint saves), equal to the Python engine's, which adds them as they come."""
    entry = zoo.get("tree-lstm")
    data = few_keys(entry.dataset("small", seed=0))
    graph = entry.graph(data)
    for node in graph.nodes.values():
        node.min_update_frequency = 10**6
    start = graph.init_params(3, np.float64)
    held = {}
    for engine in ("python", "native"):
        r = run(graph, data, engine, workers=1, mode="amp", max_active_keys=2, epochs=1, seed=3, params=start,
                optimizer=SGD)  # fmt: skip
        contexts = zip(graph.nodes, r.session.contexts, strict=True)
        held[engine] = {n: (c.n_grads, c.grads) for n, c in contexts if c.grads}
    assert held["native"].keys() == held["python"].keys() and "branch_gates" in held["native"]
    for node, (n_grads, grads) in held["python"].items():
        assert n_grads > 0 and held["native"][node][0] == n_grads, node
        assert relative_error({node: held["native"][node][1]}, {node: grads}) <= 1e-12, node
