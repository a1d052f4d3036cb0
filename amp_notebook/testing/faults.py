"""Fault injection for the runtime: one fault per run, and what reached the caller.

The promise under test: whatever goes wrong inside a run, the caller gets an error (never a
hang) soon, every thread of the run ends, and the error says what happened. Each case trains a small model
(the MLP on digits, or the list-reduction RNN with its loop through Phi and Cond) on the threaded backend,
with one fault that fires once, at the k-th matching event:

* ``op``: a node's op raises :class:`InjectedFaultError` in its forward or backward, or its optimizer in an update;
  expected at the caller: a :class:`~amp_notebook.runtime.worker.NodeError` naming that node, caused by it;
* ``drop``: a message to a node is never delivered (its credit still counts it): the watchdog stops the run
  with a :class:`~amp_notebook.runtime.watchdog.StuckRunError` whose diagnosis shows the key in flight;
* ``nan``: a message's payload becomes NaN: a :class:`~amp_notebook.runtime.numerics.NonFiniteError`
  before any parameter is updated with it;
* ``glue``: the worker thread's own code fails (its inbox raises): a lost worker, a
  :class:`~amp_notebook.runtime.restart.WorkerLostError` naming it, caused by that error;
* ``vanish``: a worker thread ends without a word (its loop returns): a WorkerLostError (thread ended).

The node, direction or phase and ``k`` are drawn at random from what a clean run of the same setup does
(counted once per setup), so every fault fires. Each case measures the seconds from the moment the fault
fired to the moment ``Run.wait`` raised at the caller, waits at most ``HANG_S`` for that (a hang), then
counts the run's threads still alive after a grace period (leaks).

Run it::

    python -m amp_notebook.testing.faults --faults 200 --seed 0 --json

It prints one line per case and a summary (counts per kind and outcome, hangs, leaks, latency median and
maximum) and exits 1 when any case hung, leaked a thread, took ``LATENCY_LIMIT_S`` or more, or raised an
error other than the one expected.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from amp_notebook.ir.message import BWD, FWD, UPDATE, Message
from amp_notebook.runtime.backends.threads import ThreadedBackend
from amp_notebook.runtime.restart import WorkerLostError
from amp_notebook.runtime.session import Session
from amp_notebook.runtime.steploop import StepLoop
from amp_notebook.runtime.watchdog import StuckRunError
from amp_notebook.runtime.worker import Deliver, NodeError
from amp_notebook.testing.runs import MODES, Setup, census, is_float, start, wrap_deliveries

KINDS = ("op", "drop", "nan", "glue", "vanish")
HANG_S = 30.0  # a run that has not ended this long after its fault fired counts as a hang
LATENCY_LIMIT_S = 5.0
LEAK_GRACE_S = 2.0


class InjectedFaultError(RuntimeError):
    """The error an injected fault raises (never raised by amp_notebook itself)."""


@dataclass
class Fault:
    """One fault: ``kind`` (see the module docstring), where (``node`` and ``phase``: fwd, bwd or update;
    ``worker`` for glue and vanish) and when (the ``k``-th matching event, from 1)."""

    kind: str
    k: int
    node: str | None = None
    phase: str | None = None
    worker: int | None = None
    fired_at: float | None = field(default=None, repr=False)

    def fire(self) -> None:
        if self.fired_at is None:
            self.fired_at = time.perf_counter()

    def describe(self) -> str:
        where = f"{self.node} {self.phase}" if self.node is not None else f"worker {self.worker}"
        return f"{self.kind} at {where} #{self.k}"


@dataclass
class Outcome:
    """What one injected fault did: whether it fired, what reached the caller and how soon, and whether the run hung or
    leaked a thread."""

    setup: str
    fault: str
    fired: bool
    error: str | None  # the exception class at the caller, or None
    expected: bool
    latency_s: float | None  # from the fault firing to the error at the caller
    hung: bool
    leaked: list[str]
    message: str = ""


# ------------------------------------------------------------------------------------------- faults
def await_fault(run: Any) -> tuple[BaseException | None, bool, float | None]:
    """Wait for a faulted run: (what reached the caller, whether it hung past ``HANG_S`` and was stopped, when
    the error was caught on ``time.perf_counter``)."""
    try:
        run.wait(timeout=HANG_S)
    except TimeoutError:
        run.stop(timeout=5)
        return None, True, None
    except BaseException as exc:  # what reached the caller
        return exc, False, time.perf_counter()
    return None, False, None


def draw(setup: Setup, kind: str, rng: random.Random) -> Fault:
    """A fault of ``kind`` that a run of ``setup`` will reach (``k`` within the first half of its events)."""
    c = census(setup)
    if kind in ("op", "drop", "nan"):
        counts = c.floats if kind == "nan" else c.messages  # a NaN goes into float payloads only
        phases = [(node, d) for (node, d), n in counts.items() if n >= 2 and d in (FWD, BWD)]
        if kind == "drop":  # a flush's update messages can be lost too
            phases += [(node, UPDATE) for (node, d), n in c.messages.items() if d == UPDATE and n >= 2]
        elif kind == "op":  # an optimizer step can fail too
            phases += [(node, UPDATE) for node, n in c.updates.items() if n >= 2]
        node, direction = rng.choice(sorted(phases))
        count = c.updates[node] if kind == "op" and direction == UPDATE else counts[node, direction]
        return Fault(kind, rng.randint(1, max(1, count // 2)), node, ("fwd", "bwd", "update")[direction])
    worker = rng.randrange(len(c.steps))
    return Fault(kind, rng.randint(1, max(1, c.steps[worker] // 2)), worker=worker)


def installer(fault: Fault) -> Callable[[Session, ThreadedBackend], None]:
    def install(session: Session, backend: ThreadedBackend) -> None:
        plan = session.plan
        if fault.kind == "op":
            i = plan.index[fault.node]  # type: ignore[index]
            if fault.phase == "update":  # an optimizer may serve several nodes: count this node's steps only
                params = session.contexts[i].params
                _break(plan.optimizers[i], "step", fault, lambda *args: args[0] is params)
            else:
                _break_op(plan.ops[i], "forward" if fault.phase == "fwd" else "backward", fault)
        elif fault.kind in ("drop", "nan"):
            _intercept(session, backend, fault)
        elif fault.kind == "glue":
            inbox = backend.loops[fault.worker].inbox  # type: ignore[index]
            inbox.__class__ = _failing_inbox(type(inbox), fault)
        elif fault.kind == "vanish":
            loop = backend.loops[fault.worker]  # type: ignore[index]
            loop.run = _vanishing(loop, fault)  # type: ignore[method-assign]

    return install


def _break(obj: Any, method: str, fault: Fault, counts: Callable[..., bool] | None = None) -> None:
    """Make ``obj`` (an op or an optimizer of this run's plan, which is immutable) raise at the k-th call of its
    ``method`` (among the calls ``counts(*args)`` accepts): its class becomes a subclass of the same name."""
    base = type(obj)
    real = getattr(base, method)
    calls = [0]

    def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        if counts is None or counts(*args):
            calls[0] += 1
            if calls[0] == fault.k:
                fault.fire()
                raise InjectedFaultError(f"injected: {fault.describe()}")
        return real(self, *args, **kwargs)

    obj.__class__ = type(base.__name__, (base,), {"__slots__": (), method: broken})


def _break_op(op: Any, method: str, fault: Fault) -> None:
    """Make ``op`` raise at its k-th message in ``method``'s direction (``forward`` or ``backward``), counting
    messages as the census does. A worker hands a lone message to ``forward`` and a bundle of several to
    ``forward_bundle`` (a rows op stacks them into one call), so both count: a bundle counts its messages and
    raises if the k-th is among them, and a ``forward`` that the bundle's own code calls per message is not
    counted again."""
    base = type(op)
    single, bundled = getattr(base, method), getattr(base, method + "_bundle")
    seen = [0]
    lock = threading.Lock()  # workers call ops concurrently
    inside = threading.local()  # within a bundle call on this thread

    def reach(n: int) -> None:
        with lock:
            before = seen[0]
            seen[0] += n
        if before < fault.k <= before + n:
            fault.fire()
            raise InjectedFaultError(f"injected: {fault.describe()}")

    def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(inside, "active", False):
            reach(1)
        return single(self, *args, **kwargs)

    def broken_bundle(self: Any, ctx: Any, port: str, payloads: list[Any], states: list[Any]) -> Any:
        reach(len(payloads))
        inside.active = True
        try:
            return bundled(self, ctx, port, payloads, states)
        finally:
            inside.active = False

    op.__class__ = type(base.__name__, (base,), {"__slots__": (), method: broken, method + "_bundle": broken_bundle})


def _intercept(session: Session, backend: ThreadedBackend, fault: Fault) -> None:
    """Drop, or fill with NaN, the k-th message to ``fault.node`` in ``fault.phase``'s direction."""
    target = session.plan.index[fault.node]  # type: ignore[index]
    direction = {"fwd": FWD, "bwd": BWD, "update": UPDATE}[fault.phase]  # type: ignore[index]
    seen = [0]
    lock = threading.Lock()  # workers deliver concurrently

    def matches(m: Message) -> bool:
        if m.node != target or m.direction != direction or (fault.kind == "nan" and not is_float(m.payload)):
            return False
        with lock:
            seen[0] += 1
            return seen[0] == fault.k

    def wrap(real: Callable[..., None]) -> Callable[..., None]:
        def deliver(msgs: list[Message], *at: float) -> None:
            out = []
            for m in msgs:
                if not matches(m):
                    out.append(m)
                elif fault.kind == "nan":
                    fault.fire()
                    nan = np.full(np.shape(m.payload), np.nan)
                    out.append(Message(m.node, m.port, m.direction, nan, m.state, m.train))
                else:
                    fault.fire()  # dropped: its credit stays counted, so its key can never complete
            real(out, *at)

        return deliver

    wrap_deliveries(backend, wrap)


def _failing_inbox(base: type, fault: Fault) -> type:
    """A subclass of the worker's inbox whose k-th bundle taken raises: the runtime's own code failing."""
    taken = [0]

    def take(self: Any, allow_forward: bool = True) -> Any:
        bundle = base.take(self, allow_forward)
        if bundle is not None:
            taken[0] += 1
            if taken[0] == fault.k:
                fault.fire()
                raise InjectedFaultError(f"injected into the runtime's own code: {fault.describe()}")
        return bundle

    return type(base.__name__, (base,), {"__slots__": (), "take": take})


def _vanishing(loop: StepLoop, fault: Fault) -> Callable[[Deliver], None]:
    """The worker's loop, ending quietly (no error reported) once it has handled k messages."""
    real_step = loop.worker.step

    def step(bundle: list[Message], *args: Any) -> Any:
        result = real_step(bundle, *args)
        if loop.handled + len(bundle) >= fault.k:
            fault.fire()
            raise _Vanish
        return result

    real_run = type(loop).run

    def run_then_vanish(deliver: Deliver) -> None:
        loop.worker.step = step  # type: ignore[method-assign]
        try:
            real_run(loop, deliver)
        except _Vanish:
            return  # the thread ends here, reporting nothing

    return run_then_vanish


class _Vanish(BaseException):
    pass


# ------------------------------------------------------------------------------------------- cases
EXPECTED: dict[str, tuple[type[BaseException], ...]] = {
    "op": (NodeError,),
    "drop": (StuckRunError,),
    "nan": (),  # filled in below: NonFiniteError, once the numerics module is importable
    "glue": (WorkerLostError,),
    "vanish": (WorkerLostError,),
}
try:
    from amp_notebook.runtime.numerics import NonFiniteError

    EXPECTED["nan"] = (NonFiniteError,)
except ImportError:  # pragma: no cover (the numerics module lands with the numerics work)
    pass


def run_case(setup: Setup, fault: Fault) -> Outcome:
    before = {t for t in threading.enumerate() if t.name.startswith("amp-")}
    run, session = start(setup, installer(fault))
    error, hung, caught_at = await_fault(run)
    deadline = time.monotonic() + LEAK_GRACE_S
    for t in {t for t in threading.enumerate() if t.name.startswith("amp-")} - before:
        t.join(max(0.0, deadline - time.monotonic()))
    leaked = sorted(t.name for t in threading.enumerate() if t.name.startswith("amp-") and t not in before)
    fired = fault.fired_at is not None
    latency = caught_at - fault.fired_at if caught_at is not None and fault.fired_at is not None else None
    harmless = error is None and not hung and fault.kind == "nan" and _untouched_by_nan(session)
    return Outcome(
        setup=str(setup),
        fault=fault.describe(),
        fired=fired,
        error=None if error is None else type(error).__name__,
        expected=harmless or (error is not None and _as_expected(fault, error)),
        latency_s=latency,
        hung=hung,
        leaked=leaked,
        message="" if error is None else str(error).splitlines()[0][:160],
    )


def _untouched_by_nan(session: Session) -> bool:
    """A NaN that went down a path no parameter or loss depends on (a gradient into the RNN's initial state,
    which has none) harms nothing: the run ends normally with finite parameters and losses."""
    finite = all(np.isfinite(v).all() for p in session.params().values() for v in p.values())
    return finite and all(np.isfinite([e.train_loss, e.val_loss or 0.0]).all() for e in session.history)


def _as_expected(fault: Fault, error: BaseException) -> bool:
    if not isinstance(error, EXPECTED[fault.kind]):
        return False
    if fault.kind == "op":  # names the node and carries the injected error as its cause
        return (
            isinstance(error, NodeError)
            and error.node == fault.node
            and isinstance(error.__cause__, InjectedFaultError)
        )
    if fault.kind == "drop":
        d = error.diagnosis  # type: ignore[attr-defined]
        return bool(d.keys_in_flight or d.flushes_in_flight)
    if fault.kind in ("glue", "vanish"):  # names the worker; glue carries the injected error as its cause
        glue = isinstance(error.__cause__, InjectedFaultError)
        return error.worker == fault.worker and glue == (fault.kind == "glue")  # type: ignore[attr-defined]
    return True


@dataclass
class CampaignReport:
    """Every outcome of a fault campaign and how long it took; ``summary()`` counts them."""

    outcomes: list[Outcome]
    seconds: float

    def summary(self) -> dict[str, Any]:
        fired = [o for o in self.outcomes if o.fired]
        latencies = [o.latency_s for o in fired if o.latency_s is not None]
        kinds = Counter(o.fault.split(" ", 1)[0] for o in fired)
        return {
            "faults": len(fired),
            "not_fired": len(self.outcomes) - len(fired),
            "per_kind": dict(sorted(kinds.items())),
            "errors_at_caller": Counter(o.error or "none (a NaN on a path to no parameter or loss)" for o in fired),
            "expected_errors": sum(o.expected for o in fired),
            "hangs": sum(o.hung for o in fired),
            "leaked_threads": sum(len(o.leaked) for o in fired),
            "latency_s": {
                "median": statistics.median(latencies) if latencies else None,
                "max": max(latencies) if latencies else None,
                "over_limit": sum(latency >= LATENCY_LIMIT_S for latency in latencies),
            },
            "seconds": round(self.seconds, 1),
        }

    @property
    def ok(self) -> bool:
        s = self.summary()
        return (
            s["hangs"] == 0 and s["leaked_threads"] == 0 and s["latency_s"]["over_limit"] == 0
            and s["expected_errors"] == s["faults"] and s["faults"] > 0
        )  # fmt: skip


def campaign(n: int, seed: int = 0, kinds: tuple[str, ...] = KINDS, echo: bool = False) -> CampaignReport:
    """``n`` faults that fire, drawn at random (seeded) over setups and kinds."""
    rng = random.Random(seed)
    setups = [Setup(model, mode) for model in ("mlp", "rnn") for mode in MODES]
    began = time.perf_counter()
    outcomes: list[Outcome] = []
    attempts = 0
    while sum(o.fired for o in outcomes) < n and attempts < 3 * n:
        attempts += 1
        setup = rng.choice(setups)
        fault = draw(setup, rng.choice(kinds), rng)
        outcome = run_case(setup, fault)
        outcomes.append(outcome)
        if echo:
            latency = "-" if outcome.latency_s is None else f"{outcome.latency_s:.3f}s"
            print(f"{len(outcomes):4d} {outcome.setup:13s} {outcome.fault:32s} -> {outcome.error} "
                  f"{'ok' if outcome.expected else 'UNEXPECTED'} {latency}"
                  f"{' HUNG' if outcome.hung else ''}{' LEAKED ' + str(outcome.leaked) if outcome.leaked else ''}",
                  file=sys.stderr)  # fmt: skip
    return CampaignReport(outcomes, time.perf_counter() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amp_notebook.testing.faults", description=__doc__.split("\n")[0])
    parser.add_argument("--faults", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = campaign(args.faults, args.seed, tuple(args.kinds), echo=True)
    summary = report.summary()
    bad = [asdict(o) for o in report.outcomes if o.fired and (o.hung or o.leaked or not o.expected)]
    print(json.dumps({**summary, "ok": report.ok, "bad_cases": bad[:20]}, default=str, indent=None if args.json else 1))
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
