"""The runtime: controller, worker state machine, placement, optimizers and backends.

``amp_notebook.runtime.simulate`` (a session on the simulated backend, see :mod:`.launch`) and
``RunConfig`` (a run's settings, :mod:`.config`) are imported on first use, so importing a submodule
loads only what that submodule needs.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"simulate": "amp_notebook.runtime.launch", "RunConfig": "amp_notebook.runtime.config"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'amp_notebook.runtime' has no attribute {name!r}")


__all__ = ["RunConfig", "simulate"]
