"""IDX reading (plain and gzip), error messages, and the MNIST loader on tiny fixture files."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from amp_notebook.data import load_mnist_dataset, read_idx

TYPE_CODES = {
    np.dtype(np.uint8): 0x08,
    np.dtype(np.int8): 0x09,
    np.dtype(np.int16): 0x0B,
    np.dtype(np.int32): 0x0C,
    np.dtype(np.float32): 0x0D,
    np.dtype(np.float64): 0x0E,
}


def idx_bytes(array: np.ndarray) -> bytes:
    """Our own IDX writer: zero, zero, type byte, ndim, big-endian uint32 dims, big-endian data."""
    code = TYPE_CODES[array.dtype]
    header = bytes([0, 0, code, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write_idx(path: Path, array: np.ndarray) -> Path:
    data = idx_bytes(array)
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("dtype", list(TYPE_CODES))
def test_roundtrip_all_dtypes(tmp_path: Path, dtype: np.dtype, suffix: str) -> None:
    rng = np.random.default_rng(0)
    array = rng.integers(-100, 100, size=(3, 4, 5)) if dtype.kind != "u" else rng.integers(0, 256, (3, 4, 5))
    array = array.astype(dtype)
    path = write_idx(tmp_path / f"a.idx{suffix}", array)
    back = read_idx(path)
    assert back.dtype == dtype and back.dtype.isnative
    assert back.shape == (3, 4, 5)
    assert np.array_equal(back, array)


def test_reads_standard_magic_numbers(tmp_path: Path) -> None:
    images = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28)
    labels = np.array([3, 7], dtype=np.uint8)
    assert idx_bytes(images)[:4] == (0x00000803).to_bytes(4, "big")
    assert idx_bytes(labels)[:4] == (0x00000801).to_bytes(4, "big")
    assert np.array_equal(read_idx(write_idx(tmp_path / "i", images)), images)
    assert np.array_equal(read_idx(write_idx(tmp_path / "l.gz", labels)), labels)


def test_bad_magic_names_file(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_bytes(b"<!DOCTYPE html><html></html>")
    with pytest.raises(ValueError, match="bad IDX magic") as info:
        read_idx(path)
    assert str(path) in str(info.value)


def test_unknown_type_byte_is_bad_magic(tmp_path: Path) -> None:
    path = tmp_path / "weird"
    path.write_bytes(bytes([0, 0, 0x0A, 1]) + (0).to_bytes(4, "big"))
    with pytest.raises(ValueError, match="0x00000A01"):
        read_idx(path)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_truncated_data_names_file_and_sizes(tmp_path: Path, suffix: str) -> None:
    data = idx_bytes(np.zeros((4, 28, 28), dtype=np.uint8))[:-10]
    path = tmp_path / f"short{suffix}"
    path.write_bytes(gzip.compress(data) if suffix else data)
    with pytest.raises(ValueError, match="truncated") as info:
        read_idx(path)
    message = str(info.value)
    assert str(path) in message and str(4 * 28 * 28) in message and str(4 * 28 * 28 - 10) in message


def test_truncated_header_and_tiny_file(tmp_path: Path) -> None:
    path = tmp_path / "hdr"
    path.write_bytes(bytes([0, 0, 0x08, 3]) + (5).to_bytes(4, "big"))
    with pytest.raises(ValueError, match="truncated IDX header"):
        read_idx(path)
    path.write_bytes(b"\x00\x00")
    with pytest.raises(ValueError, match="truncated IDX file"):
        read_idx(path)


def test_trailing_bytes_are_a_size_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "long"
    path.write_bytes(idx_bytes(np.zeros(3, dtype=np.uint8)) + b"xx")
    with pytest.raises(ValueError, match="size mismatch"):
        read_idx(path)


def test_corrupt_gzip_names_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match="gzip") as info:
        read_idx(path)
    assert str(path) in str(info.value)


def write_mnist(directory: Path, n_train: int, n_test: int, gz: bool) -> None:
    rng = np.random.default_rng(1)
    suffix = ".gz" if gz else ""
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28)).astype(np.uint8)
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        write_idx(directory / f"{prefix}-images-idx3-ubyte{suffix}", images)
        write_idx(directory / f"{prefix}-labels-idx1-ubyte{suffix}", labels)


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist_dataset(tmp_path: Path, gz: bool) -> None:
    write_mnist(tmp_path, n_train=250, n_test=120, gz=gz)
    data = load_mnist_dataset(tmp_path, batch_size=100, seed=0)
    assert data.name == "mnist" and data.num_classes == 10 and data.meta == {"input_width": 784}
    assert [b.size for b in data.train] == [100, 100, 50]
    assert [b.size for b in data.val] == [100, 20]
    for batch in data.train + data.val:
        x, target = batch.inputs["x"], batch.inputs["target"]
        assert x.dtype == np.float64 and x.shape == (batch.size, 784)
        assert x.min() >= 0.0 and x.max() <= 1.0
        assert target.dtype == np.int64 and target.shape == (batch.size,)
    # Validation keeps file order; pixels are scaled by 1/255.
    raw = read_idx(tmp_path / f"t10k-images-idx3-ubyte{'.gz' if gz else ''}")
    assert np.allclose(data.val[0].inputs["x"][0], raw[0].reshape(-1) / 255.0)


def test_load_mnist_limit_and_mixed_compression(tmp_path: Path) -> None:
    write_mnist(tmp_path, n_train=50, n_test=30, gz=False)
    plain = tmp_path / "t10k-labels-idx1-ubyte"
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    data = load_mnist_dataset(tmp_path, batch_size=8, limit=10)
    assert data.train_instances == 10 and data.val_instances == 10


def test_missing_file_lists_what_was_looked_for(tmp_path: Path) -> None:
    write_mnist(tmp_path, n_train=5, n_test=5, gz=False)
    (tmp_path / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError) as info:
        load_mnist_dataset(tmp_path)
    message = str(info.value)
    assert str(tmp_path / "train-labels-idx1-ubyte") in message
    assert str(tmp_path / "train-labels-idx1-ubyte.gz") in message


def test_label_count_mismatch_names_both_files(tmp_path: Path) -> None:
    write_mnist(tmp_path, n_train=5, n_test=5, gz=False)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(4, dtype=np.uint8))
    with pytest.raises(ValueError, match="5 images and 4 labels") as info:
        load_mnist_dataset(tmp_path)
    assert "train-labels-idx1-ubyte" in str(info.value)
