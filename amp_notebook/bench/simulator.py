"""Speed of the simulated-hardware backend: messages it handles per second of real (wall) time, on each engine.

Two workloads on simulated 1 TFLOPS devices with 1 us of overhead per message and 10 Gb/s links, real
math on (the default), mode amp with 16 keys in flight, plain SGD at lr 0.01 (an update's own arithmetic
is not the simulator's speed, and a fixed optimizer keeps the figure comparable across versions when the
default optimizer changes; earlier versions ran SGD by default):

* ``noop_chain`` on 2 devices: the overhead benchmark's graph (Input -> Linear(1, 1) -> 16 Identity nodes
  -> MSE on keys of one instance), nodes alternating between the devices, so nearly all time is the
  simulator's own glue: the event heap, the cost lookup, the worker state machine, tracing and credit
  counting;
* ``mlp`` on 4 devices: the paper's 4-layer MLP (hidden 784) on digits in keys of 100, where the matmuls
  dominate.

Each workload runs on the native engine (the default wherever it is built: ``engine/simulated.py``) and on the
Python engine (``runtime/backends/simulated.py``), interleaved with the order flipped every round; both give
the same trace and makespan, so the figures compare the same simulation. Figure: messages handled / wall
seconds (median of repeats); ``messages_per_s`` is the no-op chain's on the engine ``auto`` picks, with every
round and the machine's load beside them. The virtual makespan is printed too, to show the two clocks side by
side.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from amp_notebook.bench.common import (
    constant_dataset,
    interleaved_medians,
    load_line,
    machine_load,
    repeat_epochs,
    report,
)
from amp_notebook.bench.overhead import chain
from amp_notebook.data.digits import load_digits_dataset
from amp_notebook.models.mlp import mlp
from amp_notebook.runtime.costs import CostModel
from amp_notebook.runtime.train import train


def rate(graph: Any, data: Any, workers: int, costs: CostModel, engine: str = "auto") -> tuple[float, float, int]:
    """(messages per wall second, virtual makespan, messages) of one simulated amp run."""
    t0 = time.perf_counter()
    r = train(graph, data, workers=workers, mode="amp", max_active_keys=16, validate=False, dtype="float64",
              optimizer={"name": "sgd", "lr": 0.01}, backend="simulated", costs=costs, engine=engine)  # fmt: skip
    wall = time.perf_counter() - t0
    messages = r.backend_stats["messages"]
    return messages / wall, r.wall_s, messages


def run(repeats: int = 5, keys: int = 5000, quick: bool = False) -> dict[str, Any]:
    from amp_notebook import engine as native_engine

    if quick:
        repeats, keys = 3, 300
    costs = CostModel.tflops_device(message_overhead_s=1e-6, latency_s=1e-6, bandwidth_bits_per_s=10e9)
    load_before = machine_load()["after"]
    engines = ["native", "python"] if native_engine.available() else ["python"]
    digits = load_digits_dataset(batch_size=100)
    workloads = {
        "noop": (chain(), constant_dataset(keys, 1), 2),
        "mlp": (mlp(input_width=64, hidden=784), repeat_epochs(digits, 1 if quick else 4), 4),
    }
    runs: dict[str, list[tuple[float, float, int]]] = {}

    def side(workload: str, engine: str) -> Callable[[], float]:
        graph, data, workers = workloads[workload]

        def once() -> float:
            runs.setdefault(f"{workload}/{engine}", []).append(rate(graph, data, workers, costs, engine))
            return runs[f"{workload}/{engine}"][-1][0]

        return once

    medians: dict[str, tuple[float, list[float]]] = {}
    for workload in workloads:
        medians.update(interleaved_medians(repeats, {f"{workload}/{e}": side(workload, e) for e in engines}))
    load = machine_load(load_before)
    first = engines[0]
    noop, noop_values = medians[f"noop/{first}"]
    mlp_rate, mlp_values = medians[f"mlp/{first}"]
    py_noop, py_noop_values = medians["noop/python"]
    py_mlp, py_mlp_values = medians["mlp/python"]
    last_noop, last_mlp = runs[f"noop/{first}"][-1], runs[f"mlp/{first}"][-1]
    result: dict[str, Any] = {
        "engine": first, "messages_per_s": noop, "repeats_messages_per_s": noop_values,
        "mlp_messages_per_s": mlp_rate, "mlp_repeats_messages_per_s": mlp_values,
        "python_messages_per_s": py_noop, "python_repeats_messages_per_s": py_noop_values,
        "python_mlp_messages_per_s": py_mlp, "python_mlp_repeats_messages_per_s": py_mlp_values,
        "native_over_python": noop / py_noop if first == "native" else None,
        "mlp_native_over_python": mlp_rate / py_mlp if first == "native" else None,
        "messages": last_noop[2], "virtual_makespan_s": last_noop[1],
        "mlp_messages": last_mlp[2], "mlp_virtual_makespan_s": last_mlp[1],
        "workers": {"noop_chain": 2, "mlp": 4}, "keys": keys, "costs": costs.spec(), "load_average_1min": load,
    }  # fmt: skip
    rows: list[tuple[str, Any]] = []
    for engine in engines:
        rows += [
            (f"{engine} engine: no-op chain messages/s (median)", f"{medians[f'noop/{engine}'][0]:,.0f}"),
            ("  rounds", [round(v) for v in medians[f"noop/{engine}"][1]]),
            (f"{engine} engine: mlp (hidden 784) messages/s", f"{medians[f'mlp/{engine}'][0]:,.0f}"),
            ("  rounds", [round(v) for v in medians[f"mlp/{engine}"][1]]),
        ]
    if first == "native":
        rows += [("native / python: no-op chain", f"{noop / py_noop:.1f}x"),
                 ("native / python: mlp", f"{mlp_rate / py_mlp:.2f}x")]  # fmt: skip
    else:
        result["native_unavailable"] = native_engine.status().get("reason")
        rows.append(("native engine", f"not available ({result['native_unavailable']})"))
    rows += [
        ("virtual makespan (no-op chain)", f"{last_noop[1]:.4g} s for {last_noop[2]} messages"),
        ("runs", f"{repeats} per engine and workload, interleaved, order flipped every round"),
        load_line(load),
    ]
    print(report(rows))
    return result
