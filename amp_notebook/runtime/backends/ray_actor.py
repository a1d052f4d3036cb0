"""One worker of a Ray run, in its own process: a mailbox, an inbox and a step thread, like a worker thread.

:class:`WorkerHost` is a Ray actor (made with :func:`host_class`). It builds the plan from the graph's
JSON (the same :func:`~amp_notebook.runtime.plan.compile_plan` as the driver, with the driver's placement
and thresholds), owns the node contexts placed on it, and runs a *step thread* that does what a worker
thread of the threaded backend does: drain the mailbox into the :class:`~amp_notebook.runtime.inbox.Inbox`,
take a bundle, run :meth:`~amp_notebook.runtime.worker.Worker.step` on it. What differs is passed in:

* ``credits`` is a :class:`~amp_notebook.runtime.backends.ray_credits.WeightLedger` (weighted credit
  recovery: completion across processes without a race; see that module);
* ``deliver`` puts messages for this worker straight into its own inbox and the others into one outbox
  per destination; after the step each non-empty outbox goes out as *one* fire-and-forget call
  (``peer.receive.remote(batch)``): several messages ready for the same worker travel together, and none
  passes through the driver.

Three groups of methods run on their own threads, so none blocks another: ``receive`` (the mail), ``events``
(a long poll: it waits until something was returned or ``timeout_s`` passed, then gives the driver the
returned weights, loss reports and new trace rows, all in one reply), and the control methods (ping for
the clocks, pause, knobs, parameters, epoch end, final).

On the wire a message is a plain tuple (node, port, direction, payload, state items, train, weight): the
state is rebuilt on arrival, because a :class:`~amp_notebook.ir.message.State` caches its hash and string
hashes differ between processes.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from typing import Any

import numpy as np
import ray
from threadpoolctl import threadpool_limits

from amp_notebook.ir.message import Message, State
from amp_notebook.ir.ops import NodeContext
from amp_notebook.ir.serialize import graph_from_dict
from amp_notebook.optim import make_optimizer
from amp_notebook.runtime.backends.ray_credits import Weight, WeightLedger
from amp_notebook.runtime.backends.ray_rows import read_new_rows
from amp_notebook.runtime.backends.threads import MeasuredTime
from amp_notebook.runtime.config import RunConfig
from amp_notebook.runtime.inbox import Inbox
from amp_notebook.runtime.plan import compile_plan, end_epoch_optimizers
from amp_notebook.runtime.worker import NodeError, Worker
from amp_notebook.trace.buffers import WorkerBuffer

Wire = tuple[int, str, int, Any, tuple, bool, int, int]
IDLE_WAIT_S = 0.05


def encode(msg: Message, weight: Weight) -> Wire:
    return (msg.node, msg.port, msg.direction, msg.payload, msg.state._items, msg.train, weight[0], weight[1])


def decode(wire: Wire) -> tuple[Message, Weight]:
    node, port, direction, payload, items, train, num, exp = wire
    return Message(node, port, direction, writable(payload), State(dict(items)), train), (num, exp)


def writable(payload: Any) -> Any:
    """Ray hands arrays over read-only (zero copy out of its buffers); ops may update payloads in place."""
    if isinstance(payload, np.ndarray):
        return payload if payload.flags.writeable else payload.copy()
    if isinstance(payload, tuple):
        return tuple(writable(p) for p in payload)
    if isinstance(payload, list):
        return [writable(p) for p in payload]
    if isinstance(payload, dict):
        return {k: writable(v) for k, v in payload.items()}
    return payload


def node_state(ctx: NodeContext) -> dict[str, Any]:
    """What a parameterized node's training has changed: parameters, optimizer memory, version, and the
    gradients it holds toward its next update (``amp`` mode; a checkpoint keeps them)."""
    held = {"grads": ctx.grads, "n_grads": ctx.n_grads, "grad_keys": sorted(ctx.grad_keys)} if ctx.n_grads else {}
    return {"params": ctx.params, "opt_state": ctx.opt_state, "version": ctx.version, **held}


class WorkerHost:
    """A worker in its own process; see the module docstring. Made a Ray actor by :func:`host_class`."""

    def __init__(self, index: int, setup: dict[str, Any], contexts: dict[int, NodeContext]) -> None:
        graph = graph_from_dict(setup["graph"])
        config = RunConfig.from_json(setup["config"], "Ray worker setup")
        plan = compile_plan(graph, setup["placement"], config.workers, 1, make_optimizer(setup["optimizer"]))
        plan.min_update_frequency[:] = setup["min_update_frequency"]
        plan.max_bundle[:] = setup["max_bundle"]
        for ctx in contexts.values():  # arrays arrive read-only; optimizers update them in place
            ctx.params = writable(ctx.params)
            ctx.grads = writable(ctx.grads)
            ctx.opt_state = writable(ctx.opt_state)
        self.index = index
        self.plan = plan
        self.contexts = contexts
        self.worker = Worker(
            index, plan, contexts, local_updates=config.mode == "amp", buffer=WorkerBuffer(config.trace_capacity),
            clock=time.perf_counter, tracing=config.trace,
        )  # fmt: skip
        self.inbox = Inbox(plan.max_bundle, config.priority, config.order, self.worker.bundle_cap)
        self.ledger = WeightLedger(self.worker.reports)
        self.mailbox: deque[tuple[Message, Weight]] = deque()
        self.wake = threading.Event()
        self.sleeping = False
        self.paused = False
        self.stopped = False
        self.ready = threading.Event()  # set when the step thread may report (returns or an error)
        self.error: dict[str, Any] | None = None
        self.peers: list[Any] = []
        self.outboxes: list[list[Wire]] = [[] for _ in range(config.workers)]
        self.owner = plan.owner
        self.cursors: dict[str, int] = {}  # per trace table: the next row to ship
        self._ship_lock = threading.Lock()  # the events thread and ``final`` may ship at the same time
        self.handled = 0
        self.calls_sent = 0
        self.messages_sent = 0
        self.thread = threading.Thread(target=self._run, name=f"amp-ray-worker-{index}", daemon=True)

    # ------------------------------------------------------------------ control (default group)
    def start(self, peers: list[Any]) -> dict[str, Any]:
        """Learn the other workers' handles and start stepping; where this worker runs."""
        self.peers = peers
        self.thread.start()
        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(), "pid": _pid()}

    def ping(self) -> float:
        """This process's clock (``time.perf_counter``): the driver aligns trace times with it."""
        return time.perf_counter()

    def set_paused(self, paused: bool) -> bool:
        self.paused = paused
        self.wake.set()
        return paused

    def set_knobs(self, min_update_frequency: list[int], max_bundle: list[int]) -> None:
        """Live changes of per-node thresholds (workers read them at every gradient / take)."""
        self.plan.min_update_frequency[:] = min_update_frequency
        self.plan.max_bundle[:] = max_bundle

    def knobs(self) -> dict[str, Any]:
        """What this worker goes by now: per-node thresholds and whether forward work is paused."""
        plan = self.plan
        return {"min_update_frequency": list(plan.min_update_frequency), "max_bundle": list(plan.max_bundle),
                "paused": self.paused}  # fmt: skip

    def node_states(self) -> dict[str, dict[str, Any]]:
        """Parameters, optimizer memory and version of the parameterized nodes placed here."""
        names, parameterized = self.plan.names, self.plan.parameterized
        return {names[i]: node_state(ctx) for i, ctx in self.contexts.items() if parameterized[i]}

    def end_epoch(self, params: dict[str, dict[str, Any]]) -> None:
        """Epoch-end work while no message is in flight: averaged replica parameters, lr schedules."""
        index = self.plan.index
        for name, p in params.items():
            ctx = self.contexts[index[name]]
            for k, v in p.items():
                ctx.params[k][...] = v
        end_epoch_optimizers(self.plan)

    def final(self) -> dict[str, Any]:
        """Stop stepping; the rows not shipped yet, the reports and the final node states."""
        self.stopped = True
        self.wake.set()
        self.ready.set()
        if self.thread.is_alive():
            self.thread.join()
        batch = self._batch()
        batch["node_states"] = self.node_states()
        batch["counts"] = {"handled": self.handled, "calls_sent": self.calls_sent,
                           "messages_sent": self.messages_sent}  # fmt: skip
        return batch

    # ------------------------------------------------------------------ mail
    @ray.method(concurrency_group="mail")
    def receive(self, batch: list[Wire]) -> None:
        append = self.mailbox.append
        for wire in batch:
            append(decode(wire))
        if self.sleeping:
            self.wake.set()

    # ------------------------------------------------------------------ events (a long poll)
    @ray.method(concurrency_group="events")
    def events(self, timeout_s: float) -> dict[str, Any]:
        self.ready.wait(timeout_s)
        self.ready.clear()
        return self._batch()

    def _batch(self) -> dict[str, Any]:
        with self._ship_lock:
            returned, flushes, reports = self.ledger.take()
            rows = read_new_rows(self.worker.buffer, self.cursors)
        return {"returned": returned, "flushes": flushes, "reports": reports, "rows": rows, "error": self.error}

    # ------------------------------------------------------------------ the step thread
    def _run(self) -> None:
        try:
            with threadpool_limits(limits=1, user_api="blas"):
                self._loop()
        except NodeError as exc:
            cause = exc.__cause__
            self.error = {
                "kind": "node", "node": exc.node, "op": exc.kind, "direction": exc.direction, "port": exc.port,
                "state": dict(exc.state) if isinstance(exc.state, State) else exc.state, "cause": _portable(cause),
                "cause_type": type(cause).__name__, "cause_text": str(cause),
            }  # fmt: skip
        except BaseException as exc:  # our own glue: report it with its traceback
            text = f"{type(exc).__name__}: {exc}"
            self.error = {"kind": "internal", "text": text, "traceback": traceback.format_exc()}
        finally:
            if self.error is not None:
                self.stopped = True
                self.ready.set()

    def _loop(self) -> None:
        mailbox, inbox, ledger = self.mailbox, self.inbox, self.ledger
        push, pop, take, hold, begin = inbox.push, mailbox.popleft, inbox.take, ledger.hold, ledger.begin
        step = self.worker.step
        timer = MeasuredTime()
        deliver = self._deliver
        while not self.stopped:
            while mailbox:
                msg, weight = pop()
                hold(msg, weight)
                push(msg)
            bundle = take(not self.paused)
            if bundle is None:
                self._idle()
                continue
            begin(bundle)
            step(bundle, len(inbox) + len(mailbox), timer, ledger, deliver)
            self.handled += len(bundle)
            self._send()
            if ledger.has_returns():
                self.ready.set()

    def _deliver(self, msgs: list[Message], at: float = 0.0) -> None:
        """Messages for this worker go into its inbox now; the others wait in their outbox until the step ends."""
        me, owner, outboxes, ledger = self.index, self.owner, self.outboxes, self.ledger
        for m in msgs:
            dst = owner[m.node]
            if dst == me:
                self.inbox.push(m)  # its weight stays in the ledger
            else:
                outboxes[dst].append(encode(m, ledger.weight_of(m)))

    def _send(self) -> None:
        for dst, box in enumerate(self.outboxes):
            if box:
                self.peers[dst].receive.remote(box)
                self.calls_sent += 1
                self.messages_sent += len(box)
                self.outboxes[dst] = []

    def _idle(self) -> None:
        self.sleeping = True
        self.wake.clear()
        if self.mailbox or self.stopped or self.inbox.has_work(not self.paused):
            self.sleeping = False
            return
        self.wake.wait(IDLE_WAIT_S)
        self.sleeping = False


def _portable(exc: BaseException | None) -> BaseException | None:
    """The exception itself if it survives a round trip through pickle (Ray's transport), else None."""
    if exc is None:
        return None
    try:
        copy = ray.cloudpickle.loads(ray.cloudpickle.dumps(exc))
    except Exception:
        return None
    return copy if type(copy) is type(exc) and str(copy) == str(exc) else None


def _pid() -> int:
    import os

    return os.getpid()


def host_class(max_concurrency_mail: int = 1) -> Any:
    """The Ray actor class of :class:`WorkerHost`: one thread each for mail, events and control."""
    return ray.remote(concurrency_groups={"mail": max_concurrency_mail, "events": 1})(WorkerHost)


__all__ = ["WorkerHost", "decode", "encode", "host_class", "node_state"]
