"""The Python side of the notebook UI: widgets (anywidget) and plotly report figures (:mod:`.report`).

Nothing is imported eagerly, so ``import amp_notebook`` needs neither plotly nor anywidget;
``amp_notebook.ui.Dashboard`` and ``amp_notebook.ui.GraphBuilder`` are imported on first use.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "Dashboard":
        from amp_notebook.ui.dashboard import Dashboard

        return Dashboard
    if name == "GraphBuilder":
        from amp_notebook.ui.builder import GraphBuilder

        return GraphBuilder
    raise AttributeError(f"module 'amp_notebook.ui' has no attribute {name!r}")
