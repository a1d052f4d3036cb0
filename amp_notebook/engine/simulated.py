"""The simulated-hardware backend on the native engine: the native workers stepped in virtual time, no threads.

The algorithm is :mod:`amp_notebook.runtime.backends.simulated`'s (its module docstring), event for event:
``src/sim.h`` keeps the event heap, the virtual clock, the links and the cost cache, and steps the native
workers (``src/step.cc``, the same step the native threads run) one at a time on the calling thread. What
stays in Python:

* the session and its controller: the engine returns to the driver at every key completion (an event per key,
  never per message); the session admits what follows, whose messages enter their workers' inboxes at that
  virtual time (:meth:`inject`), and ends epochs (replica averaging on the contexts' arrays, which the engine
  shares);
* the cost model: the engine asks :meth:`~amp_notebook.runtime.costs.CostTable.of_shape` once per distinct
  (node, direction, shape, dtype) and keeps the answer, so both simulators charge the same seconds and bytes.

The same graph, data, seed and cost model give the same trace, makespan and link use as the Python simulator,
bit for bit (virtual times depend on shapes, never on values), and parameters that agree to the last bits in
which the native kernels' sums may round differently (``tests/engine/test_native_simulated.py``). It runs
the message path at native speed, which bounds every what-if grid (autoplace, Fig. 5, the tutorials).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from amp_notebook.engine.backend import NativeBackend
from amp_notebook.errors import RunStateError
from amp_notebook.runtime.backends.simulated import link_stats
from amp_notebook.runtime.blas import single_threaded_blas
from amp_notebook.runtime.costs import CostModel, CostTable
from amp_notebook.runtime.watchdog import Diagnosis, StuckRunError, diagnose

if TYPE_CHECKING:
    from amp_notebook.runtime.session import Session


class NativeSimulatedBackend(NativeBackend):
    """Runs a session to the end in virtual time on the native engine (module docstring); ``wall_s`` is the
    makespan, ``stats()`` the link use. Implements :class:`~amp_notebook.runtime.backend.Backend`. Owns the
    engine (which owns the event heap, the inboxes and the links); reads the session's contexts and knobs, never
    changes the session beyond what the protocol allows, and never starts a thread."""

    def __init__(self, session: Session, costs: CostModel | None = None) -> None:
        super().__init__(session)
        self.watchdog = None  # virtual time: a lost message shows as events running out, diagnosed then
        self.costs = costs if costs is not None else CostModel()
        self.table: CostTable = self.costs.compile(session.plan)
        table = self.table
        receive = (table.receive_overhead, table.receive_per_byte)
        self.engine.simulate(table.latency, table.seconds_per_bit, table.update_s, receive, _cost_hook(table))

    # ------------------------------------------------------------ the Backend protocol
    def now(self) -> float:
        return float(self.engine.sim_now())

    @property
    def virtual_now(self) -> float:
        """The virtual time of the event in hand."""
        return self.now()

    def call(self, fn: Any) -> None:
        """Run ``fn() -> actions`` after the event in hand (the simulation's one thread is its driver)."""
        self._calls.append(fn)

    def diagnose(self, reason: str) -> Diagnosis:
        """What is in flight, queued and held now (no worker is ever inside a step between events)."""
        session = self.session
        keys, flushes = self.ledger.in_flight()
        depths = list(self.engine.queued())
        return diagnose(reason, session.plan, self._held_views(), keys, flushes, depths, ["idle"] * len(depths))

    def shutdown(self, timeout: float | None = None) -> None:
        """Nothing runs outside ``run``."""
        self._shut = True

    def restart(self, checkpoint: Any) -> None:
        """Never called: simulated workers are never lost."""
        raise RunStateError("restart: a simulated run loses no worker, so there is nothing to restart")

    def stats(self) -> dict[str, Any]:
        """Messages handled, bytes and messages per link, the bandwidth used (bits / makespan), as the Python
        simulator reports them, and the engine."""
        messages, bundles, link_bytes, link_messages = self.engine.sim_stats()
        w = self.session.config.workers
        nbytes = [link_bytes[a * w : (a + 1) * w] for a in range(w)]
        counts = [link_messages[a * w : (a + 1) * w] for a in range(w)]
        # virtual steps: no thread time, and the host's steal is no part of a virtual clock
        native = {k: v for k, v in super().stats().items() if k not in ("worker_time", "steal_share")}
        return {**link_stats(messages, bundles, nbytes, counts, self.wall_s, self.costs), **native}

    def worker_time(self) -> list[dict[str, Any]] | None:
        """None: the simulated steps run on the caller's thread in virtual time, which the trace holds."""
        return None

    # ------------------------------------------------------------ driver
    def run(self) -> None:
        """Process events until the controller finishes the run (BLAS on one thread, as the Python simulator)."""
        with single_threaded_blas():
            self.started.set()
            try:
                self._simulate()
            finally:
                self.wall_s = self.now()
                self._collect()
                self.sync_state()

    def _simulate(self) -> None:
        session, engine, calls = self.session, self.engine, self._calls
        finished = session.begin(self)
        while calls and not finished:  # queued while the run began
            finished = session.carry_out(calls.popleft()(), self)
        while not finished:
            done, flushed, failed = engine.sim_run()
            if failed:
                self._collect()
                self.sync_state()
                raise self._failure()
            if not done and not flushed:
                self.finished = finished
                raise StuckRunError(
                    self.diagnose(
                        f"the simulation of graph {session.graph.name!r} ran out of events at virtual time "
                        f"{self.now():.6g} s with the controller not finished"
                    )
                )
            self._collect()
            if not engine.busy():  # quiescent: an epoch end (or a checkpoint) reads the contexts
                self.sync_state()
            finished = session.completed(done, flushed, self)
            while calls and not finished:  # queued by the session's callbacks
                finished = session.carry_out(calls.popleft()(), self)
            self._fold()
        self.finished = finished


def _cost_hook(table: CostTable) -> Any:
    """The engine's cost hook: ``(node, direction, shape, dtype name or None) -> (overhead, work, bytes)``. It
    holds the table only, so a finished run needs no collection to be freed (the engine shows the collector the
    hooks it holds, so a hook that held more would still be freed, later)."""

    def cost(node: int, direction: int, shape: tuple[int, ...], dtype: str | None) -> tuple[float, float, int]:
        return table.of_shape(node, direction, shape, None if dtype is None else np.dtype(dtype))

    return cost


__all__ = ["NativeSimulatedBackend"]
