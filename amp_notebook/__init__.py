"""amp_notebook: asynchronous model-parallel training (AMPNet, Gaunt et al. 2017) made tangible.

Build a static IR graph whose nodes route messages (payload + state) with explicit control flow, train it
asynchronously on worker threads, and look at what asynchrony did: throughput, staleness, utilization,
and a trace of every message.

    import amp_notebook as amp
    g = amp.models.rnn()
    data = amp.data.list_reduction_dataset(n_train=20_000, n_val=2_000)
    result = amp.train(g, data, mode="amp", max_active_keys=4, optimizer={"name": "adam", "lr": 2e-3})

The names below load on first use (PEP 562 ``__getattr__``): ``import amp_notebook`` costs almost nothing,
so the command line answers ``--help`` without loading numpy, the JSON Schema validators or the runtime.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it (a submodule of the package when the name is the module itself)
_EXPORTS = {
    "AmpError": "amp_notebook.errors",
    "Checkpoint": "amp_notebook.runtime.checkpoint",
    "CheckpointError": "amp_notebook.runtime.checkpoint_file",
    "CompileError": "amp_notebook.compiler",
    "CostModel": "amp_notebook.runtime.costs",
    "Graph": "amp_notebook.ir.graph",
    "GraphError": "amp_notebook.ir.graph",
    "GraphFileError": "amp_notebook.ir.serialize",
    "Interpreter": "amp_notebook.ir.interpret",
    "NodeCost": "amp_notebook.runtime.costs",
    "NodeError": "amp_notebook.runtime.worker",
    "NonFiniteError": "amp_notebook.runtime.numerics",
    "Ref": "amp_notebook.ir.graph",
    "Run": "amp_notebook.runtime.run",
    "RunConfig": "amp_notebook.runtime.config",
    "SettingError": "amp_notebook.errors",
    "State": "amp_notebook.ir.message",
    "StuckRunError": "amp_notebook.runtime.watchdog",
    "TrainResult": "amp_notebook.runtime.train",
    "ValidationError": "amp_notebook.ir.validate",
    "compile": "amp_notebook.compiler",
    "from_torch": "amp_notebook.interop",
    "load_checkpoint": "amp_notebook.runtime.checkpoint",
    "load_graph": "amp_notebook.ir.serialize",
    "load_params": "amp_notebook.ir.serialize",
    "nn": "amp_notebook.compiler",
    "resume": "amp_notebook.runtime.train",
    "save_graph": "amp_notebook.ir.serialize",
    "save_params": "amp_notebook.ir.serialize",
    "simulate": "amp_notebook.runtime.launch",
    "sweep": "amp_notebook.runtime.whatif",
    "train": "amp_notebook.runtime.train",
    "whatif": "amp_notebook.runtime.whatif",
}
_SUBMODULES = ("data", "models", "trace")

__all__ = sorted([*_EXPORTS, *_SUBMODULES])


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        value: Any = importlib.import_module(f"amp_notebook.{name}")
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'amp_notebook' has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
