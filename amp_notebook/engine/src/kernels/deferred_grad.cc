// See deferred_grad.h for what is held back and why the bits equal the Python op's.
#include "kernels/deferred_grad.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace amp {

namespace {

template <class T, int Bytes>
struct VecOf {
  typedef T type __attribute__((vector_size(Bytes)));
};

// acc (n, p) += the queued rows, strip by strip: a strip is kVecs vectors of one accumulator row, held in
// registers while every queued row r adds x_r[i] * g_r[j0 .. j0 + width) into it; then + 0 (the sign fix-up)
// and back to memory. Columns past the last whole strip go the same way one element at a time.
template <class T, int Bytes>
inline __attribute__((always_inline)) void add_rows(T* acc, int64_t n, int64_t p, const T* X, const T* G,
                                                    int64_t rows) {
  using V = typename VecOf<T, Bytes>::type;
  constexpr int kLanes = Bytes / static_cast<int>(sizeof(T)), kVecs = 8;
  constexpr int64_t kStrip = kLanes * kVecs;
  int64_t j0 = 0;
  for (; j0 + kStrip <= p; j0 += kStrip) {
    for (int64_t i = 0; i < n; ++i) {
      T* a = acc + i * p + j0;
      V t[kVecs];
#pragma GCC unroll 8
      for (int k = 0; k < kVecs; ++k) std::memcpy(&t[k], a + k * kLanes, Bytes);
      for (int64_t r = 0; r < rows; ++r) {
        const T xi = X[r * n + i];  // a scalar times a vector: the scalar in every lane
        const T* g = G + r * p + j0;
#pragma GCC unroll 8
        for (int k = 0; k < kVecs; ++k) {
          V gv;
          std::memcpy(&gv, g + k * kLanes, Bytes);
          t[k] += xi * gv;
        }
      }
#pragma GCC unroll 8
      for (int k = 0; k < kVecs; ++k) {
        t[k] += V{};
        std::memcpy(a + k * kLanes, &t[k], Bytes);
      }
    }
  }
  if (j0 == p) return;
  for (int64_t i = 0; i < n; ++i) {
    T* a = acc + i * p;
    for (int64_t r = 0; r < rows; ++r) {
      const T xi = X[r * n + i];
      const T* g = G + r * p;
      for (int64_t j = j0; j < p; ++j) a[j] += xi * g[j];
    }
    for (int64_t j = j0; j < p; ++j) a[j] += T(0);
  }
}

// Two builds of the loop: 16-byte vectors (every x86-64) and 32-byte ones where the CPU has AVX2. Both give
// the same bits (IEEE operations lane by lane); the wider one halves the instructions.
template <class T>
__attribute__((noinline)) void add_rows_base(T* acc, int64_t n, int64_t p, const T* X, const T* G, int64_t rows) {
  add_rows<T, 16>(acc, n, p, X, G, rows);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
template <class T>
__attribute__((noinline, target("avx2"))) void add_rows_avx2(T* acc, int64_t n, int64_t p, const T* X, const T* G,
                                                              int64_t rows) {
  add_rows<T, 32>(acc, n, p, X, G, rows);
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

template <class T>
void add_rows_any(T* acc, int64_t n, int64_t p, const T* X, const T* G, int64_t rows) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (has_avx2()) return add_rows_avx2<T>(acc, n, p, X, G, rows);
#endif
  add_rows_base<T>(acc, n, p, X, G, rows);
}

// Rows of a 2-D tensor (any strides) appended to `out` as contiguous values of T.
template <class T>
void append_rows(std::vector<unsigned char>* out, const Tensor& t) {
  const int64_t m = t.dim(0), w = t.dim(1), s0 = t.stride(0), s1 = t.stride(1);
  const size_t at = out->size();
  out->resize(at + static_cast<size_t>(m * w) * sizeof(T));
  T* dst = reinterpret_cast<T*>(out->data() + at);
  const T* src = t.data<T>();
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < w; ++j) dst[r * w + j] = src[r * s0 + j * s1];
}

}  // namespace

bool DeferredGradient::fits(const Tensor& acc, const Tensor& x, const Tensor& g) {
  const DType d = acc.dtype();
  if ((d != DType::f32 && d != DType::f64) || x.dtype() != d || g.dtype() != d) return false;
  if (acc.rank() != 2 || x.rank() != 2 || g.rank() != 2) return false;
  return x.dim(0) == g.dim(0) && x.dim(0) <= kMaxBundleRows && acc.dim(0) == x.dim(1) && acc.dim(1) == g.dim(1) &&
         acc.stride(1) == 1 && acc.stride(0) == acc.dim(1);
}

void DeferredGradient::add(Tensor& acc, const Tensor& x, const Tensor& g, bool restart) {
  if (!fits(acc, x, g)) throw std::logic_error("DeferredGradient::add: rows that do not fit the accumulator");
  if (restart) {
    rows_ = 0;
    x_.clear();
    g_.clear();
    zero_first_ = true;
  } else if ((rows_ > 0 || zero_first_) && (acc.dtype() != dtype_ || acc.dim(0) != n_ || acc.dim(1) != p_)) {
    throw std::logic_error("DeferredGradient::add: another accumulator than the queued rows'");  // one per kernel
  }
  dtype_ = acc.dtype();
  n_ = acc.dim(0);
  p_ = acc.dim(1);
  if (dtype_ == DType::f64) {
    append_rows<double>(&x_, x);
    append_rows<double>(&g_, g);
  } else {
    append_rows<float>(&x_, x);
    append_rows<float>(&g_, g);
  }
  rows_ += x.dim(0);
  if (rows_ >= kMaxRows) settle(acc);
}

void DeferredGradient::settle(Tensor& acc) {
  if (rows_ == 0 && !zero_first_) return;
  if (acc.dtype() != dtype_ || acc.rank() != 2 || acc.dim(0) != n_ || acc.dim(1) != p_ || acc.stride(1) != 1 ||
      acc.stride(0) != p_)
    throw std::logic_error("DeferredGradient::settle: not the accumulator the rows were queued for");
  if (zero_first_) std::memset(acc.raw(), 0, static_cast<size_t>(n_ * p_) * itemsize(dtype_));
  if (rows_ > 0) {
    if (dtype_ == DType::f64)
      add_rows_any<double>(acc.data<double>(), n_, p_, reinterpret_cast<const double*>(x_.data()),
                           reinterpret_cast<const double*>(g_.data()), rows_);
    else
      add_rows_any<float>(acc.data<float>(), n_, p_, reinterpret_cast<const float*>(x_.data()),
                          reinterpret_cast<const float*>(g_.data()), rows_);
  }
  rows_ = 0;
  x_.clear();
  g_.clear();
  zero_first_ = false;
}

}  // namespace amp
