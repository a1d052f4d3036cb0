"""Which engine runs a run's workers: the ``engine`` setting, resolved before the session is built.

* ``"python"``: the Python engine (``runtime/backends/threads.py``, ``runtime/backends/simulated.py``): every
  op, one core for the glue.
* ``"native"``: the native worker loops (``engine/backend.py``; on simulated hardware, the native workers
  stepped in virtual time: ``engine/simulated.py``). Asked for by name, it must run: if the
  extension is not built, the backend is Ray, the dtype is one the engine does not compute in
  (float16), or the graph cannot be compiled for it (an expression with ``/``, more state fields than slots),
  the call raises an :class:`~amp_notebook.errors.AmpError` that says why and what to change. Never a silent
  fallback.
* ``"auto"`` (the default): native whenever it can run the graph, else python. A node whose op has no native
  kernel does not keep a graph off the native engine: it runs through the bridge (its Python op under the
  GIL), and :attr:`EngineChoice.python_nodes` lists it so the summary and the dashboard can say so. ``auto``
  also picks native when most nodes are bridged: each bridged bundle then costs what the Python engine's
  step costs, and every other node still runs natively (measured in the engine notes).

The choice is data (:class:`EngineChoice`); the session keeps it, builds its trace buffers for it (native
per-worker columns for a native run) and ``launch.backend_for`` builds the backend it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from amp_notebook.errors import SettingError

if TYPE_CHECKING:
    from amp_notebook.data.batch import Dataset
    from amp_notebook.ir.graph import Graph
    from amp_notebook.runtime.config import RunConfig

NATIVE_DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class EngineChoice:
    """The engine of a run: ``name`` (``"native"`` or ``"python"``), the nodes a native run sends through
    Python (``python_nodes``, in graph order) and, when ``auto`` chose python, why (``reason``)."""

    name: str = "python"
    python_nodes: tuple[str, ...] = ()
    reason: str = ""

    @property
    def native(self) -> bool:
        return self.name == "native"

    def trace_buffer(self, capacity: int | None) -> Any:
        """A worker's trace buffer for this engine: native columns the workers write, or a Python one."""
        if self.native:
            from amp_notebook.engine.trace import NativeWorkerBuffer

            return NativeWorkerBuffer(capacity)
        from amp_notebook.trace.buffers import WorkerBuffer

        return WorkerBuffer(capacity)


PYTHON = EngineChoice()


def dataset_fields(dataset: Dataset) -> set[str]:
    """Every state field a key of ``dataset`` carries (``Batch.fields``), over both splits."""
    return {name for split in (dataset.train, dataset.val) for batch in split for name in batch.fields}


def choose_engine(graph: Graph, dataset: Dataset, config: RunConfig) -> EngineChoice:
    """The engine ``config.engine`` names, resolved for this graph, data and settings (module docstring)."""
    asked = config.engine
    if asked == "python":
        return PYTHON
    why = _obstacle(config)
    if why:
        if asked == "native":
            from amp_notebook.engine import available, native

            if not available():
                native()  # raises EngineUnavailableError, naming the cause and the fix
            raise SettingError("engine", f"engine='native' cannot run here: {why}")
        return EngineChoice(reason=why)
    from amp_notebook.engine.expressions import NotNativeError
    from amp_notebook.engine.plan import check

    names = list(graph.nodes)
    support = check(names, [graph.nodes[n].op for n in names], dataset_fields(dataset))
    if not support.native:
        if asked == "native":
            raise NotNativeError(
                "engine='native' cannot run this graph: " + "; ".join(support.reasons) + "; or train with "
                "engine='python' (or 'auto', which picks the Python engine for such a graph)"
            )
        return EngineChoice(reason="; ".join(support.reasons))
    return EngineChoice("native", tuple(support.bridged))


def _obstacle(config: RunConfig) -> str:
    """Why the native engine cannot run with these settings ("" when it can), with the fix."""
    if config.backend not in ("threads", "simulated"):
        return (
            f"it runs the workers of backend='threads' or 'simulated', and this run uses "
            f"backend={config.backend!r}; pass one of those or engine='auto'"
        )
    if config.dtype not in NATIVE_DTYPES:
        return f"it computes in {' or '.join(NATIVE_DTYPES)}, not dtype={config.dtype!r}; pick one of those"
    from amp_notebook.engine import available, status

    if not available():
        return (
            f"the extension is not available ({status()['reason']}); it is built at install by `pip install -e .` "
            "with a C++17 compiler (unless AMP_NATIVE=0 was set): reinstall, or use engine='python'"
        )
    return ""


__all__ = ["NATIVE_DTYPES", "PYTHON", "EngineChoice", "choose_engine", "dataset_fields"]
