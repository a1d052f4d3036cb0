"""IDX reader and MNIST loader (files supplied by the user; nothing is downloaded)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from amp_notebook.data.batch import Dataset
from amp_notebook.data.digits import batches_from_arrays
from amp_notebook.errors import DataFileNotFoundError, DataFormatError, SettingError

# IDX type byte -> big-endian numpy dtype.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

MNIST_FILES: dict[str, str] = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
MNIST_WIDTH = 784


def _read_bytes(path: Path) -> bytes:
    if path.suffix == ".gz":
        try:
            return gzip.decompress(path.read_bytes())
        except (OSError, EOFError) as exc:
            raise DataFormatError(
                f"{path}: expected a gzip-compressed IDX file, but decompression failed ({exc}); "
                "re-download the file or pass the uncompressed version"
            ) from exc
    return path.read_bytes()


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (plain or `.gz`) into an array in native byte order.

    Header: two zero bytes, a type byte (0x08 ubyte, 0x09 byte, 0x0B short, 0x0C int, 0x0D float,
    0x0E double), a dimension count, then one big-endian uint32 per dimension, then the data.
    """
    path = Path(path)
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise DataFormatError(
            f"{path}: truncated IDX file: expected at least a 4-byte magic number, found {len(raw)} bytes"
        )
    zero, type_code, ndim = int.from_bytes(raw[0:2], "big"), raw[2], raw[3]
    if zero != 0 or type_code not in IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in IDX_DTYPES)
        raise DataFormatError(
            f"{path}: bad IDX magic number 0x{int.from_bytes(raw[0:4], 'big'):08X}: expected 0x0000TTNN "
            f"with type byte TT in {{{known}}} (e.g. 0x00000803 for images, 0x00000801 for labels); "
            "is this really an IDX file (and not, say, an HTML error page)?"
        )
    header_len = 4 + 4 * ndim
    if len(raw) < header_len:
        raise DataFormatError(
            f"{path}: truncated IDX header: expected {header_len} bytes for {ndim} dimensions, found {len(raw)} bytes"
        )
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = IDX_DTYPES[type_code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    found = len(raw) - header_len
    if found != expected:
        kind = "truncated IDX data" if found < expected else "IDX size mismatch"
        raise DataFormatError(
            f"{path}: {kind}: header declares shape {shape} of {dtype.name} ({expected} data bytes), "
            f"found {found} data bytes; the file is incomplete or corrupt, re-download it"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header_len, count=expected // dtype.itemsize)
    return data.reshape(shape).astype(dtype.newbyteorder("="))


def _find(directory: Path, stem: str) -> Path:
    candidates = [directory / stem, directory / f"{stem}.gz"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(c) for c in candidates)
    raise DataFileNotFoundError(
        f"MNIST file {stem!r} not found: looked for {looked}; download the four MNIST IDX files "
        f"({', '.join(MNIST_FILES.values())}, plain or .gz) into {directory}"
    )


def _load_split(
    directory: Path, images_stem: str, labels_stem: str, limit: int | None
) -> tuple[np.ndarray, np.ndarray]:
    images_path, labels_path = _find(directory, images_stem), _find(directory, labels_stem)
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        raise DataFormatError(f"{images_path}: expected images of shape (N, 28, 28), found {images.shape}")
    if labels.ndim != 1:
        raise DataFormatError(f"{labels_path}: expected labels of shape (N,), found {labels.shape}")
    if images.shape[0] != labels.shape[0]:
        raise DataFormatError(
            f"{images_path} / {labels_path}: expected as many labels as images, found {images.shape[0]} "
            f"images and {labels.shape[0]} labels"
        )
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    x = images.reshape(images.shape[0], MNIST_WIDTH).astype(np.float64) / 255.0
    return x, labels.astype(np.int64)


def load_mnist_dataset(
    directory: str | Path, batch_size: int = 100, seed: int = 0, limit: int | None = None
) -> Dataset:
    """MNIST from the four standard IDX files in `directory`.

    Keys: `"x"` float64 (B, 784) in [0, 1], `"target"` int64 (B,). The training set is shuffled with
    `seed` (after applying `limit`, which caps the instances read from each split); the test set becomes
    the validation split, in file order.
    """
    if limit is not None and limit <= 0:
        raise SettingError("limit", f"limit: expected a positive integer or None, got {limit}")
    directory = Path(directory)
    x_train, y_train = _load_split(directory, MNIST_FILES["train_images"], MNIST_FILES["train_labels"], limit)
    x_val, y_val = _load_split(directory, MNIST_FILES["test_images"], MNIST_FILES["test_labels"], limit)
    order = np.random.default_rng(seed).permutation(x_train.shape[0])
    return Dataset(
        name="mnist",
        train=batches_from_arrays(x_train[order], y_train[order], batch_size),
        val=batches_from_arrays(x_val, y_val, batch_size),
        num_classes=10,
        meta={"input_width": MNIST_WIDTH},
    )
