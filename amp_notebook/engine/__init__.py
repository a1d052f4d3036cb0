"""The native engine: worker loops that run without the GIL, with native kernels for the zoo's ops.

Python keeps the IR, the controller, the UI and the reference semantics; the engine (``src/``, built at
install into ``_native``) moves messages, runs kernels, counts credits and writes trace columns, taking
the GIL only for a node whose op has no native kernel (the bridge: it calls the Python op). The compile
step (:mod:`amp_notebook.engine.plan`) turns a plan and its dataset's facts into the plain tables the
engine reads, or says exactly why a graph cannot run natively.

``import amp_notebook`` never needs the extension: without it :func:`available` is False and asking for
the engine by name raises :class:`EngineUnavailableError`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from amp_notebook.errors import AmpError

# (not named `_native`: importing the submodule binds that name on this package, loaded or not by _load)
_extension: ModuleType | None = None
_import_error: str | None = None
_blas_problem = ""  # why numpy's BLAS could not be handed to the engine ("" when it was)


class EngineUnavailableError(AmpError, RuntimeError):
    """The native engine was asked for by name but is not built (or failed to load)."""


def _load() -> ModuleType | None:
    global _extension, _import_error, _blas_problem
    if _extension is None and _import_error is None:
        try:
            module = importlib.import_module("amp_notebook.engine._native")
        except ImportError as exc:
            _import_error = str(exc)
            return None
        from amp_notebook.engine.blas import attach_numpy_blas

        _blas_problem = attach_numpy_blas(module)
        _extension = module
    return _extension


def available() -> bool:
    """Whether the native engine is built and loads."""
    return _load() is not None


def native() -> ModuleType:
    """The extension module; raises :class:`EngineUnavailableError` (naming the cause and the fix) if absent."""
    module = _load()
    if module is None:
        raise EngineUnavailableError(
            f"engine='native' needs the native engine, which is not available here ({_import_error}); it is "
            "built at install by `pip install -e .` with a C++17 compiler (unless AMP_NATIVE=0 was set): "
            "reinstall, or use engine='python'"
        )
    return module


def status() -> dict[str, Any]:
    """What the engine has: whether it loaded (and why not), which BLAS its products use, its kernels."""
    module = _load()
    if module is None:
        return {"available": False, "reason": _import_error}
    return {"available": True, **module.status(), **({"blas_problem": _blas_problem} if _blas_problem else {})}


__all__ = ["EngineUnavailableError", "available", "native", "status"]
