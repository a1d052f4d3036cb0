"""Speed of the simulated-hardware backend: messages it handles per second of real (wall) time.

Two workloads on simulated 1 TFLOPS devices with 1 us of overhead per message and 10 Gb/s links, real
math on (the default), mode amp with 16 keys in flight, plain SGD at lr 0.01 (an update's own arithmetic
is not the simulator's speed, and a fixed optimizer keeps the figure comparable across versions when the
default optimizer changes; earlier versions ran SGD by default):

* ``noop_chain`` on 2 devices: the overhead benchmark's graph (Input -> Linear(1, 1) -> 16 Identity nodes
  -> MSE on keys of one instance), nodes alternating between the devices, so nearly all time is the
  simulator's own glue: the event heap, the cost lookup, the worker state machine, tracing and credit
  counting;
* ``mlp`` on 4 devices: the paper's 4-layer MLP (hidden 784) on digits in keys of 100, where numpy
  matmuls dominate.

Figure: messages handled / wall seconds (median of repeats); ``messages_per_s`` is the no-op chain's.
The virtual makespan is printed too, to show the two clocks side by side.
"""

from __future__ import annotations

import time
from typing import Any

from amp_notebook.bench.common import constant_dataset, median_of, repeat_epochs, report
from amp_notebook.bench.overhead import chain
from amp_notebook.data.digits import load_digits_dataset
from amp_notebook.models.mlp import mlp
from amp_notebook.runtime.costs import CostModel
from amp_notebook.runtime.train import train


def rate(graph: Any, data: Any, workers: int, costs: CostModel) -> tuple[float, float, int]:
    """(messages per wall second, virtual makespan, messages) of one simulated amp run."""
    t0 = time.perf_counter()
    r = train(graph, data, workers=workers, mode="amp", max_active_keys=16, validate=False, dtype="float64",
              optimizer={"name": "sgd", "lr": 0.01}, backend="simulated", costs=costs)  # fmt: skip
    wall = time.perf_counter() - t0
    messages = r.backend_stats["messages"]
    return messages / wall, r.wall_s, messages


def run(repeats: int = 5, keys: int = 5000, quick: bool = False) -> dict[str, Any]:
    if quick:
        repeats, keys = 3, 300
    costs = CostModel.tflops_device(message_overhead_s=1e-6, latency_s=1e-6, bandwidth_bits_per_s=10e9)
    noop_graph, noop_data = chain(), constant_dataset(keys, 1)
    runs: list[tuple[float, float, int]] = []

    def noop_once() -> float:
        runs.append(rate(noop_graph, noop_data, 2, costs))
        return runs[-1][0]

    noop, noop_values = median_of(repeats, noop_once)
    digits = load_digits_dataset(batch_size=100)
    mlp_data = repeat_epochs(digits, 1 if quick else 4)
    mlp_graph = mlp(input_width=64, hidden=784)
    mlp_runs: list[tuple[float, float, int]] = []

    def mlp_once() -> float:
        mlp_runs.append(rate(mlp_graph, mlp_data, 4, costs))
        return mlp_runs[-1][0]

    mlp_rate, mlp_values = median_of(repeats, mlp_once)
    result = {
        "messages_per_s": noop, "repeats_messages_per_s": noop_values, "mlp_messages_per_s": mlp_rate,
        "mlp_repeats_messages_per_s": mlp_values, "messages": runs[-1][2], "virtual_makespan_s": runs[-1][1],
        "mlp_messages": mlp_runs[-1][2], "mlp_virtual_makespan_s": mlp_runs[-1][1],
        "workers": {"noop_chain": 2, "mlp": 4}, "keys": keys, "costs": costs.spec(),
    }  # fmt: skip
    print(report([
        ("no-op chain messages/s (median)", f"{noop:,.0f}"),
        ("no-op chain repeats", [round(v) for v in noop_values]),
        ("mlp (hidden 784) messages/s", f"{mlp_rate:,.0f}"),
        ("virtual makespan (no-op chain)", f"{runs[-1][1]:.4g} s for {runs[-1][2]} messages"),
    ]))  # fmt: skip
    return result
