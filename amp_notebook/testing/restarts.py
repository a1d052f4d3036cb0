"""Restarts under injected worker losses: a run with ``max_failures`` finishes, counts every restart, and in
sync mode ends with the parameters of the same run never interrupted.

Each case trains a small :class:`~amp_notebook.testing.runs.Setup` (the MLP or the list-reduction RNN) for
``EPOCHS`` epochs with ``max_failures=3`` and one worker loss injected at a random step of a random worker,
anywhere in the run (so a restart goes back to the start or to an epoch's checkpoint): on the Python
engine's threads a worker thread whose own code fails (the ``glue`` fault: its inbox raises), on the native
engine a worker whose loop fails (the engine's fault-injection knob), on Ray an actor whose process exits
(``kill``). The run must finish
(no error at the caller), its result must count the restart (its ``restarts``, its summary), and, in sync
mode, its final parameters must equal, bit for bit, those of the same setup trained with no fault: a
restart goes back to a checkpoint, which holds everything the rest of a run depends on.

Run it::

    python -m amp_notebook.testing.restarts --backend threads --losses 20 --json
    python -m amp_notebook.testing.restarts --backend native --losses 20 --json
    python -m amp_notebook.testing.restarts --backend ray --losses 10 --json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from amp_notebook.testing import faults
from amp_notebook.testing.runs import Setup, census

MAX_FAILURES = 3
BACKENDS = ("threads", "native", "ray")
EPOCHS = 3  # a loss may come after an epoch's checkpoint: the restart goes back to it, not to the start
MODES = ("sync", "amp")
WAIT_S = 120.0


@dataclass
class Case:
    """One run with an injected loss: where, whether it finished, the restarts it counted, and (sync mode)
    whether its final parameters equal the uninjected run's."""

    setup: str
    fault: str
    fired: bool
    finished: bool
    restarts: int
    restarts_in_summary: int | None
    back_to: list[int]  # per restart: the epochs its checkpoint had completed (0: the run's start)
    same_params: bool | None  # sync mode only
    error: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        counted = self.restarts == int(self.fired) and self.restarts_in_summary == self.restarts
        return self.finished and counted and self.same_params is not False


def _params(result: Any) -> dict[str, dict[str, np.ndarray]]:
    return {n: {k: np.array(v) for k, v in p.items()} for n, p in result.params.items()}


@cache
def _clean_params(setup: Setup, backend: str) -> dict[str, dict[str, np.ndarray]]:
    """The final parameters of ``setup`` trained with no fault."""
    run, _ = _start(setup, backend, None)
    return _params(run.wait(timeout=WAIT_S))


def _start(setup: Setup, backend: str, fault: Any) -> tuple[Any, Any]:
    """A background run of ``setup`` with ``max_failures`` and ``fault`` (or none) installed in its worker."""
    from amp_notebook.optim import make_optimizer
    from amp_notebook.runtime.launch import result_of
    from amp_notebook.runtime.run import Run
    from amp_notebook.runtime.session import Session

    graph, data, config, spec = setup.build()
    optimizer = make_optimizer(spec)
    config = config.replace(max_failures=MAX_FAILURES, epochs=EPOCHS, backend="ray" if backend == "ray" else "threads",
                            engine="native" if backend == "native" else "python")  # fmt: skip
    runner: Any
    if backend != "native":
        session = Session(graph, data, config, optimizer)
    if backend == "ray":
        import ray

        from amp_notebook.runtime.backends.ray import RayBackend
        from amp_notebook.testing.faults_ray import _install

        runner = RayBackend(session)
        if fault is not None:
            ray.get(runner.hosts[fault.worker].__ray_call__.remote(_install, fault))
    elif backend == "native":
        from amp_notebook.engine.backend import NativeBackend
        from amp_notebook.engine.choice import choose_engine

        session = Session(graph, data, config, optimizer, engine=choose_engine(graph, data, config))
        runner = NativeBackend(session)
        if fault is not None:
            _doom_when(runner, fault)
    else:
        from amp_notebook.runtime.backends.threads import ThreadedBackend

        runner = ThreadedBackend(session)
        if fault is not None:
            faults.installer(fault)(session, runner)
    return Run(session, runner, lambda: result_of(session, runner, optimizer)), session


def _doom_when(runner: Any, fault: Any) -> None:
    """A native run's loss: once its engine has handled ``fault.k`` messages, worker ``fault.worker`` fails in
    its own loop (the engine's fault-injection knob). The first engine only: a restart assembles a new one."""
    engine = runner.engine

    def watch() -> None:
        while runner.engine is engine and not runner.finished:
            if engine.handled() >= fault.k:
                fault.fire()
                engine.set_knob("fail", [], fault.worker)
                return
            time.sleep(0.001)

    threading.Thread(target=watch, name="amp-restarts-doom", daemon=True).start()


def run_case(setup: Setup, backend: str, fault: Any) -> Case:
    began = time.perf_counter()
    run, _ = _start(setup, backend, fault)
    error, result = None, None
    try:
        result = run.wait(timeout=WAIT_S)
    except BaseException as exc:
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        run.stop(timeout=10)
    fired = fault.fired_time() is not None if hasattr(fault, "fired_time") else fault.fired_at is not None
    same = None
    if result is not None and setup.mode == "sync":
        clean = _clean_params(setup, backend)
        mine = _params(result)
        same = mine.keys() == clean.keys() and all(
            np.array_equal(mine[n][k], clean[n][k]) for n in clean for k in clean[n]
        )
    return Case(
        setup=str(setup), fault=fault.describe(), fired=fired, finished=result is not None,
        restarts=len(result.restarts) if result is not None else 0,
        restarts_in_summary=result.summary()["restarts"] if result is not None else None,
        back_to=[r.epoch for r in result.restarts] if result is not None else [],
        same_params=same, error=error, seconds=round(time.perf_counter() - began, 2),
    )  # fmt: skip


def campaign(backend: str, losses: int, seed: int = 0, echo: bool = False) -> list[Case]:
    """Runs with one injected loss each (glue on threads, kill on Ray), over models and modes, until ``losses``
    of them fired."""
    rng = random.Random(seed)
    setups = [Setup(model, mode) for model in ("mlp", "rnn") for mode in MODES]
    cases: list[Case] = []
    with tempfile.TemporaryDirectory(prefix="amp-restarts-") as folder:
        n = 0
        while sum(c.fired for c in cases) < losses and n < 3 * losses:  # a loss drawn too late may not fire
            setup = setups[n % len(setups)]
            if backend == "ray":
                from amp_notebook.testing.faults_ray import draw_fault

                fault: Any = draw_fault(setup, "kill", rng, Path(folder), n)
            else:
                fault = faults.draw(setup, "glue", rng)
            fault.k = rng.randint(1, max(1, int(0.8 * EPOCHS * census(setup).steps[fault.worker])))
            case = run_case(setup, backend, fault)
            cases.append(case)
            n += 1
            if echo:
                print(f"{n:3d} {case.setup:10s} {case.fault:24s} finished={case.finished} restarts={case.restarts} "
                      f"back_to={case.back_to} same_params={case.same_params} {case.error or ''} "
                      f"{'ok' if case.ok else 'BAD'} {case.seconds}s", file=sys.stderr)  # fmt: skip
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amp_notebook.testing.restarts", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="threads",
        help="threads (the Python engine's worker threads), native (the native engine's), ray",
    )
    parser.add_argument("--losses", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cases = campaign(args.backend, args.losses, args.seed, echo=True)
    ok = all(c.ok for c in cases) and bool(cases)
    summary = {
        "backend": args.backend, "losses": len(cases), "fired": sum(c.fired for c in cases),
        "finished": sum(c.finished for c in cases), "restarts": sum(c.restarts for c in cases),
        "sync_runs": sum(c.same_params is not None for c in cases),
        "sync_same_params": sum(bool(c.same_params) for c in cases),
        "back_to_epochs": sorted(e for c in cases for e in c.back_to), "ok": ok,
        "bad_cases": [asdict(c) for c in cases if not c.ok][:10],
    }  # fmt: skip
    print(json.dumps(summary, indent=None if args.json else 1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
