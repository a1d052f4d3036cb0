"""The Python side of the notebook UI: widgets (anywidget) and plotly report figures (:mod:`.report`).

Nothing is imported here, so ``import amp_notebook`` needs neither plotly nor anywidget.
"""
