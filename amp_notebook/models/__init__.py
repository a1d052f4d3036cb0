"""The model zoo: functions that return an IR Graph."""

from amp_notebook.models.bilstm_tagger import bilstm_tagger
from amp_notebook.models.ggsnn import ggsnn
from amp_notebook.models.mlp import mlp
from amp_notebook.models.rnn import rnn
from amp_notebook.models.tree_lstm import tree_lstm, tree_lstm_forest

__all__ = ["bilstm_tagger", "ggsnn", "mlp", "rnn", "tree_lstm", "tree_lstm_forest"]
