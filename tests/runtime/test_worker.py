"""The worker as a pure state machine, and the worker step every backend drives: no threads, no clocks.

Messages go in by hand, outgoing messages and trace rows come out; a scripted timer gives the step its
times and a list stands in for delivery, so the order of "send on, then update, then release credits" is
visible.
"""

from __future__ import annotations

import numpy as np
import pytest

from amp_notebook import models
from amp_notebook.ir.message import BWD, FWD, UPDATE, Message, State
from amp_notebook.ir.ops import NodeContext
from amp_notebook.optim import make_optimizer
from amp_notebook.runtime.credits import Credits
from amp_notebook.runtime.plan import compile_plan
from amp_notebook.runtime.worker import NodeError, Worker
from amp_notebook.trace.buffers import WorkerBuffer


def small(min_update_frequency: int = 1, local_updates: bool = True):
    g = models.mlp(input_width=3, hidden=4, classes=2, layers=2)
    plan = compile_plan(g, dict.fromkeys(g.nodes, 0), 1, min_update_frequency, make_optimizer("sgd"))
    params = g.init_params(0, np.dtype(np.float64))
    contexts = {}
    for i, name in enumerate(plan.names):
        ctx = NodeContext(name, params.get(name, {}))
        ctx.grad_inputs, ctx.grad_outputs = plan.grad_inputs[i], plan.grad_outputs[i]
        contexts[i] = ctx
    worker = Worker(0, plan, contexts, local_updates=local_updates, buffer=WorkerBuffer(None))
    return plan, worker


class ScriptedTime:
    """Each handling takes 1.0, each update 0.5, starting at 10.0."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def start(self) -> float:
        return 10.0

    def handled(self, start, bundle) -> float:
        return start + 1.0

    def update_start(self, previous_end) -> float:
        self.log.append("update")
        return previous_end

    def updated(self, start, node) -> float:
        return start + 0.5


def msg(plan, node: str, port: str, direction: int, payload, key: int = 0) -> Message:
    return Message(plan.index[node], port, direction, payload, State(key=key))


def test_forward_routes_along_edges_and_a_loss_starts_the_backward_pass():
    plan, worker = small()
    x = np.ones((2, 3))
    (out,) = worker.handle([msg(plan, "x", "in", FWD, x)])
    assert (plan.names[out.node], out.port, out.direction) == ("linear1", "in", FWD)
    (h,) = worker.handle([out])
    (r,) = worker.handle([h])
    (logits,) = worker.handle([r])
    assert worker.handle([logits]) == []  # the loss waits for its target
    (target,) = worker.handle([msg(plan, "target", "in", FWD, np.array([0, 1]))])
    (back,) = worker.handle([target])  # joined: loss reported, gradient sent back to linear2
    assert (plan.names[back.node], back.port, back.direction) == ("linear2", "out", BWD)
    assert worker.reports and worker.reports[0][1]["n"] == 2


def test_backward_records_staleness_and_makes_an_update_due_at_min_update_frequency():
    plan, worker = small(min_update_frequency=2)
    node = plan.index["linear2"]
    x = np.ones((1, 4))
    for key in (0, 1):
        worker.handle([Message(node, "in", FWD, x, State(key=key))])
    worker.contexts[node].version = 3  # two updates happened meanwhile elsewhere in a real run
    worker.handle([Message(node, "out", BWD, np.ones((1, 2)), State(key=0))])
    assert worker.due_updates == []  # one gradient of two
    worker.handle([Message(node, "out", BWD, np.ones((1, 2)), State(key=1))])
    assert worker.due_updates == [node]
    columns = worker.buffer.snapshot()[1]
    assert columns["value"].tolist() == [3, 3] and columns["key"].tolist() == [0, 1]


def test_step_sends_outputs_before_the_update_and_releases_credits_after_it():
    plan, worker = small()
    credits = Credits()
    node = plan.index["linear2"]
    worker.handle([Message(node, "in", FWD, np.ones((1, 4)), State(key=0))])  # cached for backward
    log: list[str] = []
    delivered: list[Message] = []

    def deliver(msgs, at):
        log.append("deliver")
        assert credits.keys[0] == 2  # the outputs' credit is counted before they leave
        delivered.extend(msgs)

    bundle = [Message(node, "out", BWD, np.ones((1, 2)), State(key=0))]
    credits.admit_key(0, bundle)
    completed, end = worker.step(bundle, 5, ScriptedTime(log), credits, deliver)
    assert log == ["deliver", "update"]
    assert [plan.names[m.node] for m in delivered] == ["relu1"]
    assert (completed, end) == (None, 11.5)  # nothing completed
    assert credits.keys == {0: 1}  # the handled message gave its credit up, its output holds one
    events = worker.buffer.snapshot()[0]
    assert events["phase"].tolist() == [BWD, UPDATE]
    assert events["start"].tolist() == [10.0, 11.0] and events["end"].tolist() == [11.0, 11.5]
    assert events["depth"].tolist() == [5, 5] and worker.contexts[node].version == 1


def test_step_reports_completed_keys_and_flushes():
    plan, worker = small(local_updates=False)
    credits = Credits()
    node = plan.index["linear2"]
    worker.handle([Message(node, "in", FWD, np.ones((1, 4)), State(key=4))])
    worker.contexts[node].train = False
    bundle = [Message(plan.index["relu1"], "out", BWD, np.ones((1, 4)), State(key=4))]
    credits.admit_key(4, bundle)
    worker.contexts[plan.index["relu1"]].cache[State(key=4)] = (np.ones((1, 4)), np.ones((1, 4)))
    completed, _ = worker.step(bundle, 0, ScriptedTime([]), credits, lambda m, at: None)
    assert completed is None  # relu1 sends a gradient on to linear1: still a message of key 4
    worker.contexts[node].n_grads = 1
    worker.contexts[node].grads = {k: np.zeros_like(v) for k, v in worker.contexts[node].params.items()}
    worker.contexts[node].grad_keys.add(4)
    update = [Message(node, "", UPDATE, None, State(flush=0))]
    credits.admit_flush(0, update)
    assert update[0].key == -1  # flush 0 shows as key -1 in the trace
    completed, _ = worker.step(update, 0, ScriptedTime([]), credits, lambda m, at: None)
    assert completed == ([], [0])


def test_an_error_in_an_op_names_node_direction_port_and_state():
    plan, worker = small()
    with pytest.raises(NodeError, match=r"Linear 'linear1' failed on a bwd message at port 'out' with state .*key=9"):
        worker.handle([msg(plan, "linear1", "out", BWD, np.ones((1, 4)), key=9)])  # nothing cached for key 9
