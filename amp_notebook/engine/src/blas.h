// Matrix products for the kernels: numpy's own BLAS (found at run time, see engine/blas.py), called the
// way numpy's matmul calls it, so a native product equals numpy's `a @ b` bit for bit on the same inputs.
// One BLAS in the process: the engine loads no BLAS of its own and starts no thread pool; each worker
// thread calls BLAS from itself, and the run keeps BLAS at one thread (runtime/blas.py). If numpy's BLAS
// cannot be found, a plain loop (numpy's own no-BLAS loop) computes the products and status() says so.
// Never touches Python.
#pragma once

#include <string>

#include "tensor.h"

namespace amp {

// Load the cblas symbols of the library at `path`, already loaded by numpy (dlopen RTLD_NOLOAD: nothing
// new is mapped). Symbol names vary by build (cblas_dgemm, scipy_cblas_dgemm64_, ...): each style is
// tried. Returns an empty string on success, else why not (the engine then uses the plain loop).
std::string blas_load(const std::string& path);
// "scipy_cblas_dgemm64_ in /path/libscipy_openblas64_.so (ILP64)", or why the plain loop is in use.
std::string blas_status();
bool blas_loaded();
// Forget the loaded library (tests compare the plain loop with BLAS).
void blas_unload();

// out = a @ b for 2-d float tensors of one dtype (float32 or float64), out contiguous (m, p) and
// preallocated. The dispatch is numpy's (_core/src/umath/matmul.c.src): dot for a 1x1 result, gemv for
// a vector on either side, gemm (or syrk for a @ a.T of one buffer) otherwise, copies for layouts BLAS
// cannot take, and the plain loop for empty dimensions.
void matmul(const Tensor& a, const Tensor& b, Tensor& out);
// np.vdot(a, a) for a contiguous float32 or float64 tensor (numpy's TYPE_dot: BLAS dot summed into a double,
// rounded to the dtype), as a double: the clip norm of an optimizer step.
double vdot_self(const Tensor& a);
// A 2-d view with its axes swapped (what numpy's `.T` is).
Tensor transposed(const Tensor& t);

}  // namespace amp
