"""The paper's 4-layer MLP: three hidden Linear+ReLU layers and a Linear output, softmax cross-entropy."""

from __future__ import annotations

from amp_notebook.errors import SettingError
from amp_notebook.ir.graph import Graph


def mlp(input_width: int = 64, hidden: int = 784, classes: int = 10, layers: int = 4) -> Graph:
    """``layers`` Linear layers (``layers - 1`` hidden of width ``hidden`` with ReLU) on input ``x``."""
    if layers < 1:
        raise SettingError("layers", f"mlp layers: expected at least 1 (the output layer), got {layers}")
    g = Graph("mlp")
    h = g.input("x", width=input_width)
    for i in range(layers - 1):
        h = g.relu(g.linear(h, hidden, name=f"linear{i + 1}"), name=f"relu{i + 1}")
    logits = g.linear(h, classes, name=f"linear{layers}")
    g.softmax_cross_entropy(logits, g.input("target", dtype="int"), name="loss")
    return g
