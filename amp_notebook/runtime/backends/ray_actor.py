"""One worker of a Ray run, in its own process: the same step loop as a worker thread.

:class:`WorkerHost` is a Ray actor (made with :func:`host_class`). It builds the plan from the graph's
JSON (the same :func:`~amp_notebook.runtime.plan.compile_plan` as the driver, with the driver's placement),
its own :class:`~amp_notebook.runtime.knobs.Knobs` from the driver's values (the driver forwards every
later change: :meth:`WorkerHost.change_knob`), owns the node contexts placed on it, and runs a *step
thread*: the :class:`~amp_notebook.runtime.steploop.StepLoop` a worker thread of the threaded backend runs
(drain the mailbox, take a bundle, :meth:`~amp_notebook.runtime.worker.Worker.step`, idle). What differs
is passed in:

* the ledger is a :class:`~amp_notebook.runtime.backends.ray_credits.WeightLedger` (weighted credit
  recovery: completion across processes without a race; see that module). Arriving messages give it their
  weights on the mail thread, before the step thread can see them;
* ``deliver`` puts messages for this worker straight into its own inbox and the others into one outbox
  per destination, and sends each non-empty outbox as *one* fire-and-forget call
  (``peer.receive.remote(batch)``): the messages a step emits for the same worker travel together, and
  none passes through the driver.

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
from typing import Any

import numpy as np
import ray
from threadpoolctl import threadpool_limits

from amp_notebook.ir.message import PHASES, Message, State
from amp_notebook.ir.ops import NodeContext
from amp_notebook.ir.serialize import graph_from_dict
from amp_notebook.optim import make_optimizer
from amp_notebook.runtime.backends.ray_credits import Weight, WeightLedger
from amp_notebook.runtime.backends.ray_rows import read_new_rows
from amp_notebook.runtime.config import RunConfig
from amp_notebook.runtime.inbox import Inbox
from amp_notebook.runtime.knobs import Knobs
from amp_notebook.runtime.numerics import Guard, NonFiniteError
from amp_notebook.runtime.plan import compile_plan, end_epoch_optimizers
from amp_notebook.runtime.steploop import StepLoop
from amp_notebook.runtime.watchdog import held_states
from amp_notebook.runtime.worker import NodeError, Worker
from amp_notebook.trace.buffers import WorkerBuffer

Wire = tuple[int, str, int, Any, tuple, bool, int, int]


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
        knobs = Knobs(1, setup["min_update_frequency"], setup["max_bundle"], setup["paused"])
        for ctx in contexts.values():  # arrays arrive read-only; optimizers update them in place
            ctx.params = writable(ctx.params)
            ctx.grads = writable(ctx.grads)
            ctx.opt_state = writable(ctx.opt_state)
        self.index = index
        self.plan = plan
        self._knobs = knobs
        self.contexts = contexts
        self.worker = Worker(
            index, plan, contexts, local_updates=config.mode == "amp", knobs=knobs,
            buffer=WorkerBuffer(config.trace_capacity), tracing=config.trace, bundle_budget_s=config.bundle_budget_s,
        )  # fmt: skip
        if config.on_nonfinite != "ignore":  # losses and gradients are checked here; inputs on the driver
            self.worker.numerics = Guard(config.on_nonfinite, plan, None)
        self.skipped_sent = 0  # keys skipped for NaN/inf already shipped to the driver
        self.ready = threading.Event()  # set when the step thread has something to report (returns or an error)
        self.ledger = WeightLedger(self.worker.reports, self.ready)
        inbox = Inbox(knobs, config.inbox_priority, config.order, self.worker.bundle_cap, plan.parameterized)
        self.loop = StepLoop(self.worker, inbox, self.ledger, knobs)
        self.error: dict[str, Any] | None = None
        self.peers: list[Any] = []
        self.outboxes: list[list[Wire]] = [[] for _ in range(config.workers)]
        self.owner = plan.owner
        self.cursors: dict[str, int] = {}  # per trace table: the next row to ship
        self._ship_lock = threading.Lock()  # the events thread and ``final`` may ship at the same time
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

    def change_knob(self, knob: str, nodes: tuple[int, ...], value: Any) -> None:
        """A change of the driver's knobs, made here too (the step thread reads them in place)."""
        if knob == "paused":
            self._knobs.set_paused(value)
            self.loop.wake.set()
        elif knob == "min_update_frequency":
            self._knobs.set_min_update_frequency(nodes, value)
        elif knob == "max_bundle":
            self._knobs.set_max_bundle(nodes, value)

    def knobs(self) -> dict[str, Any]:
        """What this worker goes by now: per-node thresholds and whether forward work is paused."""
        return self._knobs.values()

    def activity(self) -> dict[str, Any]:
        """For a diagnosis: messages queued here, the bundle in hand (if any), the keys its nodes hold state for."""
        loop, plan = self.loop, self.plan
        bundle = loop.current
        doing = "idle"
        if not self.thread.is_alive():
            doing = "thread ended" if self.error is None else "failed"
        elif bundle is not None:
            m = bundle[0]
            doing = f"inside {plan.describe(m.node)} {PHASES[m.direction]} for key {m.key}"
        contexts = [self.contexts.get(i, NodeContext(name)) for i, name in enumerate(plan.names)]
        return {"depth": len(loop.inbox) + len(loop.mailbox), "doing": doing, "held": held_states(plan, contexts)}

    def node_states(self) -> dict[str, dict[str, Any]]:
        """Parameters, optimizer memory and version of the parameterized nodes placed here."""
        names, parameterized = self.plan.names, self.plan.parameterized
        return {names[i]: node_state(ctx) for i, ctx in self.contexts.items() if parameterized[i]}

    def end_epoch(self, params: dict[str, dict[str, Any]]) -> None:
        """Epoch-end work while no message is in flight: averaged replica parameters and optimizer memory
        (``{node: {"params": ..., "opt_state": ...}}``), lr schedules."""
        index = self.plan.index
        for name, averaged in params.items():
            ctx = self.contexts[index[name]]
            for k, v in averaged["params"].items():
                ctx.params[k][...] = v
            for k, v in averaged["opt_state"].items():
                if k in ctx.opt_state:
                    ctx.opt_state[k][...] = v
                else:  # a replica that had not updated yet: the average is its first memory
                    ctx.opt_state[k] = np.array(v)
        end_epoch_optimizers(self.plan)

    def final(self) -> dict[str, Any]:
        """Stop stepping; the rows not shipped yet, the reports and the final node states."""
        self.loop.stop()
        self.ready.set()
        if self.thread.is_alive():
            self.thread.join()
        batch = self._batch()
        batch["node_states"] = self.node_states()
        batch["counts"] = {"handled": self.loop.handled, "calls_sent": self.calls_sent,
                           "messages_sent": self.messages_sent}  # fmt: skip
        return batch

    # ------------------------------------------------------------------ mail
    @ray.method(concurrency_group="mail")
    def receive(self, batch: list[Wire]) -> None:
        hold, append = self.ledger.hold, self.loop.mailbox.append
        for wire in batch:
            msg, weight = decode(wire)
            hold(msg, weight)  # before the step thread can take it
            append(msg)
        if self.loop.sleeping:
            self.loop.wake.set()

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
            skipped = self._new_skipped()
        return {"returned": returned, "flushes": flushes, "reports": reports, "rows": rows, "error": self.error,
                "skipped": skipped, "handled": self.loop.handled, "alive": self.thread.is_alive()}  # fmt: skip

    def _new_skipped(self) -> list[int]:
        """Every key skipped here for NaN/inf so far (``on_nonfinite="skip"``), when some were added since the
        last reply (the guard's set only grows), else none."""
        guard = self.worker.numerics
        if guard is None or len(guard.skipped) == self.skipped_sent:
            return []
        keys = sorted(guard.skipped)
        self.skipped_sent = len(keys)
        return keys

    # ------------------------------------------------------------------ the step thread
    def _run(self) -> None:
        try:
            with threadpool_limits(limits=1, user_api="blas"):
                self.loop.run(self._deliver)
        except NonFiniteError as exc:  # the guard's, from a loss or a gradient here
            self.error = {"kind": "nonfinite", "node": exc.node, "op": exc.kind, "what": exc.what, "keys": exc.keys,
                          "detail": exc.detail}  # fmt: skip
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
                self.loop.stop()
                self.ready.set()

    def _deliver(self, msgs: list[Message], at: float = 0.0) -> None:
        """A step's outgoing messages: for this worker into its inbox now (their weights stay in the ledger),
        for the others into one outbox per destination, each sent as one call."""
        me, owner, outboxes, weight_of = self.index, self.owner, self.outboxes, self.ledger.weight_of
        push = self.loop.inbox.push  # the step thread's own inbox
        for m in msgs:
            dst = owner[m.node]
            if dst == me:
                push(m)
            else:
                outboxes[dst].append(encode(m, weight_of(m)))
        for dst, box in enumerate(outboxes):
            if box:
                self.peers[dst].receive.remote(box)
                self.calls_sent += 1
                self.messages_sent += len(box)
                outboxes[dst] = []


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
