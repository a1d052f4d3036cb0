"""Native products use numpy's own BLAS, called as numpy calls it: bit-equal to ``a @ b`` on the same inputs,
and safe from two native threads at once. (These compare two calls of the same library on the same
inputs; they do not depend on how the library rounds.)"""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from amp_notebook import engine
from amp_notebook.engine.blas import numpy_blas_path

SHAPES = [(1, 1, 1), (1, 7, 1), (1, 7, 5), (6, 7, 1), (6, 1, 5), (1, 1, 5), (6, 7, 5), (33, 64, 17), (128, 96, 80),
          (0, 3, 4), (3, 0, 4)]  # fmt: skip


def test_the_engine_uses_numpys_blas() -> None:
    status = engine.status()
    assert status["available"] and status["blas_loaded"], status
    assert numpy_blas_path() in status["blas"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
@pytest.mark.parametrize("transpose", [(False, False), (True, False), (False, True)])
def test_native_matmul_is_bit_equal_to_numpy(
    shape: tuple[int, int, int], dtype: type, transpose: tuple[bool, bool]
) -> None:
    m, n, p = shape
    rng = np.random.default_rng(m * 100 + n * 10 + p)
    ta, tb = transpose
    a = rng.standard_normal((n, m) if ta else (m, n)).astype(dtype)
    b = rng.standard_normal((p, n) if tb else (n, p)).astype(dtype)
    with threadpool_limits(1, user_api="blas"):
        expected = (a.T if ta else a) @ (b.T if tb else b)
        got = engine.native().matmul(a, b, transpose_a=ta, transpose_b=tb)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_two_native_threads_multiply_at_once_and_get_the_serial_results() -> None:
    rng = np.random.default_rng(2)
    pairs = [(rng.standard_normal((64, 48)), rng.standard_normal((48, 32))) for _ in range(2)]
    with threadpool_limits(1, user_api="blas"):
        expected = [a @ b for a, b in pairs]
        got = engine.native().matmul_in_threads(pairs, repeats=200)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)


def test_without_blas_the_plain_loop_computes_the_same_product() -> None:
    native = engine.native()
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
    native.unload_blas()
    try:
        assert "plain loop" in native.status()["blas"]
        np.testing.assert_allclose(native.matmul(a, b), a @ b, rtol=1e-14)
    finally:
        assert native.load_blas(numpy_blas_path()) == ""
    assert native.status()["blas_loaded"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_an_outer_product_keeps_numpys_zeros_and_strides(dtype: type) -> None:
    """A product with one inner term (a weight's gradient from one row) is numpy's plain loop: a zero plus the
    term, so -0.0 products come out +0.0 as numpy's do; rows read with strides give the same."""
    a = np.array([[-0.0], [2.0], [-3.0], [0.0], [5.0]], dtype=dtype)
    b = np.array([[0.0, -0.0, 1.5, -2.0, 0.0, 7.0, -1.0, 3.0, 0.25]], dtype=dtype)
    with threadpool_limits(1, user_api="blas"):
        for x, y, ta, tb in [(a, b, False, False), (a.T.copy(), b, True, False), (a, b.T.copy(), False, True),
                             (a.T.copy(), b.T.copy(), True, True)]:  # fmt: skip
            expected = (x.T if ta else x) @ (y.T if tb else y)
            got = engine.native().matmul(x, y, transpose_a=ta, transpose_b=tb)
            np.testing.assert_array_equal(got, expected)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
    assert not np.signbit(expected[expected == 0]).any()  # numpy's loop adds to a zero: no -0.0 survives
