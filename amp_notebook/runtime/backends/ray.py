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
queued by a background :class:`~amp_notebook.runtime.run.Run` (``call``). Changed thresholds
(``min_update_frequency``, ``max_bundle``: the plan's lists are mirrored to the actors as they are assigned)
and pause/resume reach every actor, acknowledged, before the Run's method returns.

Epoch ends. No message is in flight, so the driver fetches every parameterized node's state from the
actors (the session's contexts then hold the parameters as of that epoch end: results and checkpoints
read them), averages replica groups exactly as the session does, and sends the averages back with the
epoch's learning-rate schedule step.

Faults. A node's error in an actor stops the run and is re-raised in the driver as the same
:class:`~amp_notebook.runtime.worker.NodeError`. An actor that dies (its process or machine lost) raises
:class:`WorkerLostError`, naming the worker, the nodes it hosted and the machine. Whatever ends the run,
every actor of it is killed before ``run`` returns or raises.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from amp_notebook.errors import AmpError
from amp_notebook.ir.message import UPDATE, Message
from amp_notebook.ir.serialize import graph_to_dict
from amp_notebook.optim import DEFAULT_OPTIMIZER, average_parameters
from amp_notebook.runtime.backends import ray_cluster
from amp_notebook.runtime.backends.ray_actor import encode, host_class, writable
from amp_notebook.runtime.backends.ray_cluster import ClockOffset, alive_nodes, measure_offset, node_for
from amp_notebook.runtime.backends.ray_credits import ZERO, Completion
from amp_notebook.runtime.backends.ray_rows import append_worker_rows
from amp_notebook.runtime.controller import Action
from amp_notebook.runtime.session import Session
from amp_notebook.runtime.worker import NodeError

POLL_S = 0.25  # an actor answers its long poll at least this often (trace rows for a live dashboard)
WAIT_S = 0.05  # the driver looks at queued live changes at least this often
START_TIMEOUT_S = 120.0  # actors not placed by then: the cluster lacks room for them


class WorkerLostError(AmpError, RuntimeError):
    """A worker's actor died (its process or its machine was lost); the run stopped."""

    def __init__(self, worker: int, nodes: list[str], where: str, cause: BaseException) -> None:
        self.worker, self.nodes, self.where = worker, nodes, where
        super().__init__(
            f"Ray worker {worker} (hosting nodes {nodes}, on {where}) died: {type(cause).__name__}: "
            f"{str(cause).splitlines()[0] if str(cause) else ''}. The run stopped and its other actors were "
            "killed; train again (from a checkpoint, if you saved one)"
        )


class _RemoteFlag:
    """``paused`` as the Run sees it (set / clear / is_set), mirrored to every actor."""

    def __init__(self, backend: RayBackend) -> None:
        self._backend = backend
        self._set = False

    def set(self) -> None:
        self._set = True
        self._backend._send_paused(True)

    def clear(self) -> None:
        self._set = False
        self._backend._send_paused(False)

    def is_set(self) -> bool:
        return self._set


class _MirroredList(list):
    """A plan's per-node knob list (``min_update_frequency``, ``max_bundle``) whose item assignments, made by
    a live Run on the driver thread, reach every actor before the assignment returns."""

    def __init__(self, items: list[int], changed: Callable[[], None]) -> None:
        super().__init__(items)
        self._changed = changed

    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(index, value)
        self._changed()


class RayBackend:
    def __init__(self, session: Session, address: str | None = None, num_cpus: int | None = None) -> None:
        self.session = session
        plan = session.plan
        workers = session.config.workers
        ray_cluster.connect(address, num_cpus)
        self.run_id = uuid.uuid4().hex[:8]
        self.completion = Completion()
        self.outboxes: list[list[Any]] = [[] for _ in range(workers)]
        self.calls: queue.SimpleQueue[Callable[[], list[Action]]] = queue.SimpleQueue()
        self.started = threading.Event()
        self.paused = _RemoteFlag(self)
        self.threads: tuple[()] = ()  # the Run wakes worker threads after resume; actors are woken by the flag
        self._acks: list[Any] = []
        self._lock = threading.Lock()
        self.finished = False
        self.origin = 0.0
        self.wall_s = 0.0
        self.hosts: list[Any] = []
        self.where: list[dict[str, Any]] = []
        self.offsets: list[ClockOffset] = []
        self.drift_s: list[float] = []
        self.counts: list[dict[str, int]] = []
        self.missed_rows = 0
        plan.min_update_frequency = _MirroredList(plan.min_update_frequency, self._send_knobs)
        plan.max_bundle = _MirroredList(plan.max_bundle, self._send_knobs)
        self._hosted = [[plan.names[i] for i in range(len(plan.names)) if plan.owner[i] == w] for w in range(workers)]
        session.average_replicas = self._epoch_end  # type: ignore[method-assign]  # params live in the actors
        try:
            self._deploy()
        except BaseException:
            self._kill()
            raise

    # ------------------------------------------------------------------ deployment
    def _deploy(self) -> None:
        session, plan, config = self.session, self.session.plan, self.session.config
        setup = {  # the settings as JSON; the plan's per-node knobs and the optimizer as the run has them now
            "graph": graph_to_dict(plan.graph), "placement": {n: plan.owner[i] for i, n in enumerate(plan.names)},
            "config": config.as_json(), "optimizer": _default_optimizer_spec(plan),
            "min_update_frequency": list(plan.min_update_frequency), "max_bundle": list(plan.max_bundle),
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
            raise RuntimeError(
                f"the Ray cluster did not start {config.workers} worker actors within {START_TIMEOUT_S:.0f} s "
                f"(nodes: {[n['NodeManagerAddress'] for n in nodes]}); is amp_notebook installed on every node?"
            ) from None
        except RayActorError as exc:
            raise RuntimeError(f"a Ray worker actor failed to start: {exc}") from exc
        self.offsets = [measure_offset(h) for h in self.hosts]

    # ------------------------------------------------------------------ Backend protocol
    def inject(self, msgs: list[Message]) -> None:
        """Messages from the controller (a key's inputs, or a flush's updates): weighed, then batched per worker."""
        if not msgs:
            return
        owner = self.session.plan.owner
        if msgs[0].direction == UPDATE:
            self.completion.inject_flush(msgs[0].state["flush"], len(msgs))  # type: ignore[arg-type]
            weights = [ZERO] * len(msgs)
        else:
            weights = self.completion.inject_key(msgs[0].key, len(msgs))
        for m, w in zip(msgs, weights, strict=True):
            self.outboxes[owner[m.node]].append(encode(m, w))

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def call(self, fn: Callable[[], list[Action]]) -> None:
        """Run ``fn() -> actions`` in the driver loop (live changes from other threads)."""
        self.calls.put(fn)

    # ------------------------------------------------------------------ the driver loop
    def run(self) -> None:
        """Drive the run to the end in the calling thread; raises the first worker error."""
        session = self.session
        try:
            self.origin = time.perf_counter()
            self.started.set()
            self.finished = session.begin(self)
            pending = {h.events.remote(POLL_S): w for w, h in enumerate(self.hosts)}
            while not self.finished:
                self._send_outboxes()
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_S)
                self._run_calls()
                for ref in ready:
                    w = pending.pop(ref)
                    self.finished |= self._absorb(w, self._get(w, ref))
                    if not self.finished:
                        pending[self.hosts[w].events.remote(POLL_S)] = w
            self.wall_s = time.perf_counter() - self.origin
            self._finish(pending)
        finally:
            if not self.wall_s:
                self.wall_s = time.perf_counter() - self.origin
            self._kill()

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
            raise _rebuild(error, w, self._hosted[w])
        session = self.session
        session.workers[w].reports.extend(batch["reports"])
        self.missed_rows += append_worker_rows(session.buffers[w], batch["rows"], self.offsets[w].offset_s)
        if final:
            return True
        done, flushed = self.completion.absorb(batch["returned"], batch["flushes"])
        if not (done or flushed):
            return False
        for key in done:  # the session's own ledger was given these keys by carry_out; they are done
            session.credits.keys.pop(key, None)
        for fid in flushed:
            session.credits.flushes.pop(fid, None)
        return session.completed(done, flushed, self)

    def _send_outboxes(self) -> None:
        for w, box in enumerate(self.outboxes):
            if box:
                self.hosts[w].receive.remote(box)
                self.outboxes[w] = []

    def _run_calls(self) -> None:
        """Functions queued by a live Run, after the actors acknowledged pause/resume (changed thresholds reach
        the actors as the functions assign them: :class:`_MirroredList`)."""
        if self.calls.empty():
            return
        self._wait_acks()
        while not self.calls.empty() and not self.finished:
            self.finished |= self.session.carry_out(self.calls.get_nowait()(), self)

    def _send_knobs(self) -> None:
        """The plan's thresholds changed (a live Run, on this thread): every actor takes them before we go on."""
        plan = self.session.plan
        knobs = (list(plan.min_update_frequency), list(plan.max_bundle))
        for w, ref in enumerate([h.set_knobs.remote(*knobs) for h in self.hosts]):
            self._get(w, ref)

    def _send_paused(self, paused: bool) -> None:
        with self._lock:
            self._acks.extend(h.set_paused.remote(paused) for h in self.hosts)

    def _wait_acks(self) -> None:
        with self._lock:
            acks, self._acks = self._acks, []
        for w, ref in enumerate(acks):
            self._get(w % len(self.hosts), ref)

    # ------------------------------------------------------------------ epoch end and the end
    def _epoch_end(self) -> None:
        """The session's replica averaging, for a Ray run (module docstring: epoch ends)."""
        self._fetch_states()
        plan = self.session.plan
        averaged: list[dict[str, dict[str, Any]]] = [{} for _ in self.hosts]
        for group in plan.replica_groups:
            holders = [SimpleNamespace(params=self.session.contexts[i].params) for i in group]
            average_parameters(holders)  # the same arithmetic as the threaded backend
            for i in group:
                averaged[plan.owner[i]][plan.names[i]] = self.session.contexts[i].params
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

    def sync_contexts(self) -> None:
        """Bring every parameterized node's state from the actors into the session's contexts (no message in
        flight): what ``Run.save`` captures mid-run, as the threaded backend's contexts always hold it."""
        self._fetch_states()

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


def _default_optimizer_spec(plan: Any) -> dict[str, Any]:
    """The run-wide optimizer's settings (nodes with their own optimizer carry it in the graph JSON)."""
    graph = plan.graph
    for i, name in enumerate(plan.names):
        if plan.optimizers[i] is not None and graph.nodes[name].optimizer is None:
            return plan.optimizers[i].spec()
    return {"name": DEFAULT_OPTIMIZER}


def _rebuild(error: dict[str, Any], worker: int, hosted: list[str]) -> BaseException:
    """An actor's error, re-raised in the driver: a node's error as the same NodeError."""
    if error["kind"] == "node":
        from amp_notebook.ir.message import State

        cause = error["cause"]
        if cause is None:  # it did not survive pickling: a stand-in that keeps the type's name in the message
            cause = type(error["cause_type"], (RuntimeError,), {})(error["cause_text"])
        state = State(error["state"]) if isinstance(error["state"], dict) else error["state"]  # a bundle's: text
        exc = NodeError(error["node"], error["op"], error["direction"], error["port"], state, cause)
        exc.__cause__ = cause
        return exc
    return RuntimeError(
        f"Ray worker {worker} (hosting nodes {hosted}) failed in the runtime: {error['text']}\n{error['traceback']}"
    )


def live_actors() -> list[dict[str, Any]]:
    """Actors of amp_notebook runs that are alive in the connected cluster (none once every run has ended)."""
    from ray._private.state import actors

    return [a for a in actors().values() if a.get("State") != "DEAD" and a.get("Name", "").startswith("amp-worker-")]


shutdown = ray_cluster.shutdown
connect = ray_cluster.connect

__all__ = ["RayBackend", "WorkerLostError", "connect", "live_actors", "shutdown"]
