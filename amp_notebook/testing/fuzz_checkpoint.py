"""Fuzzing checkpoints: random mutations of real checkpoint files may produce only documented errors, and never
run anything they carry.

The promise under test (issue 11): :func:`~amp_notebook.runtime.checkpoint.load_checkpoint` either returns a
checkpoint or raises :class:`~amp_notebook.runtime.checkpoint_file.CheckpointError`; a checkpoint that loads
either resumes or is refused with a ``CheckpointError`` listing what does not fit. Nothing else may escape
(a ``KeyError``, ``TypeError``, ``MemoryError`` or ``RecursionError`` would be a bug), and no payload may
run: every code payload (a pickle, an object array, an expression that calls something) touches a sentinel
file if it ever runs, and the file must never appear.

Each case starts from one of two real checkpoints (the MLP after a finished epoch with Adam, and the
list-reduction RNN saved mid-epoch in ``amp`` mode with gradients pending, its graph holding expressions) and
applies one to three mutations at one of three levels:

* **bytes**: flip, zero, cut, insert or append bytes anywhere in the file;
* **archive**: drop, duplicate or add a member, compress one, or replace one with a pickle, an object array
  (a pickle inside a ``.npy``), an array of another dtype, shape or order, a header that claims more data
  than there is, or junk;
* **manifest**: delete a field, set one to a nasty value (None, huge or negative numbers, long strings,
  wrong types, deep nesting), rename nodes, parameters or array references, change shapes or dtypes, turn a
  graph expression into a code payload, or replace the manifest with a pickle, NaN-bearing or invalid JSON.

Run it::

    python -m amp_notebook.testing.fuzz_checkpoint --cases 1000 --seed 0 --json
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import pickle
import random
import sys
import tempfile
import time
import traceback
import warnings
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from amp_notebook.data.batch import Dataset
from amp_notebook.ir.graph import Graph
from amp_notebook.optim import make_optimizer
from amp_notebook.runtime.checkpoint import Checkpoint, load_checkpoint, restore
from amp_notebook.runtime.checkpoint_file import MANIFEST, CheckpointError
from amp_notebook.runtime.session import RunConfig, Session

DOCUMENTED: tuple[type[BaseException], ...] = (CheckpointError,)  # TODO(errors): AmpError once it lands
MAX_FAILURES_KEPT = 20


@dataclass
class FuzzReport:
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    broken: int = 0
    ran_code: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.broken == 0 and self.ran_code == 0 and self.cases > 0

    def as_dict(self) -> dict[str, Any]:
        return {"cases": self.cases, "ok": self.ok, "broken": self.broken, "ran_code": self.ran_code,
                "outcomes": dict(self.outcomes.most_common()), "seconds": round(self.seconds, 1),
                "failures": self.failures}  # fmt: skip


# ------------------------------------------------------------------------------------------- the seeds
@dataclass(frozen=True)
class Seed:
    name: str
    data: bytes
    graph: Graph
    dataset: Dataset
    config: RunConfig


@cache
def seeds() -> tuple[Seed, ...]:
    from amp_notebook import models
    from amp_notebook.data import list_reduction_dataset, load_digits_dataset
    from amp_notebook.runtime.train import train

    with tempfile.TemporaryDirectory() as tmp:
        digits = load_digits_dataset(batch_size=100, seed=0)
        mlp = models.mlp(input_width=64, hidden=8)
        train(mlp, digits, mode="sync", epochs=1, optimizer={"name": "adam", "lr": 1e-3},
              checkpoint=Path(tmp) / "mlp.npz")  # fmt: skip
        lists = list_reduction_dataset(n_train=300, n_val=60, bucket_size=50, seed=0, max_len=6)
        rnn = models.rnn(hidden=8, embedding_dim=4)
        run = train(rnn, lists, mode="amp", epochs=10_000, min_update_frequency=7, background=True,
                    optimizer={"name": "momentum", "lr": 0.01})  # fmt: skip
        try:
            while run.status["keys_done"] < 5:  # type: ignore[union-attr]
                time.sleep(0.01)
            run.save(Path(tmp) / "rnn.npz")  # type: ignore[union-attr]
        finally:
            run.stop()  # type: ignore[union-attr]
        return (
            Seed("mlp", (Path(tmp) / "mlp.npz").read_bytes(), mlp, digits, RunConfig(mode="sync")),
            Seed("rnn", (Path(tmp) / "rnn.npz").read_bytes(), rnn, lists, RunConfig(mode="amp")),
        )


# ------------------------------------------------------------------------------------------- payloads
class _Touch:
    """Unpickling this creates the sentinel file: the proof that a pickle ran."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def pickle_payload(sentinel: Path) -> bytes:
    return pickle.dumps(_Touch(sentinel))


def object_npy(sentinel: Path) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.array([_Touch(sentinel)], dtype=object), allow_pickle=True)
    return buf.getvalue()


def npy(array: np.ndarray, fortran: bool = False) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asfortranarray(array) if fortran else array, allow_pickle=False)
    return buf.getvalue()


def nasty_values(sentinel: Path) -> list[Any]:
    return [None, -1, 0, 2**70, -(2**70), 1e308, "x" * 100_000, "", [], {}, True, [1, [2, [3]]], {"a": None},
            f"__import__('os').system('touch {sentinel}')", "../../etc/passwd", 3.5, [None] * 1000]  # fmt: skip


# ------------------------------------------------------------------------------------------- mutations
Members = list[tuple[str, bytes, int]]  # (name, data, compression), in archive order


def read_members(data: bytes) -> Members:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return [(i.filename, zf.read(i), i.compress_type) for i in zf.infolist()]


def write_members(members: Members) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w") as zf:
        warnings.simplefilter("ignore")  # duplicate member names are one of the mutations
        for name, data, compression in members:
            zf.writestr(zipfile.ZipInfo(name), data, compress_type=compression)
    return buf.getvalue()


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    op = rng.choice(("flip", "zero", "cut", "insert", "append"))
    at = rng.randrange(len(b))
    if op == "flip":
        for _ in range(rng.randint(1, 16)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif op == "zero":
        b[at : at + rng.randint(1, 512)] = bytes(min(len(b) - at, 512))[: len(b[at : at + 512])]
    elif op == "cut":
        del b[at:]
    elif op == "insert":
        b[at:at] = rng.randbytes(rng.randint(1, 64))
    else:
        b += rng.randbytes(rng.randint(1, 256))
    return bytes(b)


def mutate_archive(data: bytes, rng: random.Random, sentinel: Path) -> bytes:
    members = read_members(data)
    i = rng.randrange(len(members))
    name, content, _ = members[i]
    op = rng.choice(("drop", "duplicate", "add", "compress", "pickle", "object", "dtype", "shape", "fortran",
                     "claim", "junk", "manifest_pickle", "manifest_nan", "manifest_text"))  # fmt: skip
    if op == "drop":
        del members[i]
    elif op == "duplicate":
        members.append(members[i])
    elif op == "add":
        members.insert(rng.randrange(len(members) + 1), (rng.choice(("x.npy", "evil.pkl", "../up.npy")), content, 0))
    elif op == "compress":
        members[i] = (name, content, zipfile.ZIP_DEFLATED)
    elif op in ("pickle", "object"):
        members[i] = (name, pickle_payload(sentinel) if op == "pickle" else object_npy(sentinel), 0)
    elif op in ("dtype", "shape", "fortran") and name.endswith(".npy"):
        array = np.load(io.BytesIO(content), allow_pickle=False)
        if op == "dtype":
            array = array.astype(rng.choice((np.int8, np.float16, np.complex64, np.uint64, np.bool_)))
        elif op == "shape":
            array = np.resize(array, rng.choice(((), (0,), (3, 3, 3), (array.size + 1,))))
        members[i] = (name, npy(array, fortran=op == "fortran" and array.ndim > 1), 0)
    elif op == "claim" and name.endswith(".npy"):  # a header that promises far more data than follows
        header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }"
        members[i] = (name, b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + content[-16:], 0)
    elif op == "junk":
        members[i] = (name, rng.randbytes(rng.randint(0, 200)), 0)
    elif op.startswith("manifest"):
        j = next(k for k, m in enumerate(members) if m[0] == MANIFEST)
        text = {"manifest_pickle": pickle_payload(sentinel), "manifest_nan": b'{"format": NaN}',
                "manifest_text": b"[" * 100_000}[op]  # fmt: skip
        members[j] = (MANIFEST, text, 0)
    return write_members(members)


def mutate_manifest(data: bytes, rng: random.Random, sentinel: Path) -> bytes:
    members = read_members(data)
    j = next(k for k, m in enumerate(members) if m[0] == MANIFEST)
    manifest = json.loads(members[j][1])
    for _ in range(rng.randint(1, 3)):
        _mutate_json(manifest, rng, sentinel)
    members[j] = (MANIFEST, json.dumps(manifest).encode(), 0)
    return write_members(members)


def _mutate_json(doc: dict[str, Any], rng: random.Random, sentinel: Path) -> None:
    op = rng.choice(("delete", "set", "set", "rename", "expression", "arrayref"))
    if op == "expression":  # a graph expression that would call something if it were ever run as code
        for node in doc.get("graph", {}).get("nodes", []):
            config = node.get("config") if isinstance(node, dict) else None
            if isinstance(config, dict) and "predicate" in config:
                config["predicate"] = f"__import__('os').system('touch {sentinel}')"
                return
        op = "set"
    if op == "arrayref":
        refs = [r for r in _walk(doc) if isinstance(r[1], dict) and "array" in r[1]]
        if refs:
            _, ref = rng.choice(refs)
            key = rng.choice(("array", "shape", "dtype"))
            ref[key] = rng.choice(({"array": "params/nope", "shape": [2, 2], "dtype": "float64"}[key],
                                   rng.choice(nasty_values(sentinel))))  # fmt: skip
            return
        op = "set"
    containers = [c for c in _walk(doc) if isinstance(c[1], dict | list) and c[1]]
    _, container = rng.choice(containers)
    key = rng.choice(list(container.keys()) if isinstance(container, dict) else range(len(container)))
    if op == "delete":
        del container[key]
    elif op == "rename" and isinstance(container, dict):
        container[key + rng.choice(("_x", "/", ""))] = container.pop(key)
    else:
        container[key] = copy.deepcopy(rng.choice(nasty_values(sentinel)))


def _walk(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    found = [(path, value)]
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in children:
        found += _walk(v, (*path, k))
    return found


# ------------------------------------------------------------------------------------------- a case
def run_case(seed: Seed, data: bytes, directory: Path, sentinel: Path) -> str:
    """Load the mutated file, then resume from it (restore only, no training); the outcome's name."""
    path = directory / "case.npz"
    path.write_bytes(data)
    try:
        ckpt = load_checkpoint(path)
    except DOCUMENTED as exc:
        return f"refused on load: {type(exc).__name__}"
    try:
        _restore(seed, ckpt)
    except DOCUMENTED as exc:
        return f"refused on resume: {type(exc).__name__}"
    return "loaded and resumed"


def _restore(seed: Seed, ckpt: Checkpoint) -> None:
    config = copy.copy(seed.config)
    config.epochs = max(ckpt.position.epoch, ckpt.epochs_completed) + 2
    problems = ckpt.problems(seed.graph)
    if problems:
        raise CheckpointError("resume", problems)
    session = Session(seed.graph, seed.dataset, config, make_optimizer(ckpt.optimizer), ckpt.params)
    restore(session, ckpt)


def campaign(cases: int, seed: int = 0) -> FuzzReport:
    rng = random.Random(seed)
    report = FuzzReport()
    began = time.perf_counter()
    mutators: list[Callable[[bytes, random.Random, Path], bytes]] = [
        lambda d, r, s: mutate_bytes(d, r), mutate_archive, mutate_manifest,
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        sentinel = directory / "SENTINEL"
        for i in range(cases):
            base = rng.choice(seeds())
            data = base.data
            for _ in range(rng.randint(1, 3)):
                try:
                    data = rng.choice(mutators)(data, rng, sentinel)
                except Exception:  # the mutator's own parse of an archive an earlier mutation broke: not under test
                    data = mutate_bytes(data, rng)
            report.cases += 1
            try:
                outcome = run_case(base, data, directory, sentinel)
            except Exception as exc:  # anything undocumented escaping is a broken promise
                outcome = f"BROKEN: {type(exc).__name__}"
                report.broken += 1
                if len(report.failures) < MAX_FAILURES_KEPT:
                    report.failures.append(f"case {i} ({base.name}): {traceback.format_exc(limit=3)[-600:]}")
            if sentinel.exists():
                report.ran_code += 1
                report.failures.append(f"case {i}: a payload ran (the sentinel file appeared)")
                sentinel.unlink()
            report.outcomes[outcome] += 1
    report.seconds = time.perf_counter() - began
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amp_notebook.testing.fuzz_checkpoint",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = campaign(args.cases, args.seed)
    print(json.dumps(report.as_dict(), indent=None if args.json else 1))
    if not args.json:
        print(f"{report.cases} fuzzed checkpoints: {report.broken} undocumented errors, {report.ran_code} payloads ran",
              file=sys.stderr)  # fmt: skip
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
