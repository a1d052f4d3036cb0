"""Driving a run through lost workers: :func:`drive`, the loop every backend's ``run`` goes through, and
:func:`restart_session`, which puts a session back at a checkpoint.

``drive(backend, once)`` calls ``once()`` (the backend's drive of its session to the end). With
``max_failures`` set it first keeps a checkpoint of the run as it starts, and has the session keep one every
``checkpoint_every`` epochs (:class:`~amp_notebook.runtime.restart.Restarts`); when ``once`` ends with a
:class:`~amp_notebook.runtime.restart.WorkerLostError` that the policy allows (a restart left, the run not
asked to stop), it counts the restart, calls ``backend.restart(checkpoint)`` (the backend stops its workers,
calls :func:`restart_session` and makes fresh workers) and drives again. Any other error, or a loss once the
restarts are spent, goes to the caller.

``restart_session(session, checkpoint)`` builds a fresh session of the same graph, data and settings, on
the old one's knobs and trace buffers, restores the checkpoint into it exactly as ``train(...,
resume=checkpoint)`` does, and has the old session take its state
(:meth:`~amp_notebook.runtime.session.Session.take_state_of`): everyone holding the session (the Run, a
dashboard) sees the restarted run. A checkpoint holds everything the rest of a run depends on, so in sync
mode the restarted run ends with the parameters of the run never interrupted, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amp_notebook.optim import make_optimizer
from amp_notebook.runtime.checkpoint import Checkpoint, capture, restore
from amp_notebook.runtime.restart import Restarts, WorkerLostError
from amp_notebook.runtime.session import Session


def drive(backend: Any, once: Callable[[], None]) -> None:
    """Run ``once()`` and restart after each lost worker the session's restarts allow (module docstring)."""
    restarts: Restarts = backend.session.restarts
    if restarts.max_failures:
        restarts.keeper = lambda: restarts.keep(capture(backend.session))
        if restarts.checkpoint is None:  # a restart before the first epoch's checkpoint goes back here
            restarts.keeper()
    while True:
        try:
            once()
            return
        except WorkerLostError as exc:
            if not restarts.allows(exc) or backend.session.controller.stopping:
                raise
            restarts.record(exc, backend.now())
            assert restarts.checkpoint is not None
            backend.restart(restarts.checkpoint)


def restart_session(session: Session, checkpoint: Checkpoint) -> None:
    """Put ``session`` back at ``checkpoint`` (module docstring); its backend's workers have all stopped."""
    fresh = Session(session.graph, session.dataset, session.config, make_optimizer(session.optimizer_spec),
                    checkpoint.params, session.engine, knobs=session.knobs, buffers=session.buffers)  # fmt: skip
    restore(fresh, checkpoint)
    session.take_state_of(fresh)


__all__ = ["drive", "restart_session"]
