"""Restarting a run after a lost worker (``train(..., max_failures=N)``): what counts as a loss, where a
restart starts from, and the record of every restart.

What is a lost worker. A worker is lost when it ends for a reason outside the model: a Ray actor whose
process or machine died, a worker thread that failed in the runtime's own code or ended without a word, a
native worker that reported a fatal error of its own. Backends raise :class:`WorkerLostError` for these,
naming the worker, the nodes it hosted and where it ran, with the original error as its cause. Everything
else that ends a run is not a loss and is never retried: a node's own error
(:class:`~amp_notebook.runtime.worker.NodeError`), a NaN or infinity
(:class:`~amp_notebook.runtime.numerics.NonFiniteError`), a stuck run that no worker's death explains
(:class:`~amp_notebook.runtime.watchdog.StuckRunError`), bad data: the same run from the same state would
meet them again.

Where a restart starts. From the last checkpoint the run took: every ``checkpoint_every`` epochs (the
checkpoint ``train(..., checkpoint=path)`` saves, kept in memory too, so a restart never reads a file back),
or, before the first one, the run's state when it started (a fresh run's initial parameters, or the
checkpoint it resumed from). A checkpoint holds everything a run's future depends on (parameters, optimizer
memory, node versions and held gradients, the data position and the RNG), so in sync mode a run restarted
once ends with exactly the parameters of a run never interrupted.

The record. :class:`Restarts` keeps the policy's state: the most restarts allowed, the checkpoint to go back
to, and one :class:`Restart` per restart made (which worker was lost, why, the epoch the run went back to,
when). A run's result, its summary and the live dashboard read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from amp_notebook.errors import AmpError

if TYPE_CHECKING:
    from amp_notebook.runtime.checkpoint import Checkpoint


class WorkerLostError(AmpError, RuntimeError):
    """A worker ended for a reason outside the model (its process, machine or thread was lost, or the
    runtime's own code failed in it); the run stopped, or restarted if ``max_failures`` allowed."""

    def __init__(self, worker: int, nodes: list[str], where: str, cause: BaseException | str) -> None:
        first_line = str(cause).splitlines()[0] if str(cause) else ""
        self.worker, self.nodes, self.where = worker, nodes, where
        self.reason = cause if isinstance(cause, str) else f"{type(cause).__name__}: {first_line}"
        super().__init__(
            f"worker {worker} (hosting nodes {nodes}, on {where}) was lost: {self.reason}. The run stopped; train with "
            "max_failures=N to restart it from its last checkpoint by itself, or go on from a checkpoint you "
            "saved with resume(path, data, epochs=...)"
        )


@dataclass(frozen=True)
class Restart:
    """One restart: the ``number``-th of the run, after ``worker`` was lost (``cause``: the error, one line),
    back to the checkpoint taken after ``epoch`` epochs, ``at_s`` seconds into the run."""

    number: int
    worker: int
    cause: str
    epoch: int
    at_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"number": self.number, "worker": self.worker, "cause": self.cause, "epoch": self.epoch,
                "at_s": round(self.at_s, 3)}  # fmt: skip


@dataclass
class Restarts:
    """The restart policy of one run and its record (module docstring)."""

    max_failures: int = 0
    checkpoint: Checkpoint | None = None  # the state a restart goes back to
    made: list[Restart] = field(default_factory=list)
    keeper: Callable[[], None] | None = None  # takes a checkpoint now and keeps it (set by recover.drive)

    def epoch_ended(self, epochs: int, every: int) -> None:
        """The session ended its ``epochs``-th epoch: keep a checkpoint if one is due (every ``every``)."""
        if self.keeper is not None and epochs % every == 0:
            self.keeper()

    def keep(self, checkpoint: Checkpoint) -> None:
        """The run took a checkpoint: a restart goes back to it from now on."""
        self.checkpoint = checkpoint

    def allows(self, error: BaseException) -> bool:
        """Whether ``error`` ends the run in a way a restart may mend, with a restart left to make."""
        return isinstance(error, WorkerLostError) and len(self.made) < self.max_failures

    def record(self, error: WorkerLostError, at_s: float) -> Restart:
        """Count a restart after ``error`` (back to :attr:`checkpoint`, which must be set)."""
        assert self.checkpoint is not None, "a restart needs the checkpoint it goes back to"
        restart = Restart(len(self.made) + 1, error.worker, error.reason, self.checkpoint.epochs_completed, at_s)
        self.made.append(restart)
        return restart

    def __len__(self) -> int:
        return len(self.made)


__all__ = ["Restart", "Restarts", "WorkerLostError"]
