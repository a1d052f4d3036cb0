"""Benchmark names -> modules with ``run(quick=False, ...) -> dict``."""

from __future__ import annotations

import importlib
from typing import Any

from amp_notebook.errors import SettingError

BENCHMARKS: dict[str, str] = {
    "overhead": "amp_notebook.bench.overhead",
    "speedup": "amp_notebook.bench.speedup",
    "rnn-vs-torch": "amp_notebook.bench.rnn_vs_torch",
    "tree-vs-torch": "amp_notebook.bench.tree_vs_torch",
    "ggsnn-vs-torch": "amp_notebook.bench.ggsnn_vs_torch",
    "tagger-vs-torch": "amp_notebook.bench.tagger_vs_torch",
    "trace-overhead": "amp_notebook.bench.trace_overhead",
    "simulator": "amp_notebook.bench.simulator",
    "dashboard": "amp_notebook.bench.dashboard",
    "bundling": "amp_notebook.bench.bundling",
    "message-cost": "amp_notebook.bench.message_cost",
    "ray": "amp_notebook.bench.ray",
    "numerics-overhead": "amp_notebook.bench.numerics_overhead",
}


def run_benchmark(name: str, quick: bool = False) -> dict[str, Any]:
    if name not in BENCHMARKS:
        raise SettingError("benchmark", f"unknown benchmark {name!r}; choose one of {sorted(BENCHMARKS)}")
    module = importlib.import_module(BENCHMARKS[name])
    return module.run(quick=quick)
