"""Fuzzing checkpoints: random mutations of real checkpoint files may produce only documented errors, and never
run anything they carry.

The promise under test: :func:`~amp_notebook.runtime.checkpoint.load_checkpoint` either returns a
checkpoint or raises :class:`~amp_notebook.runtime.checkpoint_file.CheckpointError`; a checkpoint that loads
either resumes or is refused with an :class:`~amp_notebook.errors.AmpError` listing what does not fit.
Nothing else may escape (a ``KeyError``, ``TypeError``, ``MemoryError`` or ``RecursionError`` would be a
bug), and no payload may run: every code payload (a pickle, an object array, an expression that calls
something) touches a sentinel file if it ever runs, and the file must never appear. The report, the nasty
values, code payloads and JSON mutations are those of the graph and intent fuzzers
(:mod:`amp_notebook.testing.fuzz`, :mod:`amp_notebook.testing.mutations`).

Each case starts from one of two real checkpoints (the MLP after a finished epoch with Adam, and the
list-reduction RNN saved mid-epoch in ``amp`` mode with gradients pending, its graph holding expressions) and
applies one to three mutations at one of three levels:

* **bytes**: flip, zero, cut, insert or append bytes anywhere in the file;
* **archive**: drop, duplicate or add a member, compress one, or replace one with a pickle, an object array
  (a pickle inside a ``.npy``), an array of another dtype, shape or order, a header that claims more data
  than there is, or junk;
* **manifest**: the fuzzers' JSON mutations (nasty values, dropped, added or duplicated fields, code
  payloads in strings, extreme numbers) on the whole manifest or on its graph (other kinds, rewired edges,
  expressions that call things), other names, shapes or dtypes in array references, text corruptions
  (truncation, NaN, a pickle header, deep nesting), or the manifest replaced by a pickle or invalid JSON.

Run it::

    python -m amp_notebook.testing.fuzz_checkpoint --cases 1000 --seed 0 --json
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
import random
import sys
import tempfile
import time
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from amp_notebook.data.batch import Dataset
from amp_notebook.errors import AmpError
from amp_notebook.ir.graph import Graph
from amp_notebook.optim import make_optimizer
from amp_notebook.runtime.checkpoint import Checkpoint, load_checkpoint, restore
from amp_notebook.runtime.checkpoint_file import MANIFEST, CheckpointError
from amp_notebook.runtime.session import RunConfig, Session
from amp_notebook.testing.fuzz import FuzzReport
from amp_notebook.testing.mutations import code_payloads, corrupt_text, mutate_document, nasty_values


# ------------------------------------------------------------------------------------------- the seeds
@dataclass(frozen=True)
class Seed:
    """A real checkpoint file to mutate, with the graph, data and settings it resumes with."""

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
    """A structural mutation of the manifest (the fuzzers' JSON mutations, aimed at the whole manifest, at
    its graph or at an array reference), or a corruption of its text."""
    members = read_members(data)
    j = next(k for k, m in enumerate(members) if m[0] == MANIFEST)
    manifest = json.loads(members[j][1])
    payloads = code_payloads(sentinel)
    target = rng.random()
    if target < 0.3 and isinstance(manifest.get("graph"), dict):
        manifest["graph"] = mutate_document(manifest["graph"], rng, payloads)
    elif target < 0.5:
        refs = [c for c in _dicts(manifest) if "array" in c and "shape" in c]
        if refs:
            ref = rng.choice(refs)
            ref[rng.choice(("array", "shape", "dtype"))] = rng.choice(
                ("params/nope", [2, 2], "float16", nasty_values(rng, payloads))
            )
    else:
        manifest = mutate_document(manifest, rng, payloads)
    try:
        text = json.dumps(manifest).encode()
    except (ValueError, RecursionError):  # a mutation json.dumps cannot write: keep the manifest as it was
        text = members[j][1]
    if rng.random() < 0.15:
        text = corrupt_text(text.decode("utf-8", "surrogatepass"), rng)
    members[j] = (MANIFEST, text, 0)
    return write_members(members)


def _dicts(doc: Any) -> list[dict[str, Any]]:
    found, stack = [], [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            found.append(value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


# ------------------------------------------------------------------------------------------- a case
def run_case(seed: Seed, data: bytes, directory: Path) -> str:
    """Load the mutated file, then resume from it (restore only, no training); the outcome's name."""
    path = directory / "case.npz"
    path.write_bytes(data)
    try:
        ckpt = load_checkpoint(path)
    except AmpError as exc:
        return f"refused on load: {type(exc).__name__}"
    try:
        _restore(seed, ckpt)
    except AmpError as exc:
        return f"refused on resume: {type(exc).__name__}"
    return "loaded and resumed"


def _restore(seed: Seed, ckpt: Checkpoint) -> None:
    config = seed.config.replace(epochs=max(ckpt.position.epoch, ckpt.epochs_completed) + 2)
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
        sentinel = directory / "code_ran"
        for i in range(cases):
            base = rng.choice(seeds())
            data = base.data
            for _ in range(rng.randint(1, 3)):
                try:
                    data = rng.choice(mutators)(data, rng, sentinel)
                except Exception:  # the mutator's own parse of an archive an earlier mutation broke: not under test
                    data = mutate_bytes(data, rng)
            report.cases += 1
            case = f"case {i} ({base.name}, seed {seed})"
            try:
                report.outcomes[run_case(base, data, directory)] += 1
            except Exception as exc:  # anything undocumented escaping is a broken promise
                report.undocumented(exc, case)
            report.check_sentinel(sentinel, case)
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
        print(f"{report.cases} fuzzed checkpoints: {report.broken} broke the promise", file=sys.stderr)
    return 0 if report.only_amp_errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
