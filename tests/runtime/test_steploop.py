"""The step loop a worker thread and a Ray worker actor share: drain, take, step, idle and wake, stop."""

from __future__ import annotations

import threading
import time

import numpy as np

from amp_notebook import models
from amp_notebook.ir.message import BWD, FWD, Message
from amp_notebook.optim import make_optimizer
from amp_notebook.runtime.controller import KeyInfo
from amp_notebook.runtime.credits import Credits
from amp_notebook.runtime.inbox import Inbox
from amp_notebook.runtime.session import RunConfig, Session
from amp_notebook.runtime.steploop import StepLoop

WAIT_S = 2.0


def one_worker(digits, **settings):
    config = RunConfig(workers=1, mode="amp", dtype="float64", **settings)
    session = Session(models.mlp(input_width=64, hidden=8), digits, config, make_optimizer("sgd"))
    worker = session.workers[0]
    credits = Credits()
    done: list[int] = []
    loop = StepLoop(worker, Inbox(session.knobs, limit=worker.bundle_cap), credits, session.knobs,
                    lambda keys, flushes: done.extend(keys))  # fmt: skip
    return session, loop, credits, done


def admit(session, credits, loop, key: int, batch) -> list[Message]:
    msgs = session.input_messages(KeyInfo(key, 0, True, batch))
    credits.admit_key(key, msgs)
    for m in msgs:
        loop.post(m)
    return msgs


def start(loop: StepLoop, deliver=None) -> threading.Thread:
    thread = threading.Thread(target=loop.run, args=(deliver or (lambda msgs, at: [loop.post(m) for m in msgs]),),
                              name="amp-test-steploop", daemon=True)  # fmt: skip
    thread.start()
    return thread


def until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_the_loop_steps_every_message_of_a_key_reports_it_and_stops(digits):
    session, loop, credits, done = one_worker(digits)
    admit(session, credits, loop, 0, digits.train[0])
    thread = start(loop)
    until(lambda: done == [0], "key 0 to complete")
    rows = session.buffers[0].snapshot()[0]
    assert loop.handled == len(rows["end"]) - int((rows["phase"] == 2).sum())  # every message once; updates aside
    assert not credits.busy() and loop.current is None
    until(lambda: loop.sleeping, "the idle loop to sleep")
    loop.stop()
    thread.join(WAIT_S)
    assert not thread.is_alive()


def test_an_idle_loop_sleeps_and_a_post_wakes_it_at_once(digits):
    session, loop, credits, done = one_worker(digits)
    thread = start(loop)
    try:
        until(lambda: loop.sleeping, "the empty loop to sleep")
        posted = time.perf_counter()
        admit(session, credits, loop, 3, digits.train[1])
        until(lambda: done == [3], "key 3 to complete")
        assert time.perf_counter() - posted < WAIT_S
    finally:
        loop.stop()
        thread.join(WAIT_S)
    assert not thread.is_alive()


def test_a_paused_loop_takes_backward_work_and_holds_forward_work(digits):
    session, loop, credits, done = one_worker(digits)
    session.knobs.set_paused(True)
    msgs = admit(session, credits, loop, 0, digits.train[0])
    node = session.plan.index["linear1"]  # its input needs no gradient: its backward sends nothing on
    x = digits.train[1].inputs["x"].astype(np.float64)
    warm = Message(node, "in", FWD, x, msgs[0].state.replace(key=9))
    loop.worker.handle([warm])  # cached for the backward that follows
    grad = Message(node, "out", BWD, np.ones((len(x), 8)), warm.state)
    credits.admit_key(9, [grad])
    loop.post(grad)
    thread = start(loop)
    try:
        until(lambda: done == [9], "the backward message to be handled")
        until(lambda: loop.sleeping, "the paused loop to sleep with forward work held")
        assert loop.handled == 1 and loop.inbox.forward_waiting() == len(msgs)
        session.knobs.set_paused(False)
        loop.wake.set()
        until(lambda: done == [9, 0], "key 0 to complete after the resume")
    finally:
        loop.stop()
        thread.join(WAIT_S)


def test_a_step_error_ends_the_loop_and_propagates(digits):
    session, loop, credits, _ = one_worker(digits)
    (first, *_) = admit(session, credits, loop, 0, digits.train[0])
    node = session.plan.index["linear2"]
    loop.post(Message(node, "out", BWD, np.ones((1, 8)), first.state))  # taken first; nothing cached for it
    errors: list[BaseException] = []

    def run() -> None:
        try:
            loop.run(lambda msgs, at: [loop.post(m) for m in msgs])
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="amp-test-steploop", daemon=True)
    thread.start()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert errors and "Linear 'linear2' failed on a bwd message" in str(errors[0])
