"""The paper's real data sets, read from a directory the user supplies (``--data DIR``); nothing is downloaded.

Each model reads the format its loader already knows, from files named as the data sets ship them:

=============== ========================================================= ==================================
model           files in DIR                                              loader
=============== ========================================================= ==================================
mlp             MNIST's four IDX files (``train-images-idx3-ubyte`` ...,  :func:`~.mnist.load_mnist_dataset`
                plain or ``.gz``); the test set validates
tree-lstm       the Stanford Sentiment Treebank's PTB trees, one per       :func:`~.trees.load_sst_file`
                line: ``train.txt`` and ``dev.txt``
ggsnn           QM9's ``*.xyz`` files (``dsgdb9nsd_*.xyz``); the          :func:`~.qm9.load_qm9_directory`
                dipole moment's norm ``mu`` is the target; a seeded 10%
                of the molecules validates
bilstm-tagger   CoNLL-style ``token tag`` lines (Wikiner converted so):   :func:`~.ner.load_conll`
                ``train.txt`` (or ``train.conll``) and, if present,
                ``dev.txt`` / ``dev.conll``; otherwise a seeded 10% of
                the training sentences validates
=============== ========================================================= ==================================

The list-reduction RNN has no file format: the paper generated its lists, as
:func:`~.list_reduction.list_reduction_dataset` does. ``limit`` caps the instances read from each split
(a quick run on a large data set). Every dataset returned says in ``meta["source"]`` what it was read from.

``amp-notebook train --data DIR`` reads DIR itself; ``amp-notebook reproduce --data ROOT`` runs several
models, so each reads its own folder of ROOT (``FOLDERS``: ``mnist/``, ``sst/``, ``qm9/``, ``conll/``) and a
model without one keeps its generated data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from amp_notebook.data.batch import Dataset
from amp_notebook.errors import AmpError

# model -> the files --data DIR must hold, in words (for help texts and errors)
FORMATS: dict[str, str] = {
    "mlp": "MNIST's four IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
    "t10k-labels-idx1-ubyte; plain or .gz)",
    "tree-lstm": "the Sentiment Treebank's PTB trees: train.txt and dev.txt, one tree per line",
    "ggsnn": "QM9's .xyz files (dsgdb9nsd_*.xyz)",
    "bilstm-tagger": "CoNLL-style 'token tag' lines: train.txt or train.conll, and dev.txt or dev.conll if any",
}
SOURCES: dict[str, str] = {"mlp": "MNIST", "tree-lstm": "Sentiment Treebank trees", "ggsnn": "QM9 molecules",
                           "bilstm-tagger": "CoNLL sentences"}  # fmt: skip
# reproduce --data ROOT: each model reads ROOT/<its folder>; a model whose folder is missing keeps generated data
FOLDERS: dict[str, str] = {"mlp": "mnist", "tree-lstm": "sst", "ggsnn": "qm9", "bilstm-tagger": "conll"}
QM9_TARGET = "mu"  # the paper's GGSNN regresses the dipole moment's norm
QM9_VAL_FRACTION = 0.1
QM9_STEPS = 4  # the paper's propagation steps


class DataDirError(AmpError, FileNotFoundError):
    """A ``--data`` directory that does not hold the files its model reads; the message names them."""


def load_data_dir(
    model: str, directory: str | Path, *, seed: int = 0, limit: int | None = None, batch_size: int = 100,
    per_key: int = 1,
) -> Dataset:  # fmt: skip
    """``model``'s real data set from ``directory`` (module docstring); ``batch_size``: MNIST images per key,
    ``per_key``: tagger sentences per key; ``meta["source"]`` says what was read."""
    directory = Path(directory)
    if model == "rnn" or model.startswith("rnn-"):
        raise DataDirError(
            f"--data {directory}: the list-reduction RNN reads no files (the paper generated its lists, as this "
            "package does); leave --data out for the rnn"
        )
    if model not in FORMATS:
        raise DataDirError(
            f"--data {directory}: no real data set is known for model {model!r}; models: {sorted(FORMATS)}"
        )
    if not directory.is_dir():
        raise DataDirError(f"--data {directory}: no such directory (expected {FORMATS[model]})")
    loaders = {"mlp": _mnist, "tree-lstm": _sst, "ggsnn": _qm9, "bilstm-tagger": _conll}
    data = loaders[model](directory, seed, limit, batch_size, per_key)
    data.meta["source"] = (
        f"{SOURCES[model]} in {directory}: {data.train_instances:,} training and {data.val_instances:,} "
        "validation instances" + ("" if limit is None else f" (at most {limit} of each)")
    )
    return data


def _one_of(directory: Path, names: tuple[str, ...], model: str, required: bool = True) -> Path | None:
    found = next((directory / n for n in names if (directory / n).is_file()), None)
    if found is None and required:
        raise DataDirError(f"--data {directory}: expected {' or '.join(names)} there ({FORMATS[model]}); found none")
    return found


def _mnist(directory: Path, seed: int, limit: int | None, batch_size: int, per_key: int) -> Dataset:
    from amp_notebook.data.mnist import load_mnist_dataset

    try:
        return load_mnist_dataset(directory, batch_size=batch_size, seed=seed, limit=limit)
    except FileNotFoundError as exc:
        raise DataDirError(f"--data {directory}: {exc}") from None


def _sst(directory: Path, seed: int, limit: int | None, batch_size: int, per_key: int) -> Dataset:
    from amp_notebook.data.trees import load_sst_file, trees_dataset

    train = load_sst_file(_one_of(directory, ("train.txt",), "tree-lstm"))  # type: ignore[arg-type]
    val = load_sst_file(_one_of(directory, ("dev.txt",), "tree-lstm"))  # type: ignore[arg-type]
    return trees_dataset(train[:limit], val[:limit], name="sst")


def _qm9(directory: Path, seed: int, limit: int | None, batch_size: int, per_key: int) -> Dataset:
    from amp_notebook.data.graphs import ggsnn_dataset
    from amp_notebook.data.qm9 import load_qm9_directory

    try:  # with a limit, read twice as many files as the training split may hold (10% validate)
        molecules = load_qm9_directory(directory, target=QM9_TARGET, limit=None if limit is None else 2 * limit)
    except FileNotFoundError as exc:
        raise DataDirError(f"--data {directory}: {exc}") from None
    order = np.random.default_rng(seed).permutation(len(molecules))
    n_val = max(1, round(QM9_VAL_FRACTION * len(molecules))) if len(molecules) > 1 else 0
    val = [molecules[i] for i in order[:n_val]][:limit]
    train = [molecules[i] for i in order[n_val:]][:limit]
    if not train:
        raise DataDirError(f"--data {directory}: {len(molecules)} molecule(s) leave none to train on after the "
                           f"{QM9_VAL_FRACTION:.0%} held out for validation; add .xyz files")  # fmt: skip
    return ggsnn_dataset(train, 1, "regression", QM9_STEPS, val_instances=val, name="qm9")


def _conll(directory: Path, seed: int, limit: int | None, batch_size: int, per_key: int) -> Dataset:
    from amp_notebook.data.ner import load_conll

    train_path = _one_of(directory, ("train.txt", "train.conll"), "bilstm-tagger")
    dev_path = _one_of(directory, ("dev.txt", "dev.conll"), "bilstm-tagger", required=False)
    data = load_conll(train_path, dev_path, per_key=per_key, seed=seed)  # type: ignore[arg-type]
    if limit is not None:  # the vocabulary stays that of every training sentence; keys hold per_key sentences
        keys = max(1, limit // per_key)
        data = Dataset(data.name, data.train[:keys], data.val[:keys], data.num_classes, data.meta)
    return data


def model_folder(model: str, root: str | Path) -> Path | None:
    """``root``'s folder for ``model`` (``FOLDERS``), or None when ``root`` has none for it."""
    folder = FOLDERS.get(model)
    return None if folder is None or not (Path(root) / folder).is_dir() else Path(root) / folder


def check_root(root: str | Path) -> None:
    """Refuse a ``reproduce --data`` root that holds no model's folder."""
    if not any(model_folder(m, root) for m in FOLDERS):
        wanted = ", ".join(f"{f}/ ({m})" for m, f in FOLDERS.items())
        raise DataDirError(f"--data {root}: expected at least one of the folders {wanted}; found none")


__all__ = ["FOLDERS", "FORMATS", "DataDirError", "check_root", "load_data_dir", "model_folder"]
