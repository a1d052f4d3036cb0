"""Non-finite values: NaN or inf in an input, a loss or a gradient raises NonFiniteError naming the node and the
key before any parameter is updated with it; ``on_nonfinite="skip"`` skips such keys and counts them.

A loss that overflows from finite data must overflow on every CPU: whether a sum of large terms of both signs
stays finite depends on the order a BLAS kernel adds them in. So the overflow tests start from weights whose
first layer is made positive (:func:`overflowing_start`): a row of ``BIG`` inputs then sums positive terms only,
and their exact sum is more than twice the largest float32, so it is inf in any order of summation."""

from __future__ import annotations

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.data import Batch, Dataset
from amp_notebook.runtime import numerics
from amp_notebook.runtime.checkpoint import load_checkpoint
from amp_notebook.runtime.numerics import NonFiniteError, all_finite
from amp_notebook.runtime.run import Run
from amp_notebook.runtime.train import TrainResult, train
from amp_notebook.runtime.worker import NodeError
from amp_notebook.testing import faults, runs
from amp_notebook.testing.faults import Fault, Setup
from tests.conftest import digits_dataset

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:invalid value encountered")
SETTINGS = {"workers": 2, "seed": 0, "shuffle": False, "optimizer": {"name": "sgd", "lr": 0.05}}


def mlp():
    return models.mlp(input_width=64, hidden=16)


BIG = 3e38  # finite in float32 (whose largest value is 3.4e38)


def overflowing_start() -> dict[str, dict[str, np.ndarray]]:
    """The MLP's initial weights with ``|W|`` in its first layer: a row of ``BIG`` inputs gives pre-activations
    that overflow whatever order the matrix product adds its terms in (checked here, in float64)."""
    params = mlp().init_params(0)
    params["linear1"]["W"] = np.abs(params["linear1"]["W"])
    exact = BIG * params["linear1"]["W"].astype(np.float64).sum(axis=0)
    assert exact.min() > 2 * float(np.finfo(np.float32).max), "every hidden unit overflows, by a margin"
    return params


def with_bad_key(index: int, value: float, rows: slice = slice(2, 3)) -> Dataset:
    """The digits with ``value`` written into some rows of training key ``index``."""
    data = digits_dataset(batch_size=50)
    batch = data.train[index]
    x = batch.inputs["x"].copy()
    x[rows] = value
    train_keys = list(data.train)
    train_keys[index] = Batch({**batch.inputs, "x": x}, batch.size)
    return Dataset(data.name, train_keys, data.val)


def failing_run(data: Dataset, **options) -> tuple[Run, BaseException]:
    run = train(mlp(), data, background=True, **{**SETTINGS, **options})
    assert isinstance(run, Run)
    with pytest.raises(NonFiniteError) as err:
        run.wait(timeout=30)
    return run, err.value


def assert_initial_params(run: Run, initial: dict[str, dict[str, np.ndarray]] | None = None) -> None:
    initial = initial if initial is not None else mlp().init_params(0)
    for node, params in run._session.params().items():
        for k, v in params.items():
            assert np.array_equal(v, initial[node][k].astype(v.dtype)), f"{node}.{k} was updated"


@pytest.mark.parametrize("engine", ["python", "native"])  # the guard's check; the engine's as it admits the key
def test_a_nan_in_the_data_names_the_input_the_key_and_where_it_is(engine):
    run, error = failing_run(with_bad_key(0, np.nan), mode="sync", engine=engine)
    assert isinstance(error, NodeError) and error.node == "x" and error.what == "input" and error.keys == [0]
    assert "dataset 'digits' train[0]" in str(error) and "nan at index (2, 0)" in str(error)
    assert_initial_params(run)  # the key never ran


def test_a_loss_that_overflows_stops_before_its_backward_pass():
    start = overflowing_start()
    run, error = failing_run(with_bad_key(0, BIG), mode="sync", dtype="float32", params=start)  # finite data
    assert error.node == "loss" and error.what == "loss" and error.keys == [0]
    assert "before its backward pass left the loss node" in str(error)
    assert_initial_params(run, start)


def test_a_nan_gradient_stops_its_node_before_it_updates(monkeypatch):
    monkeypatch.setattr(runs, "WATCHDOG_S", 5.0)
    fault = Fault("nan", k=1, node="linear3", phase="bwd")
    run, session = faults.start(Setup("mlp", "sync"), faults.installer(fault))
    with pytest.raises(NonFiniteError) as err:
        run.wait(timeout=30)
    error = err.value  # the NaN reached linear3, linear2 and linear1: whichever updates first in the flush says so
    assert error.what == "gradient" and error.node in ("linear1", "linear2", "linear3") and error.keys == [0]
    for node in ("linear1", "linear2", "linear3"):
        assert session.contexts[session.plan.index[node]].version == 0  # none of them updated with it


@pytest.mark.parametrize("engine", ["python", "native"])
def test_skip_counts_the_keys_and_trains_on(engine):
    result = train(mlp(), with_bad_key(3, np.inf), mode="amp", epochs=2, on_nonfinite="skip", engine=engine,
                   **SETTINGS)  # fmt: skip
    assert isinstance(result, TrainResult)
    assert result.nonfinite_skipped == 2 and [e.nonfinite_skipped for e in result.history] == [1, 1]
    assert result.summary()["nonfinite_skipped"] == 2
    assert all(np.isfinite(v).all() for p in result.params.values() for v in p.values())
    assert all(np.isfinite(e.train_loss) for e in result.history)


def test_skip_leaves_out_a_loss_that_overflows_and_its_gradients():
    result = train(mlp(), with_bad_key(5, BIG), mode="sync", epochs=1, on_nonfinite="skip", params=overflowing_start(),
                   **SETTINGS)  # fmt: skip
    assert result.nonfinite_skipped == 1
    assert all(np.isfinite(v).all() for p in result.params.values() for v in p.values())
    assert np.isfinite(result.history[0].train_loss)


def test_ignore_trains_on_to_nan_as_before():
    result = train(mlp(), with_bad_key(0, np.nan), mode="sync", epochs=1, on_nonfinite="ignore", **SETTINGS)
    assert np.isnan(result.history[0].train_loss)


def test_the_count_survives_a_checkpoint(tmp_path):
    data = with_bad_key(3, np.nan)
    first = train(mlp(), data, mode="sync", epochs=1, on_nonfinite="skip", **SETTINGS)
    first.save_checkpoint(tmp_path / "c.npz")
    resumed = train(mlp(), data, mode="sync", epochs=2, on_nonfinite="skip", resume=load_checkpoint(tmp_path / "c.npz"),
                    **SETTINGS)  # fmt: skip
    assert resumed.nonfinite_skipped == 2 and [e.nonfinite_skipped for e in resumed.history] == [1, 1]


def test_all_finite_tells_large_finite_values_from_nan_and_inf():
    big = np.full(10, BIG, dtype=np.float32)  # every element finite, though their sum would overflow
    assert all_finite(big)
    for bad in (np.nan, np.inf, -np.inf):
        x = np.ones((4, 5))
        x[1, 2] = bad
        assert not all_finite(x)
    assert all_finite(np.array([1, 2, 3])) and all_finite(None) and all_finite(np.zeros(0))
    # one element (read as a Python float), in every float width, 0-d, and complex values
    for dtype in (np.float16, np.float32, np.float64):
        for shape in ((), (1,), (1, 1)):
            assert all_finite(np.full(shape, np.finfo(dtype).max, dtype=dtype))
            assert not any(all_finite(np.full(shape, bad, dtype=dtype)) for bad in (np.nan, np.inf, -np.inf))
    assert all_finite(np.array([1 + 2j])) and not all_finite(np.array([complex(1, np.inf)]))
    assert not all_finite(np.array([[1.0, np.nan], [3.0, 4.0]])[:, 1])  # a strided view


def test_unknown_policies_are_refused():
    with pytest.raises(ValueError, match="on_nonfinite"):
        train(mlp(), digits_dataset(batch_size=50), on_nonfinite="warn")


def test_bundled_losses_are_checked_too():
    data = with_bad_key(6, BIG)
    bundled = {"mode": "amp", "max_active_keys": 8, "max_bundle": 8, "dtype": "float32", "params": overflowing_start()}
    _, error = failing_run(data, **bundled)
    assert error.what in ("loss", "gradient") and 6 in error.keys
    result = train(mlp(), data, epochs=1, on_nonfinite="skip", **SETTINGS, **bundled)
    assert result.nonfinite_skipped >= 1 and np.isfinite(result.history[0].train_loss)
    events = result.trace.events()
    loss = result.trace.node_names.index("loss")
    assert (events["messages"][events["node"] == loss] > 1).any()  # some losses were computed as a bundle


def test_each_batch_is_checked_once_per_run(monkeypatch):
    # later epochs admit the same arrays: their inputs were found finite at the first admission (the Python
    # guard's cache; the native engine checks as it copies a key's payloads in, every admission)
    checked = []
    real = numerics.all_finite
    monkeypatch.setattr(numerics, "all_finite", lambda x: checked.append(id(x)) or real(x))
    data = digits_dataset(batch_size=50)
    train(mlp(), data, mode="amp", epochs=3, engine="python", **SETTINGS)
    inputs = [id(b.inputs["x"]) for b in (*data.train, *data.val)]
    assert sorted(i for i in checked if i in set(inputs)) == sorted(inputs)
