"""Datasets as keys (`Batch`) for the AMPNet controller: digits, MNIST (IDX) and list reduction."""

from amp_notebook.data.batch import Batch, Dataset
from amp_notebook.data.digits import load_digits_dataset
from amp_notebook.data.list_reduction import (
    generate_list_reduction,
    label_sequences,
    list_reduction_dataset,
)
from amp_notebook.data.mnist import load_mnist_dataset, read_idx

__all__ = [
    "Batch",
    "Dataset",
    "generate_list_reduction",
    "label_sequences",
    "list_reduction_dataset",
    "load_digits_dataset",
    "load_mnist_dataset",
    "read_idx",
]
