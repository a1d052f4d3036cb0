"""The backend contract: a minimal backend written only against the protocol runs a whole session.

:class:`TurnTakingBackend` is about the smallest thing that implements
:class:`~amp_notebook.runtime.backend.Backend`: one thread, the workers take turns (each takes one bundle
from its inbox per round), a step costs one tick of a counter clock, completion is counted by
:class:`~amp_notebook.runtime.credits.Credits`. It uses only what ``backend.py`` says a backend may use
(``session.begin``/``completed``/``carry_out``, ``workers``, ``plan``, ``knobs``, ``config``, ``contexts``),
so if it trains like the interpreter, a new engine can plug in the same way without touching the session.
A completeness guard checks that every backend of the package implements every method of the protocol, and
every backend of the package (threads with the Python engine, threads with the native engine, the
simulator) trains like the interpreter and is driven by a live Run through the protocol alone.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from amp_notebook import engine, models
from amp_notebook.engine.backend import NativeBackend
from amp_notebook.engine.simulated import NativeSimulatedBackend
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.ir.message import UPDATE, Message
from amp_notebook.optim import DEFAULT_OPTIMIZER, make_optimizer
from amp_notebook.runtime.backend import Backend, admit_by_messages
from amp_notebook.runtime.backends.simulated import SimulatedBackend
from amp_notebook.runtime.backends.threads import ThreadedBackend
from amp_notebook.runtime.controller import Action, KeyInfo
from amp_notebook.runtime.credits import Credits
from amp_notebook.runtime.inbox import Inbox
from amp_notebook.runtime.knobs import KnobChange
from amp_notebook.runtime.launch import backend_for, build_session
from amp_notebook.runtime.recover import restart_session
from amp_notebook.runtime.reference import train_reference
from amp_notebook.runtime.run import Run
from amp_notebook.runtime.session import RunConfig, Session
from amp_notebook.runtime.train import BACKGROUND_BACKENDS
from amp_notebook.runtime.watchdog import Diagnosis, StuckRunError, diagnose
from tests.conftest import lists_dataset


class TickTime:
    """Each handled bundle takes one tick, each update half a tick."""

    def __init__(self) -> None:
        self.now = 0.0

    def start(self) -> float:
        return self.now

    def handled(self, start: float, bundle: Sequence[Message]) -> float:
        self.now = start + 1.0
        return self.now

    def update_start(self, previous_end: float) -> float:
        return previous_end

    def updated(self, start: float, node: int) -> float:
        self.now = start + 0.5
        return self.now


class TurnTakingBackend:
    """A backend written against the protocol only (module docstring)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.ledger = Credits()
        self.started = threading.Event()
        self.origin = 0.0
        self.wall_s = 0.0
        self.timer = TickTime()
        config = session.config
        self.inboxes = [
            Inbox(session.knobs, config.inbox_priority, config.order, w.bundle_cap, session.plan.parameterized)
            for w in session.workers
        ]
        self.calls: deque[Callable[[], list[Action]]] = deque()
        self.called = threading.Event()
        self.heard: list[KnobChange] = []
        self.synced = 0
        self.epochs_ended: list[list[int]] = []
        self.steps = 0
        self.shut = False
        session.knobs.subscribe(self.knobs_changed)

    def run(self) -> None:
        session, owner = self.session, self.session.plan.owner

        def deliver(msgs: list[Message], at: float) -> None:
            for m in msgs:
                self.inboxes[owner[m.node]].push(m)

        self.started.set()
        finished = session.begin(self)
        while not finished:
            moved = False
            forward = not session.knobs.paused  # read once a round: a Run pauses from another thread
            for w, worker in enumerate(session.workers):
                bundle = self.inboxes[w].take(forward)
                if bundle is None:
                    continue
                moved = True
                self.steps += 1
                completed, _ = worker.step(bundle, len(self.inboxes[w]), self.timer, self.ledger, deliver)
                if completed is not None:
                    finished = session.completed(*completed, self)
                    if finished:
                        break
            while self.calls and not finished:
                finished = session.carry_out(self.calls.popleft()(), self)
                moved = True  # a call may have admitted keys: look again before calling the run stuck
            if not moved and not finished and not self.calls:
                if self.ledger.busy() and forward:
                    raise StuckRunError(self.diagnose("no worker can take anything"))
                self.called.wait(0.01)  # nothing to do until a live Run calls (resume, admission after a save)
                self.called.clear()
        self.wall_s = self.timer.now

    def admit(self, infos: Sequence[KeyInfo]) -> list[bool]:
        return [admit_by_messages(self.session, self, info) for info in infos]

    def inject(self, msgs: list[Message]) -> None:
        owner = self.session.plan.owner
        for m in msgs:
            self.inboxes[owner[m.node]].push(m)

    def now(self) -> float:
        return self.timer.now

    def call(self, fn: Callable[[], list[Action]]) -> None:
        self.calls.append(fn)
        self.called.set()

    def knobs_changed(self, change: KnobChange) -> None:
        self.heard.append(change)

    def sync_state(self) -> None:
        self.synced += 1

    def epoch_ended(self, nodes: Sequence[int]) -> None:
        self.epochs_ended.append(list(nodes))

    def diagnose(self, reason: str) -> Diagnosis:
        keys, flushes = self.ledger.in_flight()
        session = self.session
        depths = [len(i) for i in self.inboxes]
        return diagnose(reason, session.plan, session.contexts, keys, flushes, depths, ["idle"] * len(depths))

    def stats(self) -> dict[str, Any]:
        return {"steps": self.steps}

    def worker_time(self) -> list[dict[str, Any]] | None:
        return None

    def shutdown(self, timeout: float | None = None) -> None:
        self.shut = True

    def restart(self, checkpoint: Any) -> None:
        restart_session(self.session, checkpoint)
        self.ledger = Credits()
        config = self.session.config
        self.inboxes = [Inbox(self.session.knobs, config.inbox_priority, config.order, w.bundle_cap,
                              self.session.plan.parameterized) for w in self.session.workers]  # fmt: skip


def small_rnn(replicas: int = 1):
    return models.rnn(hidden=16, embedding_dim=8, replicas=replicas)


@pytest.fixture(scope="module")
def lists():
    return lists_dataset(n_train=300, n_val=60)


# ------------------------------------------------------------------ the fake backend trains a session


@pytest.mark.parametrize(("model", "workers"), [("mlp", 2), ("rnn", 3), ("rnn_x2", 2)])
def test_a_backend_written_against_the_protocol_trains_like_the_interpreter(digits, lists, model, workers):
    if model == "mlp":
        graph, dataset = models.mlp(input_width=64, hidden=16), digits
    else:
        graph, dataset = small_rnn(replicas=2 if model == "rnn_x2" else 1), lists
    start = graph.init_params(5, np.float64)
    interp = Interpreter(graph, params=start, dtype=np.float64)
    train_reference(interp, dataset, epochs=2, seed=5)
    expected = interp.params()

    config = RunConfig(workers=workers, mode="sync", epochs=2, seed=5, dtype="float64")
    session = Session(graph, dataset, config, make_optimizer(DEFAULT_OPTIMIZER), start)
    backend = TurnTakingBackend(session)
    backend.run()
    got = session.params()
    for name, params in expected.items():
        for k, v in params.items():
            np.testing.assert_allclose(got[name][k], v, rtol=1e-12, atol=1e-15)
    assert len(session.history) == 2 and session.history[-1].val_instances == sum(b.size for b in dataset.val)
    # the session asked for the node states and handed back the averaged replicas at each epoch end
    assert backend.synced == 2
    replicas = [session.plan.index[n] for n in ("step0", "step1")] if model == "rnn_x2" else []
    assert backend.epochs_ended == [replicas, replicas]
    assert not backend.ledger.busy()


def test_every_key_completes_in_amp_mode_with_bundles(lists):
    config = RunConfig(workers=2, mode="amp", max_active_keys=6, epochs=1, max_bundle=4, dtype="float64")
    session = Session(small_rnn(), lists, config, make_optimizer(DEFAULT_OPTIMIZER))
    backend = TurnTakingBackend(session)
    backend.run()
    assert session.train_instances_done == sum(b.size for b in lists.train)
    assert max(int(b.snapshot()[0]["messages"].max(initial=0)) for b in session.buffers) > 1  # bundles formed
    steps = sum(int((b.snapshot()[0]["phase"] != UPDATE).sum()) for b in session.buffers)  # update rows aside
    assert backend.stats()["steps"] == steps


def test_a_live_run_drives_the_protocol_backend_and_its_knobs_reach_it(digits):
    """Run (the background handle) needs nothing of a backend beyond the protocol: pause, knobs, stop."""
    graph = models.mlp(input_width=64, hidden=16)
    config = RunConfig(workers=2, mode="amp", max_active_keys=2, epochs=50, dtype="float64")
    session = Session(graph, digits, config, make_optimizer(DEFAULT_OPTIMIZER))
    backend = TurnTakingBackend(session)
    run = Run(session, backend, lambda: None)  # type: ignore[arg-type,return-value]
    try:
        run.set_min_update_frequency("linear2", 3)
        run.set_max_bundle(None, 2)
        run.set_max_active_keys(3)
        run.pause()
        assert run.status["state"] == "paused"
        run.resume()
        checkpoint = run.checkpoint()
        assert checkpoint.params.keys() == session.params().keys()
    finally:
        run.stop()
    linear2 = session.plan.index["linear2"]
    assert [c.knob for c in backend.heard][:4] == ["min_update_frequency", "max_bundle", "max_active_keys", "paused"]
    assert backend.heard[0] == KnobChange("min_update_frequency", (linear2,), 3)
    assert KnobChange("paused", (), False) in backend.heard
    assert backend.synced >= 1  # the checkpoint asked for the node states
    assert run.status["min_update_frequency"]["linear2"] == 3 and run.status["max_bundle"] == 2
    assert run.state == "finished"


def test_a_lost_message_gives_the_protocol_backends_diagnosis(digits):
    session = Session(models.mlp(input_width=64, hidden=16), digits, RunConfig(workers=2))
    backend = TurnTakingBackend(session)
    dropped = []
    real_inject = backend.inject

    def lose_the_first(msgs: list[Message]) -> None:
        if not dropped:
            dropped.append(msgs[0])
            msgs = msgs[1:]
        real_inject(msgs)

    backend.inject = lose_the_first  # type: ignore[method-assign]
    with pytest.raises(StuckRunError, match="no worker can take anything") as info:
        backend.run()
    assert dropped[0].key in info.value.diagnosis.keys_in_flight


# ------------------------------------------------------------------ every backend implements the protocol


def protocol_methods() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(fn) for name, fn in vars(Backend).items() if callable(fn) and not name.startswith("_")
    }


def backend_classes() -> list[type]:
    classes: list[type] = [ThreadedBackend, SimulatedBackend, NativeBackend, NativeSimulatedBackend, TurnTakingBackend]
    try:
        from amp_notebook.runtime.backends.ray import RayBackend
    except ImportError:  # without the [ray] extra
        return classes
    return [*classes, RayBackend]


@pytest.mark.parametrize("cls", backend_classes(), ids=lambda c: c.__name__)
def test_every_backend_implements_every_method_of_the_protocol(cls):
    methods = protocol_methods()
    assert set(methods) == {
        "run", "admit", "inject", "now", "call", "knobs_changed", "sync_state", "epoch_ended", "diagnose", "stats",
        "worker_time", "shutdown", "restart",
    }  # fmt: skip
    for name, expected in methods.items():
        fn = getattr(cls, name, None)
        assert callable(fn), f"{cls.__name__} lacks {name}()"
        got = [p.name for p in inspect.signature(fn).parameters.values()]
        assert got == [p.name for p in expected.parameters.values()], f"{cls.__name__}.{name}{inspect.signature(fn)}"
    attributes = set(Backend.__annotations__)
    assert attributes == {"ledger", "started", "origin", "wall_s"}
    init = "".join(inspect.getsource(c.__init__) for c in cls.__mro__ if "__init__" in vars(c) and c is not object)
    for attribute in attributes:
        assert f"self.{attribute} =" in init, f"{cls.__name__} does not set {attribute}"
    assert "knobs.subscribe(self.knobs_changed)" in init, f"{cls.__name__} does not listen to the session's knobs"


# ------------------------------------------------------------------ every backend of the package, through the protocol

# the native engine's runs need the extension: they fail without it, unless it was left unbuilt on purpose
NATIVE_SKIP = pytest.mark.skipif(
    not engine.available() and os.environ.get("AMP_NATIVE", "1") == "0",
    reason="AMP_NATIVE=0: the native engine was not built on purpose",
)
PACKAGE_BACKENDS = [
    pytest.param("threads", "python", id="threads"),
    pytest.param("threads", "native", id="native", marks=NATIVE_SKIP),
    pytest.param("simulated", "python", id="simulated"),
    pytest.param("simulated", "native", id="native-simulated", marks=NATIVE_SKIP),
]


def package_backend(graph, dataset, backend: str, engine_name: str, **settings: Any) -> tuple[Session, Backend]:
    config = RunConfig(workers=2, backend=backend, engine=engine_name, dtype="float64", **settings)
    session, _ = build_session(graph, dataset, config)
    runner = backend_for(session)
    classes = {("threads", "python"): ThreadedBackend, ("threads", "native"): NativeBackend,
               ("simulated", "python"): SimulatedBackend, ("simulated", "native"): NativeSimulatedBackend}  # fmt: skip
    assert type(runner) is classes[backend, engine_name]
    return session, runner


@pytest.mark.parametrize(("backend", "engine_name"), PACKAGE_BACKENDS)
def test_every_package_backend_trains_like_the_interpreter_in_sync_mode(digits, backend, engine_name):
    graph = models.mlp(input_width=64, hidden=16)
    start = graph.init_params(3, np.float64)
    interp = Interpreter(graph, params=start, dtype=np.float64)
    train_reference(interp, digits, epochs=2, seed=3)
    session, runner = package_backend(graph, digits, backend, engine_name, mode="sync", epochs=2, seed=3)
    for name, params in start.items():  # the session starts from the interpreter's weights
        for k, v in params.items():
            session.contexts[session.plan.index[name]].params[k][...] = v
    runner.run()
    got = session.params()
    for name, params in interp.params().items():
        for k, v in params.items():
            np.testing.assert_allclose(got[name][k], v, rtol=1e-10, atol=1e-13, err_msg=f"{backend}/{engine_name}")
    assert len(session.history) == 2 and not runner.ledger.busy()


LIVE_BACKENDS = [p for p in PACKAGE_BACKENDS if p.values[0] in BACKGROUND_BACKENDS]  # those a Run may drive


@pytest.mark.parametrize(("backend", "engine_name"), LIVE_BACKENDS)
def test_a_live_run_drives_every_package_backend_through_its_knobs(digits, backend, engine_name):
    """The session's knobs reach each backend (a knob the workers read elsewhere, as the native engine's, is
    forwarded by its listener), pause holds forward work, a checkpoint reads synced state, stop ends the run."""
    graph = models.mlp(input_width=64, hidden=16)
    session, runner = package_backend(graph, digits, backend, engine_name, mode="amp", max_active_keys=2, epochs=50)
    run = Run(session, runner, lambda: None)  # type: ignore[arg-type,return-value]
    try:
        run.set_min_update_frequency("linear2", 3)
        run.set_max_bundle(None, 2)
        run.set_max_active_keys(3)
        run.pause()
        assert run.status["state"] == "paused"
        run.resume()
        checkpoint = run.checkpoint()
        assert checkpoint.params.keys() == session.params().keys()
    finally:
        run.stop()
    assert run.state == "finished"
    assert run.status["min_update_frequency"]["linear2"] == 3 and run.status["max_bundle"] == 2
    assert session.knobs.max_active_keys == 3 and not session.knobs.paused
