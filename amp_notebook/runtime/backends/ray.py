"""The Ray backend: one Ray actor per worker, on one machine or many; the driver is the controller.

``train(graph, data, backend="ray")`` (``address=`` for an existing cluster) runs the same session as the
threaded backend: graph, placement, controller, worker step, modes, replicas, staleness, live knobs. Only
the moving of messages and the keeping of time differ.

Deployment (``RayBackend(session)``, before the clock starts). :func:`~.ray_cluster.connect` joins or
starts a cluster; one :class:`~.ray_actor.WorkerHost` actor per worker is created on node ``w mod N``,
given the graph as JSON, the placement, the thresholds and the contexts of its nodes, and told the other
actors' handles. Actors reserve no CPUs from Ray's scheduler (placement is explicit), so a cluster with
fewer CPUs than workers still runs them, sharing its cores. The driver then aligns each actor's clock
with its own (:mod:`.ray_cluster`).

Messages. The driver injects admitted keys and flushes as fire-and-forget calls, one per worker per round
of actions; actors send their outgoing messages to each other directly, one call per destination per
step (:mod:`.ray_actor`). Completion is detected by weighted credit recovery (:mod:`.ray_credits`): each
key carries weight 1 split over its messages, and an actor returns the weight of whatever ends with it.

The driver loop (``run``). The driver keeps one long-poll ``events`` call outstanding per actor and waits
for any of them (``ray.wait``). A reply holds, in one batch, the weights returned, the loss reports (with
their shares: a key cannot complete before its loss is known), the trace rows written since the last
reply, and the actor's error if its step failed. The driver appends the reports to the session, the rows
(moved onto its own clock) to the worker's trace buffer, adds the weights up, and hands completed keys and
flushes to the session: the same events and actions as every backend. Between replies it runs functions
queued by a background :class:`~amp_notebook.runtime.run.Run` (``call``). The backend listens to the
session's :class:`~amp_notebook.runtime.knobs.Knobs` and forwards every change to every actor: changed
thresholds (``min_update_frequency``, ``max_bundle``) are acknowledged before the Run's method returns, a
pause or resume before the next queued function runs.

Epoch ends. No message is in flight; the session asks the backend to bring the node states back
(``sync_state``: every parameterized node's state fetched from the actors, so the session's contexts hold
the parameters as of that epoch end, which results and checkpoints read), averages replica groups itself,
and hands the averages back (``epoch_ended``: sent to the actors with the epoch's learning-rate schedule
step).

Faults. A node's error in an actor stops the run and is re-raised in the driver as the same
:class:`~amp_notebook.runtime.worker.NodeError`; a NaN or infinity in a loss or a gradient, found by the
actor's own checks (``on_nonfinite``, as a worker thread's), as the same
:class:`~amp_notebook.runtime.numerics.NonFiniteError` naming node and key (the inputs are checked on the
driver). An actor that dies (its process or machine lost), fails in the runtime's own code, or whose step
thread ends raises :class:`~amp_notebook.runtime.restart.WorkerLostError`, naming the worker, the nodes it
hosted and the machine; with ``max_failures`` the run restarts instead (:meth:`RayBackend.restart`: the
actors killed, the session back at its last checkpoint, fresh actors). The driver loop keeps the watchdog
(``watchdog_s``): each reply says how many messages the actor has handled, and keys in flight with none
handled anywhere for that long stop the run with a
:class:`~amp_notebook.runtime.watchdog.StuckRunError` and its diagnosis. Whatever ends the run, every
actor of it is killed before ``run`` returns or raises.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from amp_notebook.ir.message import Message
from amp_notebook.ir.serialize import graph_to_dict
from amp_notebook.optim import DEFAULT_OPTIMIZER, optimizer_memory
from amp_notebook.runtime.backend import admit_by_messages
from amp_notebook.runtime.backends import ray_cluster
from amp_notebook.runtime.backends.ray_actor import encode, host_class, writable
from amp_notebook.runtime.backends.ray_cluster import ClockOffset, ClusterError, alive_nodes, measure_offset, node_for
from amp_notebook.runtime.backends.ray_credits import Completion
from amp_notebook.runtime.backends.ray_rows import append_worker_rows
from amp_notebook.runtime.controller import Action, KeyInfo
from amp_notebook.runtime.knobs import KnobChange
from amp_notebook.runtime.numerics import NonFiniteError
from amp_notebook.runtime.recover import drive, restart_session
from amp_notebook.runtime.restart import WorkerLostError
from amp_notebook.runtime.session import Session
from amp_notebook.runtime.watchdog import Diagnosis, StuckRunError, Watchdog, diagnose
from amp_notebook.runtime.worker import NodeError

POLL_S = 0.25  # an actor answers its long poll at least this often (trace rows for a live dashboard)
WAIT_S = 0.05  # the driver looks at queued live changes at least this often
START_TIMEOUT_S = 120.0  # actors not placed by then: the cluster lacks room for them


class RayBackend:
    """Worker actors on a Ray cluster (module docstring); implements :class:`~amp_notebook.runtime.backend.Backend`.
    Owns the actors, their outboxes, the weighted-credit :class:`Completion` and the clock offsets; never
    changes the session beyond the protocol's calls (knob changes reach the actors through its listener)."""

    def __init__(self, session: Session, address: str | None = None, num_cpus: int | None = None) -> None:
        self.session = session
        plan = session.plan
        workers = session.config.workers
        ray_cluster.connect(address, num_cpus)
        self.ledger = Completion()  # made again by _fresh, as at each restart
        self.calls: queue.SimpleQueue[Callable[[], list[Action]]] = queue.SimpleQueue()
        self.started = threading.Event()
        self._lock = threading.Lock()
        self.origin = 0.0
        self.wall_s = 0.0
        self.hosts: list[Any] = []
        self.missed_rows = 0
        self._hosted = [[plan.names[i] for i in range(len(plan.names)) if plan.owner[i] == w] for w in range(workers)]
        session.knobs.subscribe(self.knobs_changed)
        self._start_actors()

    def _fresh(self) -> None:
        """The state of one set of actors: run id, ledger, outboxes, acknowledgements, progress, watchdog."""
        workers = self.session.config.workers
        self.run_id = uuid.uuid4().hex[:8]
        self.ledger = Completion()
        self.outboxes: list[list[Any]] = [[] for _ in range(workers)]
        self._acks: list[Any] = []
        self.finished = False
        self.hosts = []
        self.where: list[dict[str, Any]] = []
        self.offsets: list[ClockOffset] = []
        self.drift_s: list[float] = []
        self.counts: list[dict[str, int]] = []
        self.handled = [0] * workers  # messages each actor has handled, as its last reply said
        watchdog_s = self.session.config.watchdog_s
        self.watchdog = Watchdog(watchdog_s) if watchdog_s is not None else None
        self._watched = 0.0

    # ------------------------------------------------------------------ deployment
    def _deploy(self) -> None:
        session, plan, config, knobs = self.session, self.session.plan, self.session.config, self.session.knobs
        setup = {  # the settings as JSON; the live knobs and the optimizer as the run has them now
            "graph": graph_to_dict(plan.graph), "placement": {n: plan.owner[i] for i, n in enumerate(plan.names)},
            "config": config.as_json(), "optimizer": _default_optimizer_spec(plan),
            "min_update_frequency": list(knobs.min_update_frequency), "max_bundle": list(knobs.max_bundle),
            "paused": knobs.paused,
        }  # fmt: skip
        nodes = alive_nodes()
        host = host_class()
        for w in range(config.workers):
            node = node_for(w, nodes)
            contexts = {i: session.contexts[i] for i in range(len(plan.names)) if plan.owner[i] == w}
            options = {
                "name": f"amp-worker-{self.run_id}-{w}", "num_cpus": 0, "max_restarts": 0,
                "scheduling_strategy": NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            }  # fmt: skip
            self.hosts.append(host.options(**options).remote(w, setup, contexts))
        try:
            self.where = ray.get([h.start.remote(self.hosts) for h in self.hosts], timeout=START_TIMEOUT_S)
        except GetTimeoutError:
            raise ClusterError(
                f"the Ray cluster did not start {config.workers} worker actors within {START_TIMEOUT_S:.0f} s "
                f"(nodes: {[n['NodeManagerAddress'] for n in nodes]}); is amp_notebook installed on every node?"
            ) from None
        except RayActorError as exc:
            raise ClusterError(
                f"a Ray worker actor failed to start: {exc}; is the same version of amp_notebook installed on "
                "every node of the cluster?"
            ) from exc
        self.offsets = [measure_offset(h) for h in self.hosts]

    # ------------------------------------------------------------------ Backend protocol
    def admit(self, infos: Sequence[KeyInfo]) -> list[bool]:
        return [admit_by_messages(self.session, self, info) for info in infos]

    def inject(self, msgs: list[Message]) -> None:
        """Messages from the controller (a key's inputs, weighed by the ledger, or a flush's updates), batched
        per worker."""
        owner, share_of = self.session.plan.owner, self.ledger.share_of
        for m in msgs:
            self.outboxes[owner[m.node]].append(encode(m, share_of(m)))

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def call(self, fn: Callable[[], list[Action]]) -> None:
        """Run ``fn() -> actions`` in the driver loop (live changes from other threads)."""
        self.calls.put(fn)

    # ------------------------------------------------------------------ the driver loop
    def run(self) -> None:
        """Drive the run to the end in the calling thread; raises the first worker error (a lost worker only
        once the session's restarts are spent)."""
        self.origin = time.perf_counter()
        self.started.set()
        drive(self, self._drive)

    def _drive(self) -> None:
        session = self.session
        self.wall_s = 0.0
        try:
            self.finished = session.begin(self)
            pending = {h.events.remote(POLL_S): w for w, h in enumerate(self.hosts)}
            tick = self.watchdog.tick_s if self.watchdog is not None else None
            while not self.finished:
                self._send_outboxes()
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_S)
                self._run_calls()
                for ref in ready:
                    w = pending.pop(ref)
                    self.finished |= self._absorb(w, self._get(w, ref))
                    if not self.finished:
                        pending[self.hosts[w].events.remote(POLL_S)] = w
                if tick is not None and not self.finished and time.monotonic() - self._watched >= tick:
                    self.watch()
            self.wall_s = time.perf_counter() - self.origin
            self._finish(pending)
        finally:
            if not self.wall_s:
                self.wall_s = time.perf_counter() - self.origin
            self._kill()

    def restart(self, checkpoint: Any) -> None:
        """After a lost worker: every actor killed, the session back at ``checkpoint``, fresh actors deployed
        with its state (a new run id names them). The clock and the driver's trace buffers go on."""
        self._kill()
        restart_session(self.session, checkpoint)
        self._start_actors()

    def _start_actors(self) -> None:
        """Fresh state and a new set of actors; any actor already started is killed if the deployment fails."""
        self._fresh()
        try:
            self._deploy()
        except BaseException:
            self._kill()
            raise

    def watch(self) -> None:
        """The watchdog's look (driver loop): raise :class:`StuckRunError` if keys are in flight and no actor
        has handled a message for ``watchdog_s`` (by the counts their replies carry)."""
        assert self.watchdog is not None
        now = self._watched = time.monotonic()
        if self.watchdog.stuck(sum(self.handled), self.ledger.busy(), self.session.knobs.paused, now):
            raise StuckRunError(self.diagnose(
                f"no message handled for {self.watchdog.idle_s(now):.1f} s while keys are in flight "
                f"(watchdog_s={self.watchdog.timeout_s:g})"
            ))  # fmt: skip

    def _get(self, w: int, ref: Any) -> Any:
        try:
            return ray.get(ref)
        except RayActorError as exc:
            raise WorkerLostError(w, self._hosted[w], self._where(w), exc) from exc

    def _where(self, w: int) -> str:
        if w < len(self.where):
            return f"node {self.where[w]['ip']} (Ray node {self.where[w]['node_id'][:12]}, pid {self.where[w]['pid']})"
        return "an unknown node"

    def _absorb(self, w: int, batch: dict[str, Any], final: bool = False) -> bool:
        """One reply of worker ``w``: error, reports, trace rows, then returned weights. True once finished."""
        error = batch["error"]
        if error is not None:
            raise _rebuild(error, w, self._hosted[w], self._where(w))
        session = self.session
        if not final and not batch["alive"]:
            raise WorkerLostError(w, self._hosted[w], self._where(w), "its step thread ended while the run was going")
        self.handled[w] = batch["handled"]
        if batch["skipped"] and session.numerics is not None:
            session.numerics.skipped.update(batch["skipped"])
        session.workers[w].reports.extend(batch["reports"])
        self.missed_rows += append_worker_rows(session.buffers[w], batch["rows"], self.offsets[w].offset_s)
        if final:
            return True
        done, flushed = self.ledger.absorb(batch["returned"], batch["flushes"])
        if not (done or flushed):
            return False
        return session.completed(done, flushed, self)

    def _send_outboxes(self) -> None:
        for w, box in enumerate(self.outboxes):
            if box:
                self.hosts[w].receive.remote(box)
                self.outboxes[w] = []

    def _run_calls(self) -> None:
        """Functions queued by a live Run, after the actors acknowledged pause/resume (changed thresholds reach
        the actors as the functions change the knobs: :meth:`knobs_changed`)."""
        if self.calls.empty():
            return
        self._wait_acks()
        while not self.calls.empty() and not self.finished:
            self.finished |= self.session.carry_out(self.calls.get_nowait()(), self)

    def knobs_changed(self, change: KnobChange) -> None:
        """Forward a change of the session's knobs to every actor. Thresholds change on the driver thread (a
        live Run's queued function): every actor takes them before we go on. A pause or resume comes from the
        caller's thread: its acknowledgements are awaited before the next queued function runs."""
        if change.knob == "max_active_keys":  # the controller's, on the driver
            return
        refs = [h.change_knob.remote(change.knob, change.nodes, change.value) for h in self.hosts]
        if change.knob == "paused":
            with self._lock:
                self._acks.extend(refs)
            return
        for w, ref in enumerate(refs):
            self._get(w, ref)

    def _wait_acks(self) -> None:
        with self._lock:
            acks, self._acks = self._acks, []
        for w, ref in enumerate(acks):
            self._get(w % len(self.hosts), ref)

    # ------------------------------------------------------------------ node states, epoch ends and the end
    def sync_state(self) -> None:
        """Bring every parameterized node's state from the actors into the session's contexts (no message in
        flight): what an epoch end averages and a mid-run checkpoint captures."""
        self._fetch_states()

    def epoch_ended(self, nodes: Sequence[int]) -> None:
        """The session averaged ``nodes`` (replicas: parameters and optimizer memory): each actor takes its nodes'
        averages and steps its optimizers' per-epoch schedules, before the next epoch's keys are admitted."""
        plan, contexts = self.session.plan, self.session.contexts
        averaged: list[dict[str, dict[str, Any]]] = [{} for _ in self.hosts]
        for i in nodes:
            memory = optimizer_memory(contexts[i].opt_state)
            averaged[plan.owner[i]][plan.names[i]] = {"params": contexts[i].params, "opt_state": memory}
        for w, ref in enumerate([h.end_epoch.remote(averaged[w]) for w, h in enumerate(self.hosts)]):
            self._get(w, ref)

    def _fetch_states(self) -> list[dict[str, dict[str, Any]]]:
        """Every parameterized node's parameters, optimizer memory and version, into the session's contexts."""
        states = [self._get(w, ref) for w, ref in enumerate([h.node_states.remote() for h in self.hosts])]
        for per_worker in states:
            self._store_states(per_worker)
        return states

    def _store_states(self, per_worker: dict[str, dict[str, Any]]) -> None:
        index, contexts = self.session.plan.index, self.session.contexts
        for name, state in per_worker.items():
            ctx = contexts[index[name]]
            ctx.params = writable(state["params"])
            ctx.opt_state = writable(state["opt_state"])
            ctx.version = state["version"]
            ctx.reset_grads()  # the actor's pending gradients (if any) replace what the driver held
            if state.get("n_grads"):
                ctx.grads = writable(state["grads"])
                ctx.n_grads = state["n_grads"]
                ctx.grad_keys = set(state["grad_keys"])

    def _finish(self, pending: dict[Any, int]) -> None:
        """The run is finished: the last trace rows and reports, final parameters, clock drift."""
        finals = [h.final.remote() for h in self.hosts]
        for ref, w in pending.items():
            self._absorb(w, self._get(w, ref), final=True)
        for w, ref in enumerate(finals):
            batch = self._get(w, ref)
            self._absorb(w, batch, final=True)
            self._store_states(batch["node_states"])
            self.counts.append(batch["counts"])
        self.session.collect_reports()
        ends = [measure_offset(h, pings=4) for h in self.hosts]
        self.drift_s = [end.offset_s - start.offset_s for end, start in zip(ends, self.offsets, strict=True)]

    def diagnose(self, reason: str) -> Diagnosis:
        """What is in flight (the ledger's weights still out), queued and held in each actor now."""
        keys, flushes = self.ledger.in_flight()
        facts = [self._get(w, ref) for w, ref in enumerate([h.activity.remote() for h in self.hosts])]
        session = self.session
        return diagnose(
            reason, session.plan, session.contexts, keys, flushes, [f["depth"] for f in facts],
            [f["doing"] for f in facts], held=[h for f in facts for h in f["held"]],
        )  # fmt: skip

    def shutdown(self, timeout: float | None = None) -> None:
        """Kill every actor of the run (they hold nothing the driver has not fetched once it has ended)."""
        self._kill()

    def _kill(self) -> None:
        for h in self.hosts:
            with contextlib.suppress(Exception):  # already dead: nothing is left behind
                ray.kill(h, no_restart=True)

    # ------------------------------------------------------------------ results
    def stats(self) -> dict[str, Any]:
        """Where each worker ran, its clock offset and the estimate's error bound, the drift, messages sent."""
        workers = []
        for w, where in enumerate(self.where):
            row = {"worker": w, "nodes": self._hosted[w], "ip": where.get("ip"), "ray_node": where.get("node_id")}
            row.update(self.offsets[w].as_dict(), drift_s=self.drift_s[w] if w < len(self.drift_s) else None)
            row.update(self.counts[w] if w < len(self.counts) else {})
            workers.append(row)
        return {
            "backend": "ray",
            "run_id": self.run_id,
            "workers": workers,
            "clock_error_s": max((o.error_s for o in self.offsets), default=0.0),
            "missed_trace_rows": self.missed_rows,
        }

    def worker_time(self) -> list[dict[str, Any]] | None:
        """None: the actors' Python loops do not count their own time (the trace's utilization does)."""
        return None


def _default_optimizer_spec(plan: Any) -> dict[str, Any]:
    """The run-wide optimizer's settings (nodes with their own optimizer carry it in the graph JSON)."""
    graph = plan.graph
    for i, name in enumerate(plan.names):
        if plan.optimizers[i] is not None and graph.nodes[name].optimizer is None:
            return plan.optimizers[i].spec()
    return {"name": DEFAULT_OPTIMIZER}


def _rebuild(error: dict[str, Any], worker: int, hosted: list[str], where: str) -> BaseException:
    """An actor's error, re-raised in the driver: a node's error as the same NodeError, a NaN as the same
    NonFiniteError, a failure of the runtime's own code as a lost worker."""
    if error["kind"] == "nonfinite":
        return NonFiniteError(error["node"], error["op"], error["what"], error["keys"], error["detail"])
    if error["kind"] == "node":
        from amp_notebook.ir.message import State

        cause = error["cause"]
        if cause is None:  # it did not survive pickling: a stand-in that keeps the type's name in the message
            cause = type(error["cause_type"], (RuntimeError,), {})(error["cause_text"])
        state = State(error["state"]) if isinstance(error["state"], dict) else error["state"]  # a bundle's: text
        exc = NodeError(error["node"], error["op"], error["direction"], error["port"], state, cause)
        exc.__cause__ = cause
        return exc
    lost = WorkerLostError(worker, hosted, where, f"the runtime's own code failed: {error['text']}")
    lost.__cause__ = RuntimeError(f"in the actor:\n{error['traceback']}")
    return lost


def live_actors() -> list[dict[str, Any]]:
    """Actors of amp_notebook runs that are alive in the connected cluster (none once every run has ended)."""
    from ray._private.state import actors

    return [a for a in actors().values() if a.get("State") != "DEAD" and a.get("Name", "").startswith("amp-worker-")]


shutdown = ray_cluster.shutdown
connect = ray_cluster.connect

__all__ = ["RayBackend", "WorkerLostError", "connect", "live_actors", "shutdown"]
