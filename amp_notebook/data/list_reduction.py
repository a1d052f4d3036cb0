"""The list-reduction task from the AMPNet paper.

An instance is a token sequence `[op, d1, ..., dn]` with `1 <= n <= max_len - 1` digits in 0..9. Token ids:
operations are 0..3 and digit `d` is `4 + d` (vocabulary of 14). The label is `floor(value) mod 10` where
`value` is, for the list `L = [d1, ..., dn]`:

- op 0: `mean(L)`
- op 1: `mean(L[0::2]) - mean(L[1::2])` (the mean of an empty list is 0)
- op 2: `max(L) - min(L)`
- op 3: `len(L)`

Floors are taken in exact integer arithmetic, so no rounding error can move a label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from amp_notebook.data.batch import Batch, Dataset, check_count
from amp_notebook.errors import DataFormatError

NUM_OPS = 4
DIGIT_OFFSET = NUM_OPS
VOCAB_SIZE = NUM_OPS + 10
NUM_CLASSES = 10
OP_NAMES = ("mean", "alternating_mean_difference", "range", "length")


@dataclass(frozen=True)
class _Instances:
    """Instances as a padded token matrix (N, max_len), total lengths (N,) and labels (N,)."""

    tokens: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray


def _labels(ops: np.ndarray, digits: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Labels for ops (N,), digits (N, D) of which the first `counts` (N,) per row are used."""
    position = np.arange(digits.shape[1], dtype=np.int64)[None, :]
    present = position < counts[:, None]

    total = np.where(present, digits, 0).sum(axis=1)
    mean_floor = total // counts

    even = present & (position % 2 == 0)
    odd = present & (position % 2 == 1)
    even_sum, even_count = np.where(even, digits, 0).sum(axis=1), even.sum(axis=1)
    odd_sum, odd_count = np.where(odd, digits, 0).sum(axis=1), odd.sum(axis=1)
    # even_count >= 1 always; an empty odd list has sum 0, so a denominator of 1 gives mean 0.
    odd_den = np.maximum(odd_count, 1)
    alt_floor = (even_sum * odd_den - odd_sum * even_count) // (even_count * odd_den)

    spread = np.where(present, digits, -1).max(axis=1) - np.where(present, digits, 10).min(axis=1)

    value = np.select([ops == 0, ops == 1, ops == 2], [mean_floor, alt_floor, spread], default=counts)
    return np.mod(value, NUM_CLASSES).astype(np.int64)


def label_sequences(sequences: Sequence[np.ndarray]) -> np.ndarray:
    """Labels (int64, one per sequence) for token sequences `[op, 4 + d1, ..., 4 + dn]`."""
    arrays = [np.asarray(seq, dtype=np.int64) for seq in sequences]
    for i, seq in enumerate(arrays):
        if (
            seq.ndim != 1
            or seq.size < 2
            or not 0 <= seq[0] < NUM_OPS
            or np.any(seq[1:] < DIGIT_OFFSET)
            or np.any(seq[1:] >= VOCAB_SIZE)
        ):
            raise DataFormatError(
                f"sequences[{i}]: expected a 1-D sequence [op in 0..{NUM_OPS - 1}, then >= 1 digit tokens in "
                f"{DIGIT_OFFSET}..{VOCAB_SIZE - 1}], got {seq.tolist()}"
            )
    counts = np.array([seq.size - 1 for seq in arrays], dtype=np.int64)
    ops = np.array([seq[0] for seq in arrays], dtype=np.int64)
    digits = np.zeros((len(arrays), max((seq.size - 1 for seq in arrays), default=1)), dtype=np.int64)
    for i, seq in enumerate(arrays):
        digits[i, : seq.size - 1] = seq[1:] - DIGIT_OFFSET
    return _labels(ops, digits, counts)


def _generate(n: int, max_len: int, rng: np.random.Generator) -> _Instances:
    max_digits = max_len - 1
    ops = rng.integers(0, NUM_OPS, size=n, dtype=np.int64)
    counts = rng.integers(1, max_digits + 1, size=n, dtype=np.int64)
    digits = rng.integers(0, 10, size=(n, max_digits), dtype=np.int64)
    present = np.arange(max_digits, dtype=np.int64)[None, :] < counts[:, None]
    tokens = np.zeros((n, max_len), dtype=np.int64)
    tokens[:, 0] = ops
    tokens[:, 1:] = np.where(present, digits + DIGIT_OFFSET, 0)
    return _Instances(tokens=tokens, lengths=counts + 1, labels=_labels(ops, digits, counts))


def generate_list_reduction(n: int, max_len: int = 10, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """`n` random instances: token sequences (int64, lengths 2..max_len) and int64 labels (n,)."""
    check_count("n", n, 0)
    check_count("max_len", max_len, 2)
    inst = _generate(n, max_len, np.random.default_rng(seed))
    sequences = [row[:length] for row, length in zip(inst.tokens, inst.lengths.tolist(), strict=True)]
    return sequences, inst.labels


def _bucket(inst: _Instances, bucket_size: int, order_rng: np.random.Generator) -> list[Batch]:
    batches: list[Batch] = []
    for length in np.unique(inst.lengths).tolist():
        index = np.flatnonzero(inst.lengths == length)
        for start in range(0, index.size, bucket_size):
            chunk = index[start : start + bucket_size]
            tokens = np.ascontiguousarray(inst.tokens[chunk, :length].T)
            target = np.ascontiguousarray(inst.labels[chunk])
            batches.append(
                Batch(
                    inputs={"tokens": tokens, "target": target},
                    size=int(chunk.size),
                    fields={"length": length},
                )
            )
    return [batches[i] for i in order_rng.permutation(len(batches)).tolist()]


def list_reduction_dataset(
    n_train: int = 100_000,
    n_val: int = 10_000,
    bucket_size: int = 100,
    max_len: int = 10,
    seed: int = 0,
) -> Dataset:
    """List reduction bucketed by total length (op token included) into keys of <= `bucket_size` instances.

    Each key holds `"tokens"` int64 (length, B), time-major, and `"target"` int64 (B,), with state field
    `length`. Train and validation come from independent streams derived from `seed`; key order is shuffled
    (also from `seed`) so that consecutive keys have mixed lengths.
    """
    check_count("n_train", n_train, 1)
    check_count("n_val", n_val, 0)
    check_count("bucket_size", bucket_size, 1)
    check_count("max_len", max_len, 2)
    train_seq, val_seq, order_seq = np.random.SeedSequence(seed).spawn(3)
    order_rng = np.random.default_rng(order_seq)
    train = _generate(n_train, max_len, np.random.default_rng(train_seq))
    val = _generate(n_val, max_len, np.random.default_rng(val_seq))
    return Dataset(
        name="list_reduction",
        train=_bucket(train, bucket_size, order_rng),
        val=_bucket(val, bucket_size, order_rng),
        num_classes=NUM_CLASSES,
        meta={"vocab_size": VOCAB_SIZE, "num_classes": NUM_CLASSES, "max_len": max_len},
    )
