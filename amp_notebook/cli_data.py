"""``amp-notebook train --data DIR``: train a zoo model on the real data set in DIR instead of generated data.

:mod:`amp_notebook.data.real` reads DIR (MNIST's IDX files for the mlp, the Sentiment Treebank's
``train.txt`` and ``dev.txt`` for the tree-lstm, QM9's ``.xyz`` files for the ggsnn-regression, CoNLL
``train.txt`` and ``dev.txt`` for the bilstm-tagger); the zoo entry builds its graph to fit what was read.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amp_notebook.cli import CommandLineError

if TYPE_CHECKING:
    from amp_notebook.data.batch import Dataset
    from amp_notebook.ir.graph import Graph

# zoo model -> the data set name data.real reads for it (QM9's dipole moment is a regression)
REAL_DATA = {"mlp": "mlp", "tree-lstm": "tree-lstm", "ggsnn-regression": "ggsnn", "bilstm-tagger": "bilstm-tagger"}


def add_data_option(parser: Any) -> None:
    """Register ``--data DIR`` on ``train``'s parser."""
    parser.add_argument(
        "--data", type=Path, default=None, metavar="DIR",
        help="train on the real data set in DIR instead of generated data: mlp: MNIST's four IDX files; "
        "tree-lstm: the Sentiment Treebank's train.txt and dev.txt; ggsnn-regression: QM9's .xyz files (target: "
        "dipole moment); bilstm-tagger: CoNLL train.txt and dev.txt (10%% held out if there is no dev.txt)",
    )  # fmt: skip


def model_and_data_from_dir(args: argparse.Namespace) -> tuple[Graph, Dataset]:
    """The zoo model ``args.model`` sized for the real data set in ``args.data``."""
    from amp_notebook.data.real import load_data_dir
    from amp_notebook.models import zoo

    for other in ("mnist", "conll"):
        if getattr(args, other, None) is not None:
            raise CommandLineError(f"give --data or --{other}, not both")
    if args.model not in REAL_DATA:
        raise CommandLineError(
            f"--data: no real data set is known for --model {args.model}; models that read one: {sorted(REAL_DATA)}"
        )
    if args.per_key != 1 and args.model != "bilstm-tagger":
        raise CommandLineError("with --data, --per-key applies to --model bilstm-tagger only")
    data = load_data_dir(
        REAL_DATA[args.model], args.data, seed=args.seed, batch_size=zoo.DIGITS_PER_KEY, per_key=args.per_key
    )
    return zoo.get(args.model).graph(data), data


__all__ = ["REAL_DATA", "add_data_option", "model_and_data_from_dir"]
