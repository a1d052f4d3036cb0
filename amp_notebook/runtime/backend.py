"""The contract between a run's session and what moves its messages: the :class:`Backend` protocol.

A :class:`~amp_notebook.runtime.session.Session` holds everything a run means (the plan, the node
contexts, the workers' state machines, the controller, the live :class:`~amp_notebook.runtime.knobs.Knobs`,
the epoch metrics); a *backend* moves messages between workers and keeps time: worker threads
(``backends/threads.py``), native worker loops that hold no GIL (``engine/backend.py``), a discrete-event
simulator (``backends/simulated.py``) and Ray actors (``backends/ray.py``). The session
never looks inside a backend, and a backend changes the session only through the calls listed below, so a
new backend plugs in without touching the session, ``train`` or ``Run``.

Why these methods and no others. Each is something the session, ``train`` or a live ``Run`` must ask of
every backend, and none can be done from outside it:

* ``run()`` drives the run to the end in the calling thread (``train``'s, or a background Run's driver
  thread): it calls ``session.begin(self)``, moves messages, hands each completion to
  ``session.completed(keys, flushes, self)`` and runs queued ``call`` functions between events, until
  one of those returns True (finished). Before it returns or raises, every worker it started has ended.
  It sets ``origin`` (the trace's time zero, on ``time.perf_counter``'s clock) and ``started`` when the
  clock starts, and ``wall_s`` when the run ends.
* ``admit(infos)`` admits the keys the controller let in, in order (a completion that frees several slots
  admits several keys at once): for each, the numerics guard's check of its inputs (NaN/inf), its input
  messages registered with ``ledger``, then delivered. It returns one bool per key: False where the guard
  skipped the key (``on_nonfinite="skip"``; with "raise" the guard raises), and nothing was registered for
  it. Backends whose workers take Python messages share :func:`admit_by_messages` (the session's
  :meth:`~amp_notebook.runtime.session.Session.input_messages`, then ``inject``) key by key; the native
  backend builds the same messages from the batches' arrays in one native call for all of them, which is
  most of the driver's work per key.
* ``inject(messages)`` delivers messages from the controller (a flush's updates; a key's inputs, from
  ``admit``) to their workers. The session registers them with ``ledger`` first.
* ``ledger`` is the driver's side of completion (:class:`~amp_notebook.runtime.ledger.Ledger`): counted
  credits in one process, weighted credits across processes. The backend owns it because only the backend
  knows which kind its workers can keep.
* ``now()``: seconds since ``origin`` on the run's clock (virtual in the simulator): epoch ends and a live
  status read it.
* ``call(fn)`` runs ``fn() -> actions`` on the driver, between two events, and carries out the actions
  (any thread may call it): the one way a live Run changes the controller or the knobs while workers run.
* ``knobs_changed(change)`` hears every change of the session's knobs (each backend subscribes it when it is
  built on a session). A backend whose workers read the knobs in place has little to do (the threaded
  backend wakes sleeping workers on resume); one whose workers hold copies forwards the change (Ray).
  Pause, resume and the per-node thresholds are knobs, so they need no methods of their own; stopping a run
  is the controller's (admit nothing more), and ``shutdown`` ends the workers.
* ``sync_state()``: the session's contexts hold every parameterized node's parameters, optimizer memory,
  version and held gradients as they are now. Called with no message in flight, before epoch-end
  averaging, before a mid-run checkpoint is captured and when results are read. A backend whose workers
  share the session's contexts does nothing.
* ``epoch_ended(nodes)``: the session has averaged these replica nodes' parameters and optimizer memory in
  its contexts and stepped every optimizer's per-epoch schedule; a backend whose workers hold their own
  copies takes them.
  (A checkpoint restored into a live backend will be its mirror, next to it: the session's contexts into
  the workers.)
* ``diagnose(reason)``: what is in flight, queued and held now, as a
  :class:`~amp_notebook.runtime.watchdog.Diagnosis` (a stuck run's error carries it).
* ``stats()``: what the backend measured about itself, JSON-ready (``TrainResult.backend_stats``; ``{}``
  when it has nothing beyond the trace).
* ``worker_time()``: where each worker's time went so far, JSON-ready, readable from any thread while the run
  goes (``Run.status``, the dashboard): the native loops count their seconds in ops, in the engine's own
  work and waiting (:func:`~amp_notebook.engine.backend.worker_time`); None where nothing counts them
  (Python worker threads, simulated time, Ray actors).
* ``shutdown(timeout)``: stop and join (or kill) every worker; safe to call twice or before ``run``.
* ``restart(checkpoint)``: after a lost worker (a :class:`~amp_notebook.runtime.restart.WorkerLostError`
  that ended a drive of the run), stop every worker, put the session back at ``checkpoint``
  (:func:`~amp_notebook.runtime.recover.restart_session`) and make fresh workers on it, so that the next
  drive goes on from there. Only :func:`~amp_notebook.runtime.recover.drive` calls it, inside ``run``, as
  the session's ``restarts`` allow (``max_failures``). The clock (``origin``) and the trace buffers go on.

What a backend may call on the session: ``begin``, ``completed``, ``carry_out``, ``add_reports``,
``fold_reports`` and ``admit_ahead`` (driver thread only), ``collect_reports``, ``input_messages`` and its
``numerics`` guard's ``inputs_ok``; and read ``plan``, ``contexts``, ``workers`` (the state machines its loops
step), ``buffers``, ``knobs`` and ``config``. Workers in the same process step ``session.workers[w]`` with
:meth:`~amp_notebook.runtime.worker.Worker.step`; workers elsewhere build their own from the plan; a native
engine runs its own loop on the contexts' arrays and keeps its own ledger (both sides of it natively).

Adding a method. A capability every backend must offer (restarting a run from a checkpoint in place, say)
becomes one more method here, argued in the list above, implemented by every backend of the package, and
named in the completeness guard of ``tests/runtime/test_contract.py``, which checks each backend class
against this protocol's signatures.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from amp_notebook.ir.message import Message
from amp_notebook.runtime.controller import Action, KeyInfo
from amp_notebook.runtime.knobs import KnobChange
from amp_notebook.runtime.ledger import Ledger

if TYPE_CHECKING:
    from amp_notebook.runtime.checkpoint import Checkpoint
    from amp_notebook.runtime.session import Session
    from amp_notebook.runtime.watchdog import Diagnosis


class Backend(Protocol):
    """What every backend implements (module docstring). Owns its workers (threads, actors or native loops),
    their queues, its clock and its ledger; never changes the session beyond the calls the module docstring
    lists, and never patches it."""

    ledger: Ledger
    started: threading.Event
    origin: float
    wall_s: float

    def run(self) -> None:
        """Drive the session to the end in the calling thread; raises the first worker error."""
        ...

    def admit(self, infos: Sequence[KeyInfo]) -> list[bool]:
        """Admit keys in order: inputs checked, messages registered with ``ledger`` and delivered; per key,
        False if skipped."""
        ...

    def inject(self, msgs: list[Message]) -> None:
        """Deliver messages from the controller (already registered with ``ledger``) to their workers."""
        ...

    def now(self) -> float:
        """Seconds since ``origin`` on the run's clock."""
        ...

    def call(self, fn: Callable[[], list[Action]]) -> None:
        """Run ``fn() -> actions`` on the driver between two events and carry out its actions."""
        ...

    def knobs_changed(self, change: KnobChange) -> None:
        """A knob of the session changed (the value is in place already)."""
        ...

    def sync_state(self) -> None:
        """Bring every parameterized node's state into the session's contexts (no message in flight)."""
        ...

    def epoch_ended(self, nodes: Sequence[int]) -> None:
        """The session averaged ``nodes`` and stepped the optimizers' schedules: take them."""
        ...

    def diagnose(self, reason: str) -> Diagnosis:
        """What is in flight, queued and held now."""
        ...

    def stats(self) -> dict[str, Any]:
        """What the backend measured about itself, JSON-ready."""
        ...

    def worker_time(self) -> list[dict[str, Any]] | None:
        """Where each worker's time went so far, JSON-ready (None where nothing counts it); any thread."""
        ...

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop every worker and wait for it (at most ``timeout`` s each)."""
        ...

    def restart(self, checkpoint: Checkpoint) -> None:
        """After a lost worker: every worker stopped, the session back at ``checkpoint``, fresh workers."""
        ...


def admit_by_messages(session: Session, backend: Backend, info: KeyInfo) -> bool:
    """``Backend.admit`` as Python messages (the threaded, simulated and Ray backends): the guard's check of
    the key's inputs (raises, or False to skip the key), then the key's input messages registered with the
    ledger and injected."""
    msgs = checked_input_messages(session, info)
    if msgs is None:
        return False
    backend.ledger.admit_key(info.key, msgs)
    backend.inject(msgs)
    return True


def checked_input_messages(session: Session, info: KeyInfo) -> list[Message] | None:
    """A key's input messages (``Session.input_messages``) once the numerics guard has checked its inputs:
    None where the guard skips the key (``on_nonfinite="skip"``); raises where it raises."""
    if session.numerics is not None and not session.numerics.inputs_ok(info):
        return None
    return session.input_messages(info)


__all__ = ["Backend", "admit_by_messages", "checked_input_messages"]
