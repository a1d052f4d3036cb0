"""amp_notebook: asynchronous model-parallel training (AMPNet, Gaunt et al. 2017) made tangible.

Build a static IR graph whose nodes route messages (payload + state) with explicit control flow, train it
asynchronously on worker threads, and look at what asynchrony did: throughput, staleness, utilization,
and a trace of every message.

    import amp_notebook as amp
    g = amp.models.rnn()
    data = amp.data.list_reduction_dataset(n_train=20_000, n_val=2_000)
    result = amp.train(g, data, mode="amp", max_active_keys=4, optimizer={"name": "adam", "lr": 2e-3})
"""

from amp_notebook import data, models, trace
from amp_notebook.compiler import CompileError, compile, nn
from amp_notebook.errors import AmpError, SettingError
from amp_notebook.interop import from_torch
from amp_notebook.ir.graph import Graph, GraphError, Ref
from amp_notebook.ir.interpret import Interpreter
from amp_notebook.ir.message import State
from amp_notebook.ir.serialize import GraphFileError, load_graph, load_params, save_graph, save_params
from amp_notebook.ir.validate import ValidationError
from amp_notebook.runtime.checkpoint import Checkpoint, load_checkpoint
from amp_notebook.runtime.checkpoint_file import CheckpointError
from amp_notebook.runtime.config import RunConfig
from amp_notebook.runtime.costs import CostModel, NodeCost
from amp_notebook.runtime.launch import simulate
from amp_notebook.runtime.numerics import NonFiniteError
from amp_notebook.runtime.run import Run
from amp_notebook.runtime.train import TrainResult, resume, train
from amp_notebook.runtime.watchdog import StuckRunError
from amp_notebook.runtime.whatif import sweep, whatif
from amp_notebook.runtime.worker import NodeError

__version__ = "0.1.0"

__all__ = [
    "AmpError", "Checkpoint", "CheckpointError", "CompileError", "CostModel", "Graph", "GraphError", "GraphFileError",
    "Interpreter", "NodeCost", "NodeError", "NonFiniteError", "Ref", "Run", "RunConfig", "SettingError", "State",
    "StuckRunError", "TrainResult", "ValidationError", "compile", "data", "from_torch", "load_checkpoint", "load_graph",
    "load_params", "models", "nn", "resume", "save_graph", "save_params", "simulate", "sweep", "trace", "train",
    "whatif",
]  # fmt: skip
