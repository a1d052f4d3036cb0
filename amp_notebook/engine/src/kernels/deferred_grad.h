// A weight gradient held back: the rows (x_r, g_r) whose outer products a Linear adds into its accumulator
// grads["W"] (x.T @ g), queued per bundle and added all at once when something is about to read the
// accumulator (an update, a check, Python: Kernel::settle) or the queue is full.
//
// Why: the per-tree layout sends one row per message, and adding one outer product reads and writes the
// whole accumulator (for a 128 x 320 weight, 41k elements, three floating-point operations each) per
// message. Added together, a strip of one accumulator row stays in registers while every queued row adds
// into it, and the sign fix-up below runs once per strip instead of once per row.
//
// The bits: the Python op adds `0 + x_r[i] * g_r[j]` (numpy's product of one row: a sum of one term, added
// to a zero) into element (i, j) row after row. Let p = x_r[i] * g_r[j] and a the element. Then
// a + (0 + p) = a + p, except that a + p is -0 where both are -0 and a + (0 + p) is +0 there; a + (0 + p)
// is never -0. So each row's add is (a + p) + 0, and by induction over the rows the whole sequence equals
// (((a + p_1) + p_2) ... + p_k) + 0: one multiply and one add per row and element, then a single + 0.
// Every operation is an IEEE one in lanes (no contraction to fused multiply-adds: build.py compiles with
// -ffp-contract=off), so the result is bit-equal to adding the rows one at a time, in any vector width,
// wherever the queue happens to be flushed: a run paused for a checkpoint gives the bits of one that was not.
// A bundle of a few rows adds them one at a time in their order, as if each were its own message (numpy
// sums a bundle's products inside one BLAS call first: equal to rounding, like every other bundled kernel).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor.h"

namespace amp {

class DeferredGradient {
 public:
  // Whether the rows of x (m, n) and g (m, p) can wait for `acc`: a bundle of at most kMaxBundleRows rows,
  // one dtype (float32 or float64) for all three, and an accumulator that is a contiguous (n, p) matrix.
  // A larger bundle goes to BLAS as numpy's x.T @ g (a matrix product beats row after row there), after
  // the queued rows.
  static bool fits(const Tensor& acc, const Tensor& x, const Tensor& g);
  // Queue the rows of x and g (after `fits`). `restart`: the accumulator holds no gradient yet (the first
  // after an update), so queued rows are dropped and the accumulator counts as zero at the next flush.
  void add(Tensor& acc, const Tensor& x, const Tensor& g, bool restart);
  // Add every queued row into `acc` (the same accumulator the rows were queued for); nothing if none.
  void settle(Tensor& acc);
  int64_t queued() const { return rows_; }

 private:
  static constexpr int64_t kMaxBundleRows = 4;
  static constexpr int64_t kMaxRows = 64;  // a flush per 64 rows at most: (n + p) * 64 values held
  std::vector<unsigned char> x_, g_;       // queued rows, dtype_ values, row after row
  int64_t rows_ = 0, n_ = 0, p_ = 0;
  DType dtype_ = DType::f64;
  bool zero_first_ = false;
};

}  // namespace amp
