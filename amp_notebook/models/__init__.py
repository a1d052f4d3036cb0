"""The model zoo: functions that return an IR Graph."""

from amp_notebook.models.mlp import mlp
from amp_notebook.models.rnn import rnn

__all__ = ["mlp", "rnn"]
