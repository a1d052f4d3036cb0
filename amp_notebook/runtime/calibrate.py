"""One core of this machine as a simulated device, on the engine you train with.

:meth:`CostModel.this_cpu <amp_notebook.runtime.costs.CostModel.this_cpu>` measures this core's matmul FLOP/s
and the Python engine's per-message overhead (the Python worker's ``handle`` on no-op nodes). The native
engine moves a message without Python, so its overhead has to be measured by running it: :func:`this_cpu`
with ``engine="native"`` runs :func:`~amp_notebook.runtime.costs.noop_chain` natively on one worker (one
message per call, trace on, as by default) and takes the **CPU time** per handled message as the slope between
a run of ``keys`` keys and one of ``4 * keys`` (so the run's fixed start-up drops out), the median over
``repeats`` after one warm-up run. CPU time rather than wall time: on a shared machine a preempted worker
would count other processes' time (a first version on wall time read 0.8 us at load 4 and 4.7 us at load 20;
the CPU slope reads 0.8 us at both). The figure holds everything a native worker does for a message (inbox,
kernel, routing, credits, trace row) and the driver's admission of its key. FLOP/s is the same measurement
for both engines: they multiply with the same BLAS, one thread per worker.

Where it is used: ``amp-notebook simulate --calibrate native``, and ``placement="auto"``
(:func:`~amp_notebook.runtime.autoplace.measure_costs` times nodes on the run's own engine and falls back
on this figure for a node its sample never reached). Measured once per process and engine.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.runtime.config import RunConfig
from amp_notebook.runtime.costs import CostModel, CostModelError, noop_chain
from amp_notebook.runtime.launch import backend_for, build_session, result_of

CALIBRATED_ENGINES = ("python", "native")


def this_cpu(engine: str = "python", **changes: object) -> CostModel:
    """One core of this machine: its FLOP/s and ``engine``'s per-message overhead (module docstring);
    ``changes`` set other fields. Raises the engine's ``EngineUnavailableError`` for "native" where it is
    not built."""
    if engine not in CALIBRATED_ENGINES:
        raise CostModelError(f"this_cpu engine: expected one of {CALIBRATED_ENGINES}, got {engine!r}")
    base = CostModel.this_cpu()
    if engine == "native":
        base = base.with_(message_overhead_s=native_message_overhead())
    return base.with_(**changes) if changes else base


@functools.cache
def native_message_overhead(repeats: int = 5, keys: int = 250) -> float:
    """CPU seconds per message of the native engine on one worker (module docstring)."""
    one = np.zeros((1, 1))
    graph = noop_chain(workers=1)
    config = RunConfig(workers=1, engine="native", mode="amp", max_active_keys=16, max_bundle=1, validate=False,
                       shuffle=False, dtype="float64", trace_capacity=None)  # fmt: skip

    def cpu_and_messages(n: int) -> tuple[float, int]:
        data = Dataset("calibrate", [Batch({"x": one, "target": one}, 1) for _ in range(n)], [])
        t0 = time.process_time()
        session, spec = build_session(graph, data, config, graph.init_params(0, np.dtype("float64")))
        runner = backend_for(session)
        runner.run()
        handled = len(result_of(session, runner, spec).trace.events()["end"])
        return time.process_time() - t0, handled

    cpu_and_messages(keys)  # warm up: the first native run pays one-time costs
    slopes = []
    large, m_large = 0.0, 1
    for _ in range(repeats):
        (small, m_small), (large, m_large) = cpu_and_messages(keys), cpu_and_messages(4 * keys)
        slopes.append((large - small) / (m_large - m_small))
    positive = sorted(s for s in slopes if s > 0)
    if not positive:  # the clock's resolution beat every slope: the large runs' average is the honest bound
        return max(large / m_large, 1e-9)
    return positive[len(positive) // 2]


__all__ = ["CALIBRATED_ENGINES", "native_message_overhead", "this_cpu"]
