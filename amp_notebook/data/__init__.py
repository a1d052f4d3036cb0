"""Datasets as keys (`Batch`) for the AMPNet controller: digits, MNIST (IDX), list reduction, trees, graphs,
NER sentences (synthetic, CoNLL files)."""

from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.data.digits import load_digits_dataset
from amp_notebook.data.graphs import (
    GraphInstance,
    babi15_graphs,
    graph_dataset,
)
from amp_notebook.data.list_reduction import (
    generate_list_reduction,
    label_sequences,
    list_reduction_dataset,
)
from amp_notebook.data.mnist import load_mnist_dataset, read_idx
from amp_notebook.data.molecules import molecule_graphs
from amp_notebook.data.ner import ConllFormatError, Sentence, load_conll, read_conll, synthetic_ner_dataset
from amp_notebook.data.qm9 import load_qm9_directory, load_qm9_xyz, qm9_graph
from amp_notebook.data.sentiment import sentiment_tree_dataset, synthetic_sentiment_trees
from amp_notebook.data.trees import (
    Tree,
    TreeFormatError,
    Vocab,
    load_sst_file,
    parse_ptb_tree,
    tree_arrays,
    tree_to_ptb,
    trees_dataset,
)

__all__ = [
    "Batch",
    "ConllFormatError",
    "Dataset",
    "GraphInstance",
    "Sentence",
    "Tree",
    "TreeFormatError",
    "Vocab",
    "babi15_graphs",
    "generate_list_reduction",
    "graph_dataset",
    "label_sequences",
    "list_reduction_dataset",
    "load_conll",
    "load_digits_dataset",
    "load_mnist_dataset",
    "load_qm9_directory",
    "load_qm9_xyz",
    "load_sst_file",
    "molecule_graphs",
    "parse_ptb_tree",
    "qm9_graph",
    "read_conll",
    "read_idx",
    "sentiment_tree_dataset",
    "synthetic_ner_dataset",
    "synthetic_sentiment_trees",
    "tree_arrays",
    "tree_to_ptb",
    "trees_dataset",
]
