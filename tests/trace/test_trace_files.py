"""Trace files from elsewhere: damaged, foreign or hostile files are refused with a TraceFileError (an
AmpError) that names the file, never an exception from deep inside the parser."""

from __future__ import annotations

import copy
import json
import pickle
import random
from pathlib import Path

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.errors import AmpError
from amp_notebook.runtime.train import TrainResult, train
from amp_notebook.testing.mutations import code_payloads, corrupt_text, mutate_document
from amp_notebook.trace.io import TraceFileError, load_trace, save_trace
from tests.conftest import digits_dataset


@pytest.fixture(scope="module")
def result() -> TrainResult:
    return train(models.mlp(input_width=64, hidden=8), digits_dataset(batch_size=200), workers=2, epochs=1, seed=0)


def test_mutated_chrome_traces_give_only_trace_file_errors(result: TrainResult, tmp_path: Path) -> None:
    result.trace.to_chrome(tmp_path / "good.json")
    good = json.loads((tmp_path / "good.json").read_text())
    good["traceEvents"] = good["traceEvents"][:60]  # a short trace keeps each case quick
    rng, payloads = random.Random(0), code_payloads(tmp_path / "sentinel")
    outcomes = {"loaded": 0, "refused": 0}
    for case in range(100):
        doc = copy.deepcopy(good)
        for _ in range(rng.randint(1, 3)):
            doc = mutate_document(doc, rng, payloads)
        text = json.dumps(doc)
        path = tmp_path / f"case{case}.json"
        path.write_bytes(corrupt_text(text, rng) if rng.random() < 0.2 else text.encode("utf-8", "surrogatepass"))
        try:
            load_trace(path)
            outcomes["loaded"] += 1
        except TraceFileError as exc:
            assert str(path) in str(exc)
            outcomes["refused"] += 1
    assert outcomes["loaded"] > 5 and outcomes["refused"] > 5, outcomes


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ([1, 2, 3], "event #0 is int, expected an object"),
        ({"traceEvents": [{"ph": "X", "args": "x", "tid": 1}]}, "lacks args.node or a phase"),
        ({"traceEvents": [{"ph": "X", "args": {"node": "a", "phase": "fwd"}, "tid": "one", "ts": 0}]},
         "an event could not be read"),
        ({"traceEvents": {"ph": "X"}}, "expected a Chrome trace with a 'traceEvents' list"),
    ],
)  # fmt: skip
def test_foreign_chrome_json_is_refused(content: object, match: str, tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(content))
    with pytest.raises(TraceFileError, match=match):
        load_trace(path)


def test_pickles_and_foreign_archives_are_refused_and_nothing_runs(result: TrainResult, tmp_path: Path) -> None:
    sentinel = tmp_path / "pwned"

    class Runs:
        def __reduce__(self) -> tuple[object, ...]:
            return (Path.touch, (sentinel,))

    (tmp_path / "evil.json").write_bytes(pickle.dumps(Runs()))
    np.savez(tmp_path / "evil.npz", header=np.array([Runs()], dtype=object))
    np.savez(tmp_path / "other.npz", x=np.ones(3))
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 damaged")
    good = save_trace(result.trace, tmp_path / "good.npz")
    with np.load(good) as z:
        partial = {k: z[k] for k in z.files if k != "event_start"}
    np.savez(tmp_path / "partial.npz", **partial)
    for name in ("evil.json", "evil.npz", "other.npz", "broken.npz", "partial.npz"):
        with pytest.raises(TraceFileError) as info:
            load_trace(tmp_path / name)
        assert isinstance(info.value, AmpError) and name in str(info.value)
    assert not sentinel.exists()
    with pytest.raises(FileNotFoundError) as missing:
        load_trace(tmp_path / "missing.npz")
    assert isinstance(missing.value, AmpError)
