"""The restart policy (``runtime/restart.py``): what counts as a lost worker, how many restarts are allowed,
and what each restart records."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from amp_notebook.errors import AmpError
from amp_notebook.runtime.numerics import NonFiniteError
from amp_notebook.runtime.restart import Restarts, WorkerLostError
from amp_notebook.runtime.watchdog import StuckRunError


def lost(worker: int = 1) -> WorkerLostError:
    return WorkerLostError(worker, ["linear1", "relu1"], "this process", OSError("the thread's inbox failed"))


def test_a_lost_worker_names_itself_its_nodes_and_the_way_on() -> None:
    error = lost()
    assert isinstance(error, AmpError) and isinstance(error, RuntimeError)
    text = str(error)
    assert "worker 1" in text and "['linear1', 'relu1']" in text and "OSError: the thread's inbox failed" in text
    assert "max_failures" in text and "resume(" in text
    assert error.reason == "OSError: the thread's inbox failed"


def test_only_lost_workers_are_restarted_and_at_most_max_failures_times() -> None:
    restarts = Restarts(max_failures=2, checkpoint=SimpleNamespace(epochs_completed=3))  # type: ignore[arg-type]
    assert not restarts.allows(NonFiniteError("loss", "SoftmaxCrossEntropy", "loss", [4], "a NaN"))
    assert not restarts.allows(StuckRunError.__new__(StuckRunError))
    assert not restarts.allows(RuntimeError("anything else"))
    for n in (1, 2):
        assert restarts.allows(lost(n))
        made = restarts.record(lost(n), at_s=1.5 * n)
        assert (made.number, made.worker, made.epoch, made.at_s) == (n, n, 3, 1.5 * n)
        assert made.as_dict()["cause"] == "OSError: the thread's inbox failed"
    assert len(restarts) == 2 and not restarts.allows(lost())  # the budget is spent


def test_no_restart_without_max_failures() -> None:
    assert not Restarts().allows(lost())


def test_a_restart_goes_back_to_the_last_checkpoint_kept() -> None:
    restarts = Restarts(max_failures=1)
    with pytest.raises(AssertionError):
        restarts.record(lost(), at_s=0.0)
    restarts.keep(SimpleNamespace(epochs_completed=0))  # type: ignore[arg-type]
    restarts.keep(SimpleNamespace(epochs_completed=5))  # type: ignore[arg-type]
    assert restarts.record(lost(), at_s=0.0).epoch == 5


# ------------------------------------------------------------------ restarts of real runs
@pytest.mark.parametrize("backend", ["threads", "native"])
def test_a_lost_worker_restarts_and_the_sync_run_ends_as_if_never_interrupted(backend: str) -> None:
    from amp_notebook.testing.faults import Fault
    from amp_notebook.testing.restarts import EPOCHS, run_case
    from amp_notebook.testing.runs import Setup, census

    setup = Setup("mlp", "sync")
    for k in (3, (EPOCHS - 1) * census(setup).steps[1]):  # in the first epoch, and after two checkpoints
        case = run_case(setup, backend, Fault("glue", k=k, worker=1))
        assert case.fired and case.finished and case.error is None, case
        assert case.restarts == case.restarts_in_summary == 1 and case.same_params, case


def test_a_run_restarts_at_most_max_failures_times_then_reports_the_loss(monkeypatch) -> None:
    from amp_notebook import models
    from amp_notebook.runtime.inbox import Inbox
    from amp_notebook.runtime.train import train
    from tests.conftest import digits_dataset

    real_take, taken = Inbox.take, [0]

    def failing_take(self, allow_forward=True):  # every restarted run fails again
        taken[0] += 1
        if taken[0] % 25 == 0:
            raise OSError("the runtime's own code failed")
        return real_take(self, allow_forward)

    monkeypatch.setattr(Inbox, "take", failing_take)
    run = train(models.mlp(input_width=64, hidden=16), digits_dataset(batch_size=50), workers=2, mode="sync",
                epochs=2, max_failures=2, background=True, engine="python")  # fmt: skip
    with pytest.raises(WorkerLostError, match="OSError: the runtime's own code failed"):
        run.wait(timeout=60)
    status = run.status
    assert status["restarts"] == 2 and status["last_restart"]["number"] == 2, status
