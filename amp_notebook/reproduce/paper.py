"""The AMPNet paper's own figures, as data: the one place ``reproduce`` reads them from.

Gaunt, Johnson, Riechert, Tarlow, Tomioka, Vytiniotis, Webster, "AMPNet: Asynchronous Model-Parallel
Training for Dynamic Neural Networks" (arXiv 1705.09786). The paper measured on 16 cores (112 GB of
memory) with its C++ multi-core CPU runtime, one worker per hardware thread; validation curves are
averaged over at least 20 runs and time to target is the median over the repetitions.

Rows are keyed by this project's workload names (:mod:`~amp_notebook.reproduce.workloads`): ``mlp``
(MNIST), ``rnn`` (list reduction), ``rnn-2-replicas`` and ``rnn-4-replicas`` (the RNN's step replicated),
``tree-lstm`` (Stanford Sentiment Treebank), ``ggsnn`` (QM9) and ``bilstm-tagger`` (Wikiner). A ratio is
a throughput over the throughput at max_active_keys 1 of the model's family: the replicated RNNs are
compared with the one-replica RNN at max_active_keys 1, as the paper's own "2x" and "3.8x" are.
Throughputs are training (or validation) instances per second; "13k" in the paper is 13,000 here.
"""

from __future__ import annotations

from dataclasses import dataclass

PAPER = "Gaunt et al., AMPNet (arXiv 1705.09786), Tables 1 and 2"
MACHINE = {"cores": 16, "memory_gb": 112, "engine": "its C++ multi-core CPU runtime"}

# workload -> the workload whose max_active_keys 1 row a ratio is taken against
FAMILY_BASE: dict[str, str] = {"rnn-2-replicas": "rnn", "rnn-4-replicas": "rnn"}


@dataclass(frozen=True)
class Throughput:
    """One row of the paper's Table 2: training and validation instances per second at ``mak``."""

    model: str
    mak: int
    train_per_s: float
    valid_per_s: float


@dataclass(frozen=True)
class TimeToTarget:
    """One row of the paper's Table 1: time, epochs and throughput to the target; None where it says n/a."""

    model: str
    mak: int
    time_s: float | None
    epochs: float | None
    train_per_s: float


# Table 2 (AMP columns), in the paper's row order
TABLE2: tuple[Throughput, ...] = (
    Throughput("mlp", 1, 2_076, 6_094),
    Throughput("mlp", 4, 6_268, 18_973),
    Throughput("rnn", 1, 13_000, 39_000),
    Throughput("rnn", 4, 16_000, 55_000),
    Throughput("rnn", 16, 16_000, 56_000),
    Throughput("rnn-2-replicas", 4, 35_000, 100_000),
    Throughput("rnn-4-replicas", 8, 71_000, 178_000),
    Throughput("tree-lstm", 1, 102, 280),
    Throughput("tree-lstm", 4, 188, 692),
    Throughput("tree-lstm", 16, 258, 822),
    Throughput("ggsnn", 1, 302, 710),
    Throughput("ggsnn", 4, 1_007, 2_585),
    Throughput("ggsnn", 16, 1_797, 4_845),
    Throughput("bilstm-tagger", 1, 41, 101),
    Throughput("bilstm-tagger", 4, 86, 284),
    Throughput("bilstm-tagger", 32, 130, 426),
)
# Table 2's TensorFlow columns (the tagger has none; DyNet's figures are in DYNET_TAGGER)
TABLE2_TENSORFLOW: dict[str, tuple[float, float]] = {
    "mlp": (5_880, 8_037), "rnn": (18_000, 43_000), "tree-lstm": (265, 1_583), "ggsnn": (1_217, 3_218),
}  # fmt: skip
# the tagger on the same machine with DyNet: sentences/s without and with autobatching
DYNET_TAGGER = {"without_autobatching": 23, "with_autobatching": 220}

# Table 1 (AMP columns), in the paper's row order. The MNIST epochs at mak 1 are read as 3 from the text
# ("the number of epochs ... increases from 3 to 4"); the GGSNN at mak 4 gives throughput only.
TABLE1: tuple[TimeToTarget, ...] = (
    TimeToTarget("mlp", 1, 91.1, 3, 2_076),
    TimeToTarget("mlp", 4, 40.4, 4, 6_268),
    TimeToTarget("rnn", 1, 78, 10, 13_000),
    TimeToTarget("rnn", 4, 66, 10.5, 16_000),
    TimeToTarget("rnn", 16, 60, 9.5, 16_000),
    TimeToTarget("rnn-2-replicas", 4, 38, 12, 35_000),
    TimeToTarget("rnn-4-replicas", 8, 21, 13, 71_000),
    TimeToTarget("tree-lstm", 1, 185, 2, 102),
    TimeToTarget("tree-lstm", 8, 82, 2, 222),
    TimeToTarget("tree-lstm", 16, 104, 3, 258),
    TimeToTarget("ggsnn", 4, None, None, 988),
    TimeToTarget("ggsnn", 16, 5_227, 76.5, 1_797),
)
# Table 1's TensorFlow columns: time (s), epochs, instances/s (the Tree-LSTM's is TensorFlow Fold)
TABLE1_TENSORFLOW: dict[str, tuple[float, float, float]] = {
    "mlp": (34.5, 3, 5_880), "rnn": (46, 7, 18_000), "tree-lstm": (208, 5, 265), "ggsnn": (6_696, 66, 1_217),
}  # fmt: skip
# Table 1's targets and what they measure, per model
TARGETS: dict[str, str] = {
    "mlp": "97% validation accuracy (MNIST)",
    "rnn": "97% validation accuracy (list reduction)",
    "tree-lstm": "82% fine-grained validation accuracy over all nodes (Sentiment Treebank)",
    "ggsnn": "validation error 4.6 (QM9 dipole-moment norm)",
}
# the paper's data set sizes: training and validation instances
SIZES: dict[str, tuple[int, int]] = {
    "mlp": (60_000, 10_000), "rnn": (100_000, 10_000), "tree-lstm": (8_511, 1_101), "ggsnn": (117_000, 13_000),
    "bilstm-tagger": (142_000, 1_700),
}  # fmt: skip


def table2_row(model: str, mak: int) -> Throughput | None:
    """The paper's Table 2 row for ``model`` at ``mak``, or None where the paper has none."""
    return next((r for r in TABLE2 if r.model == model and r.mak == mak), None)


def table1_row(model: str, mak: int) -> TimeToTarget | None:
    """The paper's Table 1 row for ``model`` at ``mak``, or None where the paper has none."""
    return next((r for r in TABLE1 if r.model == model and r.mak == mak), None)


def ratio(model: str, mak: int) -> float | None:
    """The paper's training throughput at ``mak`` over its family's at max_active_keys 1 (module docstring)."""
    row, base = table2_row(model, mak), table2_row(FAMILY_BASE.get(model, model), 1)
    return None if row is None or base is None else row.train_per_s / base.train_per_s


def table2_keys(model: str) -> tuple[int, ...]:
    """The max_active_keys values the paper's Table 2 lists for ``model``, in order."""
    return tuple(r.mak for r in TABLE2 if r.model == model)


def table1_keys(model: str) -> tuple[int, ...]:
    """The max_active_keys values the paper's Table 1 lists for ``model``, in order."""
    return tuple(r.mak for r in TABLE1 if r.model == model)


__all__ = [
    "DYNET_TAGGER", "FAMILY_BASE", "MACHINE", "PAPER", "SIZES", "TABLE1", "TABLE1_TENSORFLOW", "TABLE2",
    "TABLE2_TENSORFLOW", "TARGETS", "Throughput", "TimeToTarget", "ratio", "table1_keys", "table1_row",
    "table2_keys", "table2_row",
]  # fmt: skip
