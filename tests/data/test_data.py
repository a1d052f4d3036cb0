"""Data modules: list reduction labels and bucketing, digits splits, determinism."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from amp_notebook.data import (
    Batch,
    generate_list_reduction,
    label_sequences,
    list_reduction_dataset,
    load_digits_dataset,
)


def reference_label(op: int, digits: list[int]) -> int:
    """Straightforward, exact re-statement of the task, independent of the vectorised generator."""

    def mean(values: list[int]) -> Fraction:
        return Fraction(sum(values), len(values)) if values else Fraction(0)

    if op == 0:
        value = mean(digits)
    elif op == 1:
        value = mean(digits[0::2]) - mean(digits[1::2])
    elif op == 2:
        value = Fraction(max(digits) - min(digits))
    elif op == 3:
        value = Fraction(len(digits))
    else:
        raise AssertionError(f"unknown op {op}")
    return math.floor(value) % 10


@pytest.mark.parametrize(
    ("op", "digits", "label"),
    [
        (0, [1, 2], 1),  # mean 1.5 -> 1
        (0, [9, 9, 8], 8),  # 26/3 = 8.67 -> 8
        (1, [5], 5),  # 5 - mean([]) = 5
        (1, [1, 9], 2),  # 1 - 9 = -8 -> -8 mod 10 = 2
        (1, [2, 7, 3], 5),  # 2.5 - 7 = -4.5 -> floor -5 -> (-5) mod 10 = 5
        (1, [7, 1, 1, 1], 3),  # (7+1)/2 - (1+1)/2 = 3
        (2, [3, 9, 0], 9),
        (2, [4], 0),
        (3, [0, 0, 0, 0, 0, 0, 0, 0, 0], 9),
        (3, [1], 1),
    ],
)
def test_labels_on_hand_examples(op: int, digits: list[int], label: int) -> None:
    assert reference_label(op, digits) == label
    tokens = np.array([op] + [4 + d for d in digits], dtype=np.int64)
    assert label_sequences([tokens]).tolist() == [label]


def test_label_sequences_rejects_malformed_sequences() -> None:
    with pytest.raises(ValueError, match=r"sequences\[1\]"):
        label_sequences([np.array([0, 5]), np.array([0])])
    with pytest.raises(ValueError, match=r"sequences\[0\]"):
        label_sequences([np.array([4, 5])])


def test_generated_labels_match_reference() -> None:
    sequences, labels = generate_list_reduction(5_000, max_len=10, seed=3)
    assert labels.dtype == np.int64 and labels.shape == (5_000,)
    for seq, label in zip(sequences, labels.tolist(), strict=True):
        assert seq.dtype == np.int64
        assert 2 <= seq.size <= 10
        op, tokens = int(seq[0]), seq[1:].tolist()
        assert 0 <= op <= 3
        assert all(4 <= t <= 13 for t in tokens)
        assert label == reference_label(op, [t - 4 for t in tokens])


def test_generation_covers_all_ops_and_lengths() -> None:
    sequences, labels = generate_list_reduction(2_000, max_len=6, seed=1)
    assert {int(s[0]) for s in sequences} == {0, 1, 2, 3}
    assert {s.size for s in sequences} == {2, 3, 4, 5, 6}
    assert set(labels.tolist()) <= set(range(10))


def test_generation_is_deterministic_by_seed() -> None:
    a_seq, a_lab = generate_list_reduction(300, seed=7)
    b_seq, b_lab = generate_list_reduction(300, seed=7)
    c_seq, _ = generate_list_reduction(300, seed=8)
    assert np.array_equal(a_lab, b_lab)
    assert all(np.array_equal(x, y) for x, y in zip(a_seq, b_seq, strict=True))
    assert not all(x.size == y.size and np.array_equal(x, y) for x, y in zip(a_seq, c_seq, strict=True))


def test_generate_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_len"):
        generate_list_reduction(10, max_len=1)
    with pytest.raises(ValueError, match="n:"):
        generate_list_reduction(-1)


def _check_keys(batches: list[Batch], bucket_size: int, max_len: int) -> None:
    for batch in batches:
        length = batch.fields["length"]
        tokens, target = batch.inputs["tokens"], batch.inputs["target"]
        assert set(batch.inputs) == {"tokens", "target"}
        assert tokens.dtype == np.int64 and target.dtype == np.int64
        assert tokens.shape == (length, batch.size)
        assert target.shape == (batch.size,)
        assert 2 <= length <= max_len
        assert 1 <= batch.size <= bucket_size
        assert np.all(tokens[0] <= 3) and np.all(tokens[1:] >= 4) and np.all(tokens[1:] <= 13)
        for column, label in zip(tokens.T, target.tolist(), strict=True):
            assert label == reference_label(int(column[0]), [int(t) - 4 for t in column[1:]])


def test_list_reduction_dataset_buckets_equal_lengths() -> None:
    data = list_reduction_dataset(n_train=3_000, n_val=500, bucket_size=50, max_len=8, seed=0)
    assert data.name == "list_reduction"
    assert data.num_classes == 10
    assert data.meta == {"vocab_size": 14, "num_classes": 10, "max_len": 8}
    assert data.train_instances == 3_000 and data.val_instances == 500
    _check_keys(data.train, 50, 8)
    _check_keys(data.val, 50, 8)
    # Per length, all keys but at most one are full.
    for split in (data.train, data.val):
        for length in {b.fields["length"] for b in split}:
            sizes = [b.size for b in split if b.fields["length"] == length]
            assert sum(s < 50 for s in sizes) <= 1


def test_list_reduction_dataset_determinism_and_independent_splits() -> None:
    a = list_reduction_dataset(n_train=400, n_val=400, bucket_size=100, seed=5)
    b = list_reduction_dataset(n_train=400, n_val=400, bucket_size=100, seed=5)
    c = list_reduction_dataset(n_train=400, n_val=400, bucket_size=100, seed=6)

    def flat(batches: list[Batch]) -> list[tuple[int, ...]]:
        return [tuple(col.tolist()) for batch in batches for col in batch.inputs["tokens"].T]

    assert flat(a.train) == flat(b.train) and flat(a.val) == flat(b.val)
    assert flat(a.train) != flat(c.train)
    # Same size, same seed: train and val must still differ (independent streams).
    assert sorted(flat(a.train)) != sorted(flat(a.val))


def test_list_reduction_dataset_default_size() -> None:
    # its generation speed is measured (the demo prints it), never asserted: this machine is shared
    data = list_reduction_dataset()
    assert data.train_instances == 100_000 and data.val_instances == 10_000


def test_digits_split_sizes_and_payloads() -> None:
    data = load_digits_dataset(batch_size=100, val_fraction=0.2, seed=0)
    assert data.name == "digits" and data.num_classes == 10
    assert data.meta == {"input_width": 64}
    assert data.train_instances + data.val_instances == 1797
    assert data.val_instances == round(0.2 * 1797)
    assert [b.size for b in data.train] == [100] * 14 + [38]
    for batch in data.train + data.val:
        x, target = batch.inputs["x"], batch.inputs["target"]
        assert x.dtype == np.float64 and x.shape == (batch.size, 64)
        assert target.dtype == np.int64 and target.shape == (batch.size,)
        assert x.min() >= 0.0 and x.max() <= 1.0
        assert set(target.tolist()) <= set(range(10))
    assert max(b.inputs["x"].max() for b in data.train) == 1.0


def test_digits_shuffle_is_deterministic_by_seed() -> None:
    a, b, c = (load_digits_dataset(seed=s) for s in (0, 0, 1))
    assert np.array_equal(a.train[0].inputs["x"], b.train[0].inputs["x"])
    assert not np.array_equal(a.train[0].inputs["x"], c.train[0].inputs["x"])


def test_digits_rejects_bad_val_fraction() -> None:
    with pytest.raises(ValueError, match="val_fraction"):
        load_digits_dataset(val_fraction=1.0)
