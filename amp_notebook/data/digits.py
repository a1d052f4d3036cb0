"""The scikit-learn 8x8 digits as a `Dataset` of fixed-size keys (ships with scikit-learn; no download)."""

from __future__ import annotations

import numpy as np

from amp_notebook.data.batch import Batch, Dataset, check_count
from amp_notebook.errors import DataFormatError, SettingError

DIGITS_WIDTH = 64
DIGITS_MAX_PIXEL = 16.0


def batches_from_arrays(x: np.ndarray, target: np.ndarray, batch_size: int) -> list[Batch]:
    """Cut `x` (N, D) and `target` (N,) into keys of `batch_size` instances (the last may be smaller)."""
    check_count("batch_size", batch_size, 1)
    if x.shape[0] != target.shape[0]:
        raise DataFormatError(
            f"x/target: expected the same number of instances, got {x.shape[0]} inputs and {target.shape[0]} targets"
        )
    out: list[Batch] = []
    for start in range(0, x.shape[0], batch_size):
        xb = np.ascontiguousarray(x[start : start + batch_size])
        tb = np.ascontiguousarray(target[start : start + batch_size])
        out.append(Batch(inputs={"x": xb, "target": tb}, size=int(xb.shape[0])))
    return out


def load_digits_dataset(batch_size: int = 100, val_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """Digits as keys: `"x"` float64 (B, 64) in [0, 1], `"target"` int64 (B,).

    The 1,797 images are shuffled with `seed`, then the last `round(val_fraction * N)` form the validation
    split.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise SettingError("val_fraction", f"val_fraction: expected a value in [0, 1), got {val_fraction}")
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = np.asarray(bunch.data, dtype=np.float64) / DIGITS_MAX_PIXEL
    target = np.asarray(bunch.target, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(x.shape[0])
    x, target = x[order], target[order]
    n_val = round(val_fraction * x.shape[0])
    n_train = x.shape[0] - n_val
    return Dataset(
        name="digits",
        train=batches_from_arrays(x[:n_train], target[:n_train], batch_size),
        val=batches_from_arrays(x[n_train:], target[n_train:], batch_size),
        num_classes=10,
        meta={"input_width": DIGITS_WIDTH},
    )
