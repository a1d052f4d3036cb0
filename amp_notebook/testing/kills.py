"""Kill a process while it saves a checkpoint, again and again: the previous checkpoint must stay loadable.

The promise under test: a checkpoint is written to a temporary file, flushed, ``fsync``-ed and
renamed over the old one, so a process that dies at any instant leaves either the old checkpoint or the new
one, whole. Each round forks a child that saves the same checkpoint to the same path over and over, each
save with a new ``generation`` in its ``meta``, telling the parent through a pipe when a save begins
(``s``) and when it has returned (``d``). The parent waits for the first ``s``, sleeps a random fraction of
a save's duration and kills the child with SIGKILL, then loads the file. It must load, and its generation
must be that of the last save that returned, or of the one the kill interrupted if its rename had already
happened. A round whose child was killed between an ``s`` and its ``d`` was killed *while saving*.

Run it (POSIX only: it forks)::

    python -m amp_notebook.testing.kills --kills 100 --seed 0 --json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amp_notebook.runtime.checkpoint import Checkpoint, load_checkpoint
from amp_notebook.runtime.checkpoint_file import CheckpointError


@dataclass
class KillReport:
    """What a kill campaign found: kills, how many landed while saving, and whether the file stayed loadable."""

    kills: int = 0
    while_saving: int = 0  # killed between the start and the return of a save
    loadable: int = 0
    kept_previous: int = 0  # the file held the last completed save's generation
    took_new: int = 0  # the interrupted save's rename had happened: the file held its generation
    temporaries_left: int = 0  # rounds that left a temporary file behind (removed by the next save)
    failures: list[str] = field(default_factory=list)
    save_s: float = 0.0
    checkpoint_bytes: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.kills > 0 and self.loadable == self.kills and not self.failures

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def sample_checkpoint(hidden: int = 512) -> Checkpoint:
    """A real checkpoint: the MLP (``hidden`` wide, float64, Adam) after one epoch on the digits."""
    from amp_notebook import models
    from amp_notebook.data import load_digits_dataset
    from amp_notebook.runtime.train import train

    data = load_digits_dataset(batch_size=100, seed=0)
    result = train(models.mlp(input_width=64, hidden=hidden), data, mode="sync", epochs=1, dtype="float64",
                   optimizer={"name": "adam", "lr": 1e-3})  # fmt: skip
    return result.checkpoint()  # type: ignore[union-attr]


def _child(ckpt: Checkpoint, path: Path, first_generation: int, pipe: int) -> None:
    generation = first_generation
    while True:
        generation += 1
        os.write(pipe, b"s")
        dataclasses.replace(ckpt, meta={"generation": generation}).save(path)
        os.write(pipe, b"d")


def kill_campaign(
    kills: int, seed: int = 0, ckpt: Checkpoint | None = None, directory: Path | None = None
) -> KillReport:
    if not hasattr(os, "fork"):
        raise RuntimeError("the kill campaign forks child processes: POSIX only")
    rng = random.Random(seed)
    ckpt = ckpt if ckpt is not None else sample_checkpoint()
    report = KillReport()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        path = Path(tmp) / "checkpoint.npz"
        t0 = time.perf_counter()
        for g in range(3):  # how long a save takes here (and generation 0..2 on disk)
            dataclasses.replace(ckpt, meta={"generation": g}).save(path)
        report.save_s = (time.perf_counter() - t0) / 3
        report.checkpoint_bytes = path.stat().st_size
        last_done = 2
        for round_ in range(kills):
            first = 1000 * (round_ + 1)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: save until killed
                try:
                    os.close(r)
                    _child(ckpt, path, first, w)
                finally:
                    os._exit(1)
            os.close(w)
            assert os.read(r, 1) == b"s"
            time.sleep(rng.uniform(0, 2.5 * report.save_s))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            signals = b"s" + _read_all(r)
            os.close(r)
            report.kills += 1
            started, returned = signals.count(b"s"), signals.count(b"d")
            report.while_saving += started > returned
            completed = first + returned if returned else last_done
            report.temporaries_left += any(p.name.endswith(".tmp") for p in Path(tmp).iterdir())
            try:
                generation = load_checkpoint(path).meta["generation"]
            except CheckpointError as exc:
                report.failures.append(f"round {round_}: the checkpoint did not load: {exc}")
                continue
            report.loadable += 1
            if generation == completed:
                report.kept_previous += 1
            elif started > returned and generation == first + started:
                report.took_new += 1
            else:
                report.failures.append(f"round {round_}: generation {generation}, expected {completed}")
            last_done = generation
    report.seconds = time.perf_counter() - began
    return report


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amp_notebook.testing.kills", description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden", type=int, default=512, help="MLP width: the checkpoint's size")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = kill_campaign(args.kills, args.seed, sample_checkpoint(args.hidden))
    print(json.dumps(report.as_dict(), indent=None if args.json else 1))
    if not args.json:
        print(f"{report.loadable}/{report.kills} kills left a loadable checkpoint ({report.while_saving} while "
              f"saving)", file=sys.stderr)  # fmt: skip
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
