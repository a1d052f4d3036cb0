"""A key's admission in one native call (``src/admission.h``) equals the Python path it replaces on the driver:

* the messages are those of ``Session.input_messages``: node, port, direction, train, key and state, and
  payloads of the same dtype and bits (a float Input's cast to the run's dtype, a filling Input's zeros), for
  every workload of the zoo in both float dtypes;
* the NaN/inf check is ``numerics.all_finite``'s, made on the payload as the batch holds it (a float64 value
  beyond float32's range is finite there, and becomes inf in the cast, as numpy's astype makes it);
* a batch the one call does not take goes through Python messages and trains as the Python engine does, and
  a batch it takes never does.
"""

from __future__ import annotations

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.data import Batch, Dataset
from amp_notebook.engine import backend as native_backend
from amp_notebook.engine.assemble import assemble
from amp_notebook.ir.message import FWD
from amp_notebook.reproduce.workloads import MODELS, workload
from amp_notebook.runtime.controller import KeyInfo
from amp_notebook.runtime.launch import build_session
from amp_notebook.runtime.numerics import all_finite
from amp_notebook.runtime.session import RunConfig, Session
from amp_notebook.runtime.train import train
from tests.conftest import digits_dataset

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # numpy's astype, 1e300


def native_session(graph, data: Dataset, dtype: str = "float32", **settings) -> Session:
    session, _ = build_session(graph, data, RunConfig(workers=1, engine="native", dtype=dtype, **settings))
    return session


def as_engine_holds(x: np.ndarray) -> np.ndarray:
    """A Python message's payload as the engine's conversion holds it (integers widened to int64)."""
    x = np.asarray(x)
    return x.astype(np.int64) if x.dtype.kind in "iu" else x


def assert_same_messages(session: Session, engine, info: KeyInfo) -> None:
    batch = info.batch
    expected = session.input_messages(info)
    bad, got = engine.admission(info.key, info.train, batch.inputs, batch.fields, batch.size)
    assert bad == -1
    assert len(got) == len(expected)
    for m, (node, port, direction, train_, key, state, payload) in zip(expected, got, strict=True):
        where = f"key {info.key}, node {session.plan.names[m.node]}"
        assert (node, port, direction, train_, key) == (m.node, 0, FWD, info.train, info.key), where
        assert state == m.state and state.as_dict() == m.state.as_dict(), where
        want = as_engine_holds(m.payload)
        assert payload.dtype == want.dtype and payload.shape == want.shape, where
        assert want.tobytes() == np.ascontiguousarray(payload).tobytes(), where  # the same bits, NaN and inf too


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", MODELS)
def test_the_messages_of_one_call_are_those_of_the_python_path(name, dtype):
    w = workload(name, quick=True)
    session = native_session(w.graph, w.data, dtype)
    engine = assemble(session)
    keys = [(b, True) for b in w.data.train[:6]] + [(b, False) for b in w.data.val[:3]]
    for key, (batch, trains) in enumerate(keys):
        assert_same_messages(session, engine, KeyInfo(key, 0, trains, batch))


def digits_key(x: np.ndarray) -> tuple[Session, object, KeyInfo]:
    data = digits_dataset(batch_size=10)
    batch = Batch({**data.train[0].inputs, "x": x}, data.train[0].size)
    session = native_session(models.mlp(input_width=64, hidden=8), data)
    return session, assemble(session), KeyInfo(7, 0, True, batch)


def variants() -> list[tuple[str, np.ndarray]]:
    x = digits_dataset(batch_size=10).train[0].inputs["x"]
    out = [("clean", x), ("float32", x.astype(np.float32)), ("beyond float32", np.full_like(x, 1e300)),
           ("float64 max", np.full_like(x, np.finfo(np.float64).max)),
           ("strided", np.repeat(x, 2, axis=1)[:, ::2])]  # fmt: skip
    for value in (np.nan, np.inf, -np.inf):
        for at in ((0, 0), (9, 63), (4, 17)):
            y = x.copy()
            y[at] = value
            out.append((f"{value} at {at}", y))
            out.append((f"{value} at {at} float32", y.astype(np.float32)))
    return out


@pytest.mark.parametrize(("what", "x"), variants(), ids=[v[0] for v in variants()])
def test_the_nan_inf_check_is_all_finite_on_the_payload_as_given(what, x):
    session, engine, info = digits_key(x)
    batch = info.batch
    bad, _ = engine.admission(info.key, True, batch.inputs, batch.fields, batch.size)
    names = list(session.plan.inputs)
    first = next((i for i, n in enumerate(names) if not all_finite(batch.inputs[n])), -1)
    assert bad == first
    if first == -1:  # admitted: the cast payload (1e300 is inf in float32) as numpy's astype makes it
        assert_same_messages(session, engine, info)


def test_keys_in_one_call_each_get_their_own_result_and_only_the_admitted_are_registered_and_posted():
    """admit_many: a clean key, one holding NaN, one the one-call path refuses (a float Input fed integers)
    and another clean key; only the clean ones are registered (a credit per input message) and posted, and
    each admitted key's messages are those of admit one by one."""
    data = digits_dataset(batch_size=10)
    session = native_session(models.mlp(input_width=64, hidden=8), data)
    engine = assemble(session)
    x = data.train[0].inputs["x"]
    nan = x.copy()
    nan[2, 5] = np.nan
    batches = [data.train[0], Batch({**data.train[1].inputs, "x": nan}, 10),
               Batch({**data.train[2].inputs, "x": np.rint(x * 16).astype(np.int64)}, 10), data.train[3]]  # fmt: skip
    infos = [KeyInfo(key, 0, True, b) for key, b in zip((4, 5, 6, 7), batches, strict=True)]
    results = engine.admit_many([(i.key, i.train, i.batch.inputs, i.batch.fields, i.batch.size) for i in infos])
    x_slot = list(session.plan.inputs).index("x")
    assert results == [-1, x_slot, native_backend.REFUSED, -1]
    n_inputs = len(session.plan.inputs)
    keys, flushes = engine.in_flight()
    assert keys == {4: n_inputs, 7: n_inputs} and flushes == {}
    assert sum(engine.queued()) == 2 * n_inputs
    for info in (infos[0], infos[3]):
        assert_same_messages(session, engine, info)
    assert engine.admit_many([]) == []
    assert engine.admit_many([(8, True, [("x", x)], {}, 10)]) == [native_backend.REFUSED]  # inputs not a dict
    assert engine.in_flight()[0] == {4: n_inputs, 7: n_inputs}
    with pytest.raises(TypeError, match="each key is a tuple"):
        engine.admit_many([(8, True, {}, {})])


def test_a_run_with_some_keys_the_one_call_path_refuses_admits_those_through_python(monkeypatch):
    data = digits_dataset(batch_size=20)
    ints = {1, 4}  # these batches feed the float Input integers
    mixed = Dataset(data.name, [Batch({**b.inputs, "x": np.rint(b.inputs["x"] * 16).astype(np.int64)}, b.size)
                                if i in ints else b for i, b in enumerate(data.train)], [], data.num_classes,
                    data.meta)  # fmt: skip
    seen = count_python_admissions(monkeypatch)
    result = train(models.mlp(input_width=64, hidden=8), mixed, engine="native", mode="amp", max_active_keys=4,
                   workers=2, epochs=2, shuffle=False, validate=False)  # fmt: skip
    assert result.engine == "native"
    assert sorted(seen) == sorted(epoch * len(mixed.train) + i for epoch in range(2) for i in ints)
    assert result.train_instances == 2 * sum(b.size for b in mixed.train)


def test_without_the_check_nan_is_admitted():
    x = digits_dataset(batch_size=10).train[0].inputs["x"].copy()
    x[3, 3] = np.nan
    data = digits_dataset(batch_size=10)
    session = native_session(models.mlp(input_width=64, hidden=8), data, on_nonfinite="ignore")
    engine = assemble(session)
    batch = Batch({**data.train[0].inputs, "x": x}, data.train[0].size)
    assert_same_messages(session, engine, KeyInfo(0, 0, True, batch))


def count_python_admissions(monkeypatch) -> list[int]:
    seen: list[int] = []
    real = native_backend.checked_input_messages

    def counted(session, info):
        seen.append(info.key)
        return real(session, info)

    monkeypatch.setattr(native_backend, "checked_input_messages", counted)
    return seen


def test_a_float_input_fed_integers_goes_through_python_messages_and_trains_the_same(monkeypatch):
    data = digits_dataset(batch_size=20)
    as_ints = Dataset(data.name, [Batch({**b.inputs, "x": np.rint(b.inputs["x"] * 16).astype(np.int64)}, b.size)
                                  for b in data.train], [], data.num_classes, data.meta)  # fmt: skip
    session = native_session(models.mlp(input_width=64, hidden=8), as_ints)
    batch = as_ints.train[0]
    with pytest.raises(TypeError, match="fed integers"):
        assemble(session).admission(0, True, batch.inputs, batch.fields, batch.size)
    seen = count_python_admissions(monkeypatch)
    settings = {"mode": "sync", "epochs": 2, "workers": 1, "dtype": "float64", "seed": 1, "validate": False}
    native = train(models.mlp(input_width=64, hidden=8), as_ints, engine="native", **settings)
    assert len(seen) == 2 * len(as_ints.train)  # every key, both epochs
    python = train(models.mlp(input_width=64, hidden=8), as_ints, engine="python", **settings)
    for node, params in python.params.items():
        for k, v in params.items():
            np.testing.assert_allclose(native.params[node][k], v, rtol=1e-12, atol=1e-13, err_msg=f"{node}.{k}")


@pytest.mark.parametrize("name", ["mlp", "tree-lstm", "ggsnn"])
def test_the_zoo_never_takes_the_python_path(monkeypatch, name):
    seen = count_python_admissions(monkeypatch)
    w = workload(name, quick=True, engine="native")
    result = train(w.graph, w.data, workers=2, mode="amp", epochs=1, **w.settings)
    assert result.engine == "native" and not seen


RAW = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.bool_, np.float32,
       np.float64]  # fmt: skip


def raw_payload(dtype, layout: str) -> np.ndarray:
    rng = np.random.default_rng(3)
    if dtype is np.bool_:
        x = rng.random((10, 6)) > 0.5
    elif np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, (10, 6), dtype=dtype, endpoint=True)
        x[0, :2] = info.min, info.max  # the extremes (uint64's largest wraps to -1 in int64, as astype wraps it)
    else:
        x = rng.standard_normal((10, 6)).astype(dtype)
    return {"c": x, "fortran": np.asfortranarray(x), "strided": x[:, ::2], "reversed": x[::-1, ::-1],
            "empty": x[:0]}[layout]  # fmt: skip


@pytest.mark.parametrize("layout", ["c", "fortran", "strided", "reversed", "empty"])
@pytest.mark.parametrize("dtype", RAW, ids=lambda d: np.dtype(d).name)
def test_an_int_input_takes_any_integer_bool_or_float_array_as_the_engine_always_held_it(dtype, layout):
    # the target Input is an int Input: its payload enters as is (read through the buffer protocol), with
    # integers widened to int64; the Python path hands the same array to the engine's general conversion
    data = digits_dataset(batch_size=10)
    batch = Batch({**data.train[0].inputs, "target": raw_payload(dtype, layout)}, data.train[0].size)
    session = native_session(models.mlp(input_width=64, hidden=8), data)
    engine = assemble(session)
    assert_same_messages(session, engine, KeyInfo(0, 0, True, batch))
    [msg] = [m for m in session.input_messages(KeyInfo(0, 0, True, batch)) if m.node == session.plan.index["target"]]
    engine.inject([msg], False)  # the general path takes it too


@pytest.mark.parametrize("payload", [np.zeros((10, 1), ">f8"), np.zeros((10, 1), np.float16), np.zeros(3, complex),
                                     np.zeros((10, 1), object), np.zeros((1, 1, 1, 1, 10))])  # fmt: skip
def test_what_the_buffer_path_does_not_read_is_refused_as_before(payload):
    data = digits_dataset(batch_size=10)
    batch = Batch({**data.train[0].inputs, "target": payload}, data.train[0].size)
    engine = assemble(native_session(models.mlp(input_width=64, hidden=8), data))
    with pytest.raises((TypeError, ValueError)):
        engine.admission(0, True, batch.inputs, batch.fields, batch.size)


def test_an_unaligned_array_is_read_as_before():
    raw = np.zeros(10 * 8 + 1, np.uint8)
    x = np.frombuffer(raw.data, dtype=np.int64, count=10, offset=1).reshape(10, 1)  # one byte off its items
    x_values = np.arange(10, dtype=np.int64).reshape(10, 1)
    raw[1:] = x_values.view(np.uint8).ravel()
    data = digits_dataset(batch_size=10)
    batch = Batch({**data.train[0].inputs, "target": x}, data.train[0].size)
    session = native_session(models.mlp(input_width=64, hidden=8), data)
    assert_same_messages(session, assemble(session), KeyInfo(0, 0, True, batch))  # the general path reads it


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "bool", "float32", "float64"])
def test_an_array_without_the_buffer_protocol_enters_through_dlpack_the_same(dtype):
    # a torch tensor offers DLPack and no buffer protocol: the general import path reads it
    torch = pytest.importorskip("torch")
    x = raw_payload(getattr(np, dtype), "c")
    data = digits_dataset(batch_size=10)
    session = native_session(models.mlp(input_width=64, hidden=8), data)
    tensor = torch.from_numpy(np.ascontiguousarray(x))
    batch = Batch({**data.train[0].inputs, "target": tensor}, data.train[0].size)
    bad, got = assemble(session).admission(0, True, batch.inputs, batch.fields, batch.size)
    [payload] = [p for node, *_, p in got if node == session.plan.index["target"]]
    want = as_engine_holds(x)
    assert bad == -1 and payload.dtype == want.dtype and np.array_equal(payload, want)
