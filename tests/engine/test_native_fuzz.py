"""Fuzzed input into native runs: bad payloads, shapes, dtypes and state fields give an AmpError (a DataError at
the boundary, or the NodeError of the op that refuses them), never a crash or another exception."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amp_notebook import models
from amp_notebook.data import Batch, Dataset
from amp_notebook.errors import AmpError
from amp_notebook.runtime.train import train
from tests.conftest import digits_dataset, lists_dataset

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:graph .* get no node:UserWarning")
DIGITS = digits_dataset(batch_size=10)
LISTS = lists_dataset(n_train=40, n_val=10, bucket_size=10)

PAYLOADS = st.sampled_from([
    "object", "str", "complex", "float16", "bool", "int8", "uint64", "wide", "narrow", "vector", "rank3", "rank5",
    "empty", "fortran", "strided", "nan", "huge",
])  # fmt: skip


def mutate(x: np.ndarray, how: str) -> object:
    rows = x.shape[0]
    return {
        "object": lambda: x.astype(object), "str": lambda: x.astype(str), "complex": lambda: x.astype(complex),
        "float16": lambda: x.astype(np.float16), "bool": lambda: x > 0.5, "int8": lambda: x.astype(np.int8),
        "uint64": lambda: x.astype(np.uint64), "wide": lambda: np.zeros((rows, x.shape[1] + 3)),
        "narrow": lambda: x[:, :1], "vector": lambda: x[0], "rank3": lambda: x[None],
        "rank5": lambda: x.reshape(1, 1, 1, *x.shape), "empty": lambda: x[:0], "fortran": lambda: np.asfortranarray(x),
        "strided": lambda: x[:, ::2], "nan": lambda: np.full_like(x, np.nan), "huge": lambda: x * 1e308,
    }[how]()  # fmt: skip


def one_bad_key(data: Dataset, index: int, name: str, payload: object, fields: dict[str, int] | None = None) -> Dataset:
    keys = list(data.train)
    batch = keys[index]
    keys[index] = Batch({**batch.inputs, name: payload}, batch.size, {**batch.fields, **(fields or {})})  # type: ignore[dict-item]
    return Dataset(data.name, keys, list(data.val[:2]), data.num_classes, data.meta)


def train_natively(graph, data: Dataset, workers: int, mode: str) -> None:
    with contextlib.suppress(AmpError):  # a clear refusal is the promise; anything else escapes and fails the test
        train(graph, data, engine="native", workers=workers, mode=mode, epochs=1, max_active_keys=3, watchdog_s=20)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(how=PAYLOADS, index=st.integers(0, 5), input_name=st.sampled_from(["x", "target"]),
       workers=st.integers(1, 3), mode=st.sampled_from(["amp", "sync", "pipeline"]))  # fmt: skip
def test_bad_payloads_into_a_native_mlp_give_amp_errors(how, index, input_name, workers, mode):
    x = DIGITS.train[index].inputs[input_name]
    payload = mutate(x if x.ndim == 2 else x[:, None], how)
    train_natively(models.mlp(input_width=64, hidden=8), one_bad_key(DIGITS, index, input_name, payload), workers, mode)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(length=st.sampled_from([-1, 0, 1, 2**40, -(2**62), 2**63 - 1]), index=st.integers(0, 3),
       workers=st.integers(1, 2))  # fmt: skip
def test_bad_loop_lengths_into_a_native_rnn_give_amp_errors(length, index, workers):
    batch = LISTS.train[index]
    field = next(iter(batch.fields), None)
    if field is None:
        pytest.skip("the list keys carry no state field")
    data = one_bad_key(LISTS, index, next(iter(batch.inputs)), next(iter(batch.inputs.values())), {field: length})
    train_natively(models.rnn(hidden=8, embedding_dim=4), data, workers, "amp")
