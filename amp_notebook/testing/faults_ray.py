"""Fault injection on the Ray backend: the fault kinds of :mod:`amp_notebook.testing.faults`, fired inside the
worker actors, plus ``kill``: an actor's process dies.

The promise is the threaded backend's: whatever goes wrong inside a run, the caller gets the error that says
what happened, soon (under ``LATENCY_LIMIT_S``), and nothing of the run is left: no actor of it alive, no
thread of it in the driver. Each case starts a small run (:class:`~amp_notebook.testing.runs.Setup`: the
MLP or the list-reduction RNN, in each mode) on Ray and installs one fault in the actor that hosts its
place, before any key is admitted:

* ``op``: a node's op (or optimizer) raises at its k-th call: a
  :class:`~amp_notebook.runtime.worker.NodeError` naming that node, caused by the injected error;
* ``drop``: the k-th message to a node in a direction vanishes on arrival (its weight stays held): the
  driver's watchdog stops the run with a :class:`~amp_notebook.runtime.watchdog.StuckRunError`;
* ``nan``: the k-th float message to a node arrives as NaN: a
  :class:`~amp_notebook.runtime.numerics.NonFiniteError` from the actor's own checks;
* ``glue``: the actor's inbox (the runtime's own code) raises at its k-th bundle: a lost worker, a
  :class:`~amp_notebook.runtime.restart.WorkerLostError` naming it and the injected error;
* ``vanish``: the actor's step thread ends without a word after k steps: a WorkerLostError;
* ``kill``: the actor's process exits at its k-th step: a WorkerLostError naming the worker.

How a fault gets inside. The harness builds the session and the :class:`RayBackend` (which deploys the
actors, their step threads idle), then runs :func:`_install` in the actor through Ray's ``__ray_call__``
(a function called with the actor instance): it stops the idle step thread, patches the op, the worker's
step, the inbox or the loop (as the threaded harness patches a worker thread's), and starts the thread
again; then the run starts. The moment a fault fires is read on the actor's ``time.perf_counter`` (the
system's monotonic clock, the driver's too on one machine) and written to a file the driver reads, since
the actor may be dead by then.

Run it (starts a local Ray with its own temporary directory, no token)::

    python -m amp_notebook.testing.faults_ray --faults 30 --seed 0 --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from amp_notebook.ir.message import BWD, FWD, UPDATE, Message
from amp_notebook.optim import make_optimizer
from amp_notebook.runtime.numerics import NonFiniteError
from amp_notebook.runtime.restart import WorkerLostError
from amp_notebook.runtime.run import Run
from amp_notebook.runtime.session import Session
from amp_notebook.runtime.watchdog import StuckRunError
from amp_notebook.runtime.worker import NodeError
from amp_notebook.testing.faults import (
    LEAK_GRACE_S,
    CampaignReport,
    Fault,
    InjectedFaultError,
    Outcome,
    _break,
    _failing_inbox,
    _vanishing,
    await_fault,
    draw,
)
from amp_notebook.testing.runs import MODES, Setup, is_float

KINDS = ("op", "drop", "nan", "glue", "vanish", "kill")


@dataclass
class RemoteFault(Fault):
    """A fault fired inside an actor: its firing time goes to the file ``mark`` as well."""

    mark: str = ""

    def fire(self) -> None:
        if self.fired_at is None:
            super().fire()
            Path(self.mark).write_text(repr(self.fired_at))

    def fired_time(self) -> float | None:
        """When it fired (on the driver's clock, which the actors share on one machine), if it did."""
        try:
            return float(Path(self.mark).read_text())
        except (OSError, ValueError):
            return None


EXPECTED: dict[str, tuple[type[BaseException], ...]] = {
    "op": (NodeError,), "drop": (StuckRunError,), "nan": (NonFiniteError,), "glue": (WorkerLostError,),
    "vanish": (WorkerLostError,), "kill": (WorkerLostError,),
}  # fmt: skip


# ------------------------------------------------------------------------------------------- inside an actor
def _install(host: Any, fault: RemoteFault) -> None:
    """Runs in the actor (``__ray_call__``): stop the idle step thread, patch, start it again (its loop binds
    the worker's step and the inbox's methods when it starts)."""
    loop = host.loop
    loop.stop()
    host.thread.join()
    _patch(host, fault)
    loop.stopped = False
    host.thread = threading.Thread(target=host._run, name=host.thread.name, daemon=True)
    host.thread.start()


def _patch(host: Any, fault: RemoteFault) -> None:
    plan, loop = host.plan, host.loop
    if fault.kind == "op":
        i = plan.index[fault.node]
        if fault.phase == "update":  # an optimizer may serve several nodes: count this node's steps only
            params = host.contexts[i].params
            _break(plan.optimizers[i], "step", fault, lambda *args: args[0] is params)
        else:
            _break(plan.ops[i], "forward" if fault.phase == "fwd" else "backward", fault)
    elif fault.kind in ("drop", "nan"):
        loop.inbox.__class__ = _arriving_inbox(type(loop.inbox), plan.index[fault.node], fault)
    elif fault.kind == "glue":
        loop.inbox.__class__ = _failing_inbox(type(loop.inbox), fault)
    elif fault.kind == "kill":
        loop.worker.step = _exiting(loop.worker.step, fault)
    elif fault.kind == "vanish":
        loop.run = _vanishing(loop, fault)


def _arriving_inbox(base: type, target: int, fault: RemoteFault) -> type:
    """A subclass of the worker's inbox that drops, or fills with NaN, the k-th message for ``target`` in the
    fault's direction as it arrives. Every message a worker handles passes through its inbox's ``push``
    (from its mailbox, or from its own step); a dropped one has already given its weight to the worker's
    ledger, so its key can never complete."""
    direction = {"fwd": FWD, "bwd": BWD, "update": UPDATE}[fault.phase]  # type: ignore[index]
    seen = [0]

    def push(self: Any, msg: Message) -> None:
        if msg.node == target and msg.direction == direction and (fault.kind != "nan" or is_float(msg.payload)):
            seen[0] += 1
            if seen[0] == fault.k:
                fault.fire()
                if fault.kind == "drop":
                    return
                msg.payload = np.full(np.shape(msg.payload), np.nan)
        base.push(self, msg)

    return type(base.__name__, (base,), {"__slots__": (), "push": push})


def _exiting(real: Callable[..., Any], fault: RemoteFault) -> Callable[..., Any]:
    """The worker's step; at the k-th the process exits at once, as a crashed machine's would."""
    steps = [0]

    def step(*args: Any, **kwargs: Any) -> Any:
        steps[0] += 1
        if steps[0] == fault.k:
            fault.fire()
            os._exit(17)
        return real(*args, **kwargs)

    return step


# ------------------------------------------------------------------------------------------- cases
def start(setup: Setup, fault: RemoteFault) -> tuple[Run, Session, Any]:
    """A background Ray run of ``setup`` with ``fault`` installed in its actor before any key is admitted."""
    import ray

    from amp_notebook.runtime.backends.ray import RayBackend

    graph, data, config, optimizer = setup.build()
    session = Session(graph, data, config.replace(backend="ray"), make_optimizer(optimizer))
    backend = RayBackend(session)
    try:
        worker = fault.worker if fault.node is None else session.plan.owner[session.plan.index[fault.node]]
        ray.get(backend.hosts[worker].__ray_call__.remote(_install, fault))
    except BaseException:
        backend._kill()
        raise
    return Run(session, backend, lambda: session), session, backend  # type: ignore[arg-type]


def draw_fault(setup: Setup, kind: str, rng: random.Random, folder: Path, n: int) -> RemoteFault:
    """A fault of ``kind`` that a run of ``setup`` reaches (as :func:`~amp_notebook.testing.faults.draw`);
    ``kill`` is placed as ``glue`` is: a worker and a step."""
    base = draw(setup, "glue" if kind == "kill" else kind, rng)
    return RemoteFault(kind, base.k, base.node, base.phase, base.worker, mark=str(folder / f"fired-{n}"))


def run_case(setup: Setup, fault: RemoteFault) -> Outcome:
    from amp_notebook.runtime.backends.ray import live_actors

    before = {t for t in threading.enumerate() if t.name.startswith("amp-")}
    run, _, backend = start(setup, fault)
    error, hung, caught_at = await_fault(run)
    prefix = f"amp-worker-{backend.run_id}-"
    deadline = time.monotonic() + LEAK_GRACE_S
    while True:
        actors = [a["Name"] for a in live_actors() if a["Name"].startswith(prefix)]
        threads = [t.name for t in threading.enumerate() if t.name.startswith("amp-") and t not in before]
        if not (actors or threads) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    fired_at = fault.fired_time()
    return Outcome(
        setup=str(setup),
        fault=fault.describe(),
        fired=fired_at is not None,
        error=None if error is None else type(error).__name__,
        expected=error is not None and _as_expected(fault, error),
        latency_s=caught_at - fired_at if caught_at is not None and fired_at is not None else None,
        hung=hung,
        leaked=sorted(actors + threads),
        message="" if error is None else str(error).splitlines()[0][:160],
    )


def _as_expected(fault: RemoteFault, error: BaseException) -> bool:
    if not isinstance(error, EXPECTED[fault.kind]):
        return False
    if fault.kind == "op":
        return isinstance(error, NodeError) and error.node == fault.node and isinstance(error.__cause__,
                                                                                       InjectedFaultError)  # fmt: skip
    if fault.kind in ("glue", "vanish", "kill"):  # names the worker; glue says what failed in it
        named = error.worker == fault.worker  # type: ignore[attr-defined]
        return named and (fault.kind != "glue" or "InjectedFaultError" in str(error))
    if fault.kind == "drop":
        d = error.diagnosis  # type: ignore[attr-defined]
        return bool(d.keys_in_flight or d.flushes_in_flight)
    return True


def campaign(n: int, seed: int = 0, kinds: tuple[str, ...] = KINDS, echo: bool = False) -> CampaignReport:
    """``n`` faults that fire on Ray, drawn at random (seeded) over setups and kinds (each kind in turn)."""
    rng = random.Random(seed)
    setups = [Setup(model, mode) for model in ("mlp", "rnn") for mode in MODES]
    began = time.perf_counter()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="amp-faults-") as folder:
        attempts = 0
        while sum(o.fired for o in outcomes) < n and attempts < 3 * n:
            kind = kinds[attempts % len(kinds)]
            attempts += 1
            setup = rng.choice(setups)
            outcome = run_case(setup, draw_fault(setup, kind, rng, Path(folder), attempts))
            outcomes.append(outcome)
            if echo:
                latency = "-" if outcome.latency_s is None else f"{outcome.latency_s:.3f}s"
                print(f"{len(outcomes):4d} {outcome.setup:13s} {outcome.fault:32s} -> {outcome.error} "
                      f"{'ok' if outcome.expected else 'UNEXPECTED'} {latency}{' HUNG' if outcome.hung else ''}"
                      f"{' LEFT ' + str(outcome.leaked) if outcome.leaked else ''}", file=sys.stderr)  # fmt: skip
    return CampaignReport(outcomes, time.perf_counter() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amp_notebook.testing.faults_ray",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--faults", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = campaign(args.faults, args.seed, tuple(args.kinds), echo=True)
    summary = report.summary()
    latencies = [o.latency_s for o in report.outcomes if o.latency_s is not None]
    summary["latency_s"]["mean"] = statistics.fmean(latencies) if latencies else None
    bad = [asdict(o) for o in report.outcomes if o.fired and (o.hung or o.leaked or not o.expected)]
    print(json.dumps({**summary, "ok": report.ok, "bad_cases": bad[:20]}, default=str, indent=None if args.json else 1))
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
