"""``amp-notebook train --data DIR``: train a zoo model on the real data set in DIR instead of generated data.

:mod:`amp_notebook.data.real` reads DIR (MNIST's IDX files for the mlp, the Sentiment Treebank's
``train.txt`` and ``dev.txt`` for the tree-lstm, QM9's ``.xyz`` files for the ggsnn, CoNLL ``train.txt``
and ``dev.txt`` for the bilstm-tagger); this module builds the model to fit what was read.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from amp_notebook.data.batch import Dataset
from amp_notebook.ir.graph import Graph

MNIST_PER_KEY = 25  # images per key, as train's default for the mlp


def add_data_option(parser: Any) -> None:
    """Register ``--data DIR`` on ``train``'s parser."""
    parser.add_argument(
        "--data", type=Path, default=None, metavar="DIR",
        help="train on the real data set in DIR instead of generated data: mlp: MNIST's four IDX files; "
        "tree-lstm: the Sentiment Treebank's train.txt and dev.txt; ggsnn: QM9's .xyz files (target: dipole "
        "moment); bilstm-tagger: CoNLL train.txt and dev.txt (10%% held out if there is no dev.txt)",
    )  # fmt: skip


def model_and_data_from_dir(args: argparse.Namespace) -> tuple[Graph, Dataset]:
    """The model ``args.model`` sized for the real data set in ``args.data``."""
    from amp_notebook.data.real import load_data_dir

    for other in ("mnist", "conll"):
        if getattr(args, other, None) is not None:
            raise SystemExit(f"amp-notebook train: give --data or --{other}, not both")
    per_key = getattr(args, "per_key", 1)
    if per_key != 1 and args.model != "bilstm-tagger":
        raise SystemExit("amp-notebook train: with --data, --per-key applies to --model bilstm-tagger only")
    data = load_data_dir(args.model, args.data, seed=args.seed, batch_size=MNIST_PER_KEY, per_key=per_key)
    paper_frequencies = getattr(args, "min_update_frequency", None) is None  # per-node values unless overridden
    meta: dict[str, Any] = data.meta
    if args.model == "mlp":
        from amp_notebook.models import mlp

        return mlp(input_width=int(meta["input_width"]), hidden=784), data
    if args.model == "tree-lstm":
        from amp_notebook.models import tree_lstm
        from amp_notebook.models.tree_lstm import PAPER_EMBED_UPDATE_FREQUENCY, PAPER_UPDATE_FREQUENCY

        embed, others = (PAPER_EMBED_UPDATE_FREQUENCY, PAPER_UPDATE_FREQUENCY) if paper_frequencies else (None, None)
        return tree_lstm(int(meta["vocab_size"]), embed_update_frequency=embed, update_frequency=others), data
    if args.model == "ggsnn":
        from amp_notebook.models import ggsnn

        args.task = "regression"  # what the summary reports: QM9's dipole moment
        return ggsnn(int(meta["n_edge_types"]), int(meta["feature_width"]), steps=int(meta["steps"]),
                     task="regression"), data  # fmt: skip
    from amp_notebook.models import bilstm_tagger
    from amp_notebook.models.bilstm_tagger import UPDATE_FREQUENCY

    sizes = {k: int(meta[k]) for k in ("vocab_size", "char_vocab_size", "num_tags")}
    return bilstm_tagger(**sizes, update_frequency=UPDATE_FREQUENCY if paper_frequencies else None), data


__all__ = ["add_data_option", "model_and_data_from_dir"]
