"""A run training in the background: ``train(..., background=True)`` returns a :class:`Run` at once.

How it works. ``train`` builds the session and a backend as usual (threads or Ray: any
:class:`~amp_notebook.runtime.backend.Backend` whose workers run on their own), but instead of driving it in
the caller's thread, :class:`Run` starts a *driver thread* that calls ``backend.run()``: the loop that turns
key completions into controller actions, while the workers move messages. The caller (a notebook kernel)
gets the Run back at once and stays responsive; the run's trace, history and status can be read while it
goes (all reads are of single values or of the trace buffers, which are built for concurrent readers).

Live control. The controller and the session are touched only by the driver thread. A change made from
the kernel is a function queued with ``backend.call``; the driver runs it between two events and applies
the actions it returns (admitting keys when ``max_active_keys`` grows). Settings that change live are the
session's :class:`~amp_notebook.runtime.knobs.Knobs`; the backend hears of each change. Arguments are checked in the
caller's thread first, so a bad value raises in the cell with a message naming it and the queued function
cannot fail; then the caller waits until the driver has run it, so when a method returns its change is in
effect:

* ``pause()``: workers take no new forward message (the ``paused`` knob) but finish the message in hand
  and all backward work (gradients and updates drain); the controller admits no key. Keys in flight
  stay in flight, held in their forward pass, so ``keys_in_flight`` does not drop to zero.
* ``resume()``: admission and forward work go on.
* ``stop()``: admit nothing more (also when paused: it lets held forward work go on); the run finishes
  once the keys in flight complete, and ``stop`` joins its threads. The result holds the epochs that
  completed.
* ``set_max_active_keys(k)``: the controller's limit; a larger one admits keys at once.
* ``set_min_update_frequency(node, m)``: the per-node threshold knob, which workers read at every
  gradient (``amp`` mode); a node that holds more gradients than a lowered threshold updates at its next.
* ``set_max_bundle(node, m)``: how many waiting messages a node (or every node) runs as one call; each
  worker's inbox reads it when it forms the next bundle.
* ``save(path)``: a checkpoint of the run as it goes. Admission is held (as by ``pause``, but forward work
  of the keys in flight goes on) until no key is in flight and no flush is pending; the driver captures the
  state between two events; admission resumes (unless the run was paused) and the file is written from the
  caller's thread while the run goes on. Keys in flight are never saved half done: a checkpoint lies
  between keys, so resuming from it repeats nothing and skips nothing.

Threads never outlive their run: worker threads and the driver are daemon threads; ``backend.run()``
joins the workers before the driver ends; ``stop()`` and ``wait()`` join the driver. The driver thread
holds no reference to the Run, so a Run that is garbage collected asks its run to stop (its threads then
end on their own), and a KeyboardInterrupt (a kernel interrupt) while in ``wait()`` stops the run, joins
its threads and re-raises. An error in a node stops every worker; ``wait()`` (and ``result``) re-raise it:
a :class:`~amp_notebook.runtime.worker.NodeError` naming the node, direction, port and message state. A run
that stops making progress (``watchdog_s``) fails with a :class:`~amp_notebook.runtime.watchdog.StuckRunError`
whose diagnosis ``status["diagnosis"]`` also carries (keys in flight, queues, nodes holding state).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amp_notebook.errors import AmpError, RunStateError, SettingError, SettingTypeError
from amp_notebook.runtime import blas
from amp_notebook.runtime.controller import Action, Controller
from amp_notebook.runtime.done_flag import DoneFlag
from amp_notebook.runtime.watchdog import StuckRunError
from amp_notebook.trace.trace import Trace

if TYPE_CHECKING:
    from amp_notebook.runtime.backend import Backend
    from amp_notebook.runtime.checkpoint import Checkpoint
    from amp_notebook.runtime.plan import Plan
    from amp_notebook.runtime.result import TrainResult
    from amp_notebook.runtime.session import EpochStats, Session
    from amp_notebook.ui.report import Report

STATES = ("running", "paused", "stopping", "finished", "failed")
POLL_S = 0.05  # how often a waiting caller checks that the run has not ended under it


class RunTimeoutError(AmpError, TimeoutError):
    """A run did not reach what was waited for (its end, a point to save at) within the timeout given; the
    message says what it was doing and what to call next. A ``TimeoutError`` too, as before."""


class _Driver:
    """The background thread's side: runs the backend, keeps the outcome. Holds no reference to the Run."""

    def __init__(
        self,
        backend: Backend,
        make_result: Callable[[], TrainResult],
        finished: Callable[[TrainResult], None] | None = None,
    ) -> None:
        self.backend = backend
        self.make_result = make_result
        self.finished = finished
        self.result: TrainResult | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, name="amp-driver", daemon=True)

    def run(self) -> None:
        try:
            self.backend.run()  # joins the worker threads before it returns or raises
            result = self.make_result()
            if self.finished is not None:  # the final checkpoint of train(..., checkpoint=path)
                self.finished(result)
            self.result = result
        except BaseException as exc:  # handed to whoever waits for the run
            self.error = exc
        finally:
            blas.release()  # the Run's hold, taken by the thread that started it
            self.done.set()


def _request_stop(backend: Backend, session: Session, done: threading.Event) -> None:
    """Ask a run to stop without waiting: safe from a finalizer, on any thread."""
    if not done.is_set():
        backend.call(session.controller.stop)
        session.knobs.set_paused(False)  # keys held in their forward pass must finish for the run to end


class Run:
    """A training run going on in background threads; see the module docstring."""

    def __init__(
        self,
        session: Session,
        backend: Backend,
        make_result: Callable[[], TrainResult],
        finished: Callable[[TrainResult], None] | None = None,
    ) -> None:
        self._session = session
        self._backend = backend
        self._driver = _Driver(backend, make_result, finished)
        self._paused = False
        self._stopping = False
        self._trace = Trace(session.buffers, session.plan.names)
        blas.acquire()  # in the starting thread: see amp_notebook.runtime.blas
        self._driver.thread.start()
        while not backend.started.wait(POLL_S):  # the trace's time origin is fixed when the run starts
            if self._driver.done.is_set():
                break
        self._trace.origin = backend.origin
        weakref.finalize(self, _request_stop, backend, session, self._driver.done)

    # ------------------------------------------------------------------ reading
    @property
    def state(self) -> str:
        """One of ``running``, ``paused``, ``stopping``, ``finished``, ``failed``."""
        if self._driver.done.is_set():
            blas.settle()
            return "failed" if self._driver.error is not None else "finished"
        if self._stopping:
            return "stopping"
        return "paused" if self._paused else "running"

    @property
    def status(self) -> dict[str, Any]:
        """Where the run is now: state, epoch, keys done, admitted and in flight, instances trained, elapsed s,
        moving averages of the training loss and accuracy (None before the first loss report), keys skipped
        for NaN/inf (``on_nonfinite="skip"``), the error if it failed, if it got stuck, the diagnosis, and on the
        native engine where each worker's time went so far (``worker_time``: the shares of its life in ops, in
        the engine's own work and waiting, as :attr:`TrainResult.worker_time` gives them at the end; None on
        other engines)."""
        session, controller = self._session, self._session.controller
        plan, knobs = session.plan, session.knobs
        done = self._driver.done.is_set()
        error = self._driver.error
        return {
            "state": self.state,
            "epoch": max(controller.epoch, 0),
            "epochs": session.config.epochs,
            "keys_done": session.keys_done,
            "train_instances_done": session.train_instances_done,
            "elapsed_s": self._backend.wall_s if done else self._backend.now(),
            "keys_in_flight": controller.in_flight(),
            "keys_admitted": controller.admitted,
            "max_active_keys": 1 if controller.mode == "sync" else knobs.max_active_keys,
            "min_update_frequency": {
                plan.names[i]: knobs.min_update_frequency[i] for i, p in enumerate(plan.parameterized) if p
            },
            "max_bundle": max(knobs.max_bundle, default=1),
            "recent_loss": session.recent_loss,
            "recent_accuracy": session.recent_accuracy,
            "nonfinite_skipped": session.nonfinite_skipped,
            "restarts": len(session.restarts),
            "last_restart": session.restarts.made[-1].as_dict() if session.restarts.made else None,
            "error": None if error is None else f"{type(error).__name__}: {error}",
            "diagnosis": error.diagnosis.as_dict() if isinstance(error, StuckRunError) else None,
            "worker_time": self._backend.worker_time(),
        }

    @property
    def trace(self) -> Trace:
        """The live trace: read it while the run goes (``events()``, ``since(cursor)``, ``window(a, b)``)."""
        return self._trace

    @property
    def history(self) -> list[EpochStats]:
        """Statistics of the epochs completed so far."""
        return list(self._session.history)

    @property
    def plan(self) -> Plan:
        """The compiled plan this run executes (node names, placement, which nodes are parameterized)."""
        return self._session.plan

    @property
    def mode(self) -> str:
        """``amp``, ``sync`` or ``pipeline``."""
        return self._session.controller.mode

    @property
    def result(self) -> TrainResult | None:
        """The :class:`TrainResult` once finished, None before; re-raises the run's error if it failed."""
        if self._driver.error is not None:
            raise self._driver.error
        return self._driver.result if self._driver.done.is_set() else None

    @property
    def error(self) -> BaseException | None:
        return self._driver.error

    @property
    def done(self) -> DoneFlag:
        """Whether the run has ended (finished, stopped or failed); reads as a bool."""
        if self._driver.done.is_set():
            blas.settle()
            return DoneFlag(True)
        return DoneFlag(False)

    # ------------------------------------------------------------------ control
    def pause(self) -> None:
        """Take no new forward work and admit no key; backward work in flight drains. No-op once ended."""
        if self._ended():
            return
        self._session.knobs.set_paused(True)
        self._apply(self._session.controller.pause)
        self._paused = True

    def resume(self) -> None:
        """Undo :meth:`pause`. No-op when not paused."""
        if self._ended() or not self._paused:
            return
        self._session.knobs.set_paused(False)  # the backend wakes workers holding forward work
        self._apply(self._session.controller.resume)
        self._paused = False

    def stop(self, wait: bool = True, timeout: float | None = None) -> None:
        """Admit nothing more; the run finishes when the keys in flight complete. With ``wait`` (the default)
        return once every thread of the run has ended (or after ``timeout`` seconds)."""
        if not self._driver.done.is_set() and not self._stopping:
            self._stopping = True
            _request_stop(self._backend, self._session, self._driver.done)
        if wait and threading.current_thread() is not self._driver.thread:
            self._join(timeout)

    def wait(self, timeout: float | None = None) -> TrainResult:
        """Block until the run ends and return its :class:`TrainResult`; re-raise its error if it failed."""
        try:
            ended = self._join(timeout)
        except KeyboardInterrupt:  # a kernel interrupt: leave no thread running behind
            self.stop()
            raise
        if not ended:
            raise RunTimeoutError(
                f"wait: the run is still {self.state} after {timeout} s; call wait() again, or stop() it first"
            )
        if self._driver.error is not None:
            raise self._driver.error
        assert self._driver.result is not None
        return self._driver.result

    def report(self) -> Report:
        """Plotly figures and the summary table of the run so far (of the whole run once it has ended);
        ``.write_html(path)`` writes them as one self-contained HTML file (``TrainResult.report``, the hook)."""
        if self._driver.done.is_set():
            return self.wait().report()
        so_far = self._driver.make_result()
        return replace(so_far, wall_s=self._backend.now(), history=list(self._session.history)).report()

    def save(self, path: str | Path, meta: dict[str, Any] | None = None, timeout: float | None = None) -> Path:
        """Write a checkpoint of the run to ``path`` (an .npz, atomically) and return the path; the run goes
        on. Waits until the keys in flight have drained (at most ``timeout`` s: then TimeoutError, nothing is
        written and the run goes on). A finished run saves its final state; a failed one cannot be saved."""
        return self.checkpoint(meta, timeout).save(path)

    def checkpoint(self, meta: dict[str, Any] | None = None, timeout: float | None = None) -> Checkpoint:
        """The run's state now, as :meth:`save` takes it, in memory."""
        from amp_notebook.runtime.checkpoint import capture

        if self._driver.done.is_set():
            if self._driver.error is not None:
                raise RunStateError(
                    f"checkpoint: the run failed ({type(self._driver.error).__name__}), so its state is not one "
                    "to go on from; resume from an earlier checkpoint"
                ) from self._driver.error
            return self.wait().checkpoint(meta)
        self._require_live("save")
        backend, controller, knobs = self._backend, self._session.controller, self._session.knobs
        held = self._paused
        self._apply(controller.pause)
        if held:  # a paused run holds its forward work: let the keys in flight finish
            knobs.set_paused(False)
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            taken: list[Checkpoint | BaseException] = []

            def take() -> list[Action]:  # on the driver, between two events
                if not (controller.active or controller.flushing):
                    try:
                        backend.sync_state()  # a backend whose nodes live elsewhere brings them back
                        taken.append(capture(self._session, meta))
                    except Exception as exc:  # raised in the caller's thread; the run goes on
                        taken.append(exc)
                return []

            while not taken:
                if self._driver.done.is_set():
                    return self.checkpoint(meta)  # it ended meanwhile: its final state (or its error)
                if controller.active or controller.flushing:
                    if deadline is not None and time.monotonic() > deadline:
                        raise RunTimeoutError(
                            f"save: {len(controller.active)} key(s) still in flight after {timeout} s; "
                            "nothing was saved and the run goes on"
                        )
                    time.sleep(0.005)
                    continue
                self._apply(take)
            if isinstance(taken[0], BaseException):
                raise taken[0]
            return taken[0]
        finally:
            if held:
                knobs.set_paused(True)
            elif not self._driver.done.is_set():
                self._apply(controller.resume)

    def set_max_active_keys(self, k: int) -> None:
        """Keys in flight at most (``amp`` and ``pipeline`` modes); takes effect at once, no restart."""
        Controller._check_keys(k)
        if self._session.controller.mode == "sync":
            raise SettingError(
                "max_active_keys",
                "max_active_keys: a sync run admits one key at a time whatever max_active_keys says; "
                "train with mode='amp' or mode='pipeline' to change it",
            )
        self._require_live("set_max_active_keys")
        self._apply(lambda: self._session.set_max_active_keys(k))

    def set_min_update_frequency(self, node: str | None, m: int) -> None:
        """Gradients a node holds before it updates (``amp`` mode): one node by name, or every parameterized
        node when ``node`` is None. Workers read it at every gradient: it takes effect at once."""
        targets = self._update_targets(node)
        which = "every parameterized node" if node is None else f"node {node!r}"
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise SettingError(
                "min_update_frequency", f"min_update_frequency for {which}: expected an int >= 1, got {m!r}"
            )
        mode = self._session.controller.mode
        if mode != "amp":
            raise SettingError(
                "min_update_frequency",
                f"min_update_frequency: this run is in {mode!r} mode, where every node updates at a flush, "
                "so it has no effect; train with mode='amp' to update after min_update_frequency gradients",
            )
        self._require_live("set_min_update_frequency")
        knobs = self._session.knobs

        def change() -> list[Action]:
            knobs.set_min_update_frequency(targets, m)
            return []

        self._apply(change)

    def set_max_bundle(self, node: str | None, m: int) -> None:
        """Messages a node runs as one call (1: no bundling): one node by name, or every node when ``node``
        is None. Takes effect at the next bundle each worker forms."""
        plan = self._session.plan
        if node is None:
            targets = list(range(len(plan.names)))
        elif not isinstance(node, str) or node not in plan.index:
            raise SettingError(
                "max_bundle",
                f"max_bundle: the graph has no node {node!r}; name one of {list(plan.names)} or None for all",
            )
        else:
            targets = [plan.index[node]]
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            which = "every node" if node is None else f"node {node!r}"
            raise SettingError(
                "max_bundle", f"max_bundle for {which}: expected an int >= 1 (1: no bundling), got {m!r}"
            )
        self._require_live("set_max_bundle")
        knobs = self._session.knobs

        def change() -> list[Action]:
            knobs.set_max_bundle(targets, m)
            return []

        self._apply(change)

    # ------------------------------------------------------------------ helpers
    def _update_targets(self, node: str | None) -> list[int]:
        plan = self._session.plan
        parameterized = [i for i, p in enumerate(plan.parameterized) if p]
        names = [plan.names[i] for i in parameterized]
        if node is None:
            return parameterized
        if not isinstance(node, str):
            raise SettingTypeError(
                "node", f"node: expected a node name (str) or None for all, got {type(node).__name__}"
            )
        i = plan.index.get(node)
        if i is None:
            raise SettingError(
                "min_update_frequency",
                f"min_update_frequency: the graph has no node {node!r}; name one of the parameterized nodes {names}, "
                "or None for all",
            )
        if not plan.parameterized[i]:
            raise SettingError(
                "min_update_frequency",
                f"min_update_frequency: {plan.describe(i)} has no parameters, so it never updates; "
                f"name one of the parameterized nodes {names}, or None for all",
            )
        return [i]

    def _join(self, timeout: float | None) -> bool:
        """Wait for the run to end, then join the driver; False on timeout. Waits on an Event, not on
        ``Thread.join``: on CPython 3.11 a KeyboardInterrupt inside ``join`` can leave the thread marked as
        stopped while it still runs (bpo-45274), after which ``join`` would no longer wait."""
        if not self._driver.done.wait(timeout):
            return False
        self._driver.thread.join()  # it has set `done` as its last step (its workers are joined already)
        blas.settle()
        return True

    def _ended(self) -> bool:
        return self._driver.done.is_set() or self._stopping

    def _require_live(self, what: str) -> None:
        if self._ended():
            raise RunStateError(
                f"{what}: the run is {self.state}, so nothing would take the change; "
                "start a new one with train(..., background=True)"
            )

    def _apply(self, fn: Callable[[], list[Action]]) -> None:
        """Run ``fn`` on the driver thread and wait until it has (or the run has ended)."""
        if threading.current_thread() is self._driver.thread:  # from a callback: the driver is busy with us
            self._backend.call(fn)
            return
        applied = threading.Event()

        def run() -> list[Action]:
            try:
                return fn()
            finally:
                applied.set()

        self._backend.call(run)
        while not applied.wait(POLL_S):
            if self._driver.done.is_set():
                return

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        s = self.status
        text = (
            f"Run(state={s['state']!r}, epoch={s['epoch']}, epochs={s['epochs']}, keys_done={s['keys_done']}, "
            f"keys_in_flight={s['keys_in_flight']}, max_active_keys={s['max_active_keys']}, "
            f"elapsed_s={s['elapsed_s']:.2f}"
        )
        return text + (f", error={s['error']!r})" if s["error"] else ")")


__all__ = ["STATES", "Run", "RunTimeoutError"]
