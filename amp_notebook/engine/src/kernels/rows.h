// What the graph kernels (aggregate_rows.cc, dynamic.cc, sparse.cc, readout.cc, the losses) share: views
// that drop the leading axis (numpy's `x[i]`), numpy's pairwise sum (so sums and means round as numpy's
// do), index vectors checked as sparse._index_vector checks them, scatter-adds of rows, and the texts of
// Python values in error messages (`repr` of a list of ints, of a state value).
// Never touches Python, states' caches or other nodes.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace amp {

// `x[i]`: row i of the leading axis, the other axes kept (a view; x has at least one axis).
inline Tensor row_of(const Tensor& x, int64_t i) {
  Storage* st = x.storage();
  if (st) st->refs.fetch_add(1, std::memory_order_relaxed);  // view_of takes over one reference
  char* p = static_cast<char*>(x.raw()) + i * x.stride(0) * static_cast<int64_t>(itemsize(x.dtype()));
  return Tensor::view_of(st, p, x.dtype(), x.shape() + 1, x.strides() + 1, x.rank() - 1);
}

// The items of one row of a contiguous tensor (the product of the axes after the first).
inline int64_t row_items(const Tensor& x) {
  int64_t n = 1;
  for (int k = 1; k < x.rank(); ++k) n *= x.dim(k);
  return n;
}

// numpy's pairwise summation (umath loops, `pairwise_sum`): below 8 items a plain loop from -0.0, up to
// 128 eight partial sums combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)) then the rest, beyond that the
// two halves (split at a multiple of 8) summed separately. Accumulates in T, as numpy does for T.
template <class T>
T pairwise_sum(const T* a, int64_t n, int64_t stride) {
  if (n < 8) {
    T res = T(-0.0);
    for (int64_t i = 0; i < n; ++i) res += a[i * stride];
    return res;
  }
  if (n <= 128) {
    T r[8];
    for (int k = 0; k < 8; ++k) r[k] = a[k * stride];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int k = 0; k < 8; ++k) r[k] += a[(i + k) * stride];
    T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i * stride];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2, stride) + pairwise_sum(a + n2 * stride, n - n2, stride);
}

// np.add.reduce over n contiguous items (`x.sum()`, `np.mean` before its division): 0 plus the pairwise sum.
template <class T>
T numpy_sum(const T* a, int64_t n) {
  return T(0) + pairwise_sum(a, n, 1);
}

// np.add.reduceat for one segment [a, b) (b > a): its first item plus the pairwise sum of the others.
template <class T>
T segment_sum(const T* x, int64_t a, int64_t b) {
  return x[a] + pairwise_sum(x + a + 1, b - a - 1, 1);
}

// repr of a Python list of ints: "[1, 3, 6]".
inline std::string int_list(const int64_t* v, int64_t n, int64_t stride = 1) {
  std::string out = "[";
  for (int64_t i = 0; i < n; ++i) {
    if (i) out += ", ";
    out += std::to_string(v[i * stride]);
  }
  return out + "]";
}

// repr of a Python tuple of ints, such as a shape: "(2, 3)", "(4,)", "()".
inline std::string shape_tuple(const int64_t* dims, int n) {
  std::string out = "(";
  for (int i = 0; i < n; ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + (n == 1 ? ",)" : ")");
}

// repr of a state value: an int, or True/False.
inline std::string value_text(int64_t v, bool is_bool) {
  if (is_bool) return v ? "True" : "False";
  return std::to_string(v);
}

// sparse._index_vector: `index` must be a 1-D integer vector with entries in [0, size); the Python op's
// error texts, naming the op and the port. Returns the int64 data (the boundary widens every integer
// payload to int64, so a checked index is always int64).
inline const int64_t* index_vector(const char* op, const std::string& port, int port_index, const Tensor& index,
                                   int64_t size) {
  if (index.rank() != 1 || index.dtype() != DType::i64)
    throw OpError(std::string(op) + " input '" + port + "': expected a 1-D integer index vector, got shape " +
                      shape_text(index) + " dtype " + dtype_name(index.dtype()),
                  port_index);
  const int64_t n = index.dim(0), s = index.stride(0);
  const int64_t* v = index.data<int64_t>();
  if (n == 0) return v;
  int64_t lo = v[0], hi = v[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = v[i * s] < lo ? v[i * s] : lo;
    hi = v[i * s] > hi ? v[i * s] : hi;
  }
  if (lo < 0 || hi >= size)
    throw OpError(std::string(op) + " input '" + port + "': indices must lie in [0, " + std::to_string(size) +
                      ") (the number of rows), found [" + std::to_string(lo) + ", " + std::to_string(hi) +
                      "]; fix the edge list or the node count",
                  port_index);
  return v;
}

// Calls f.template operator()<T>() for the C type of a numeric dtype (bool payloads are refused: no op
// here adds or scales flags).
template <class F>
void numeric_dtype(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::f64: f(double()); break;
    case DType::f32: f(float()); break;
    case DType::i64: f(int64_t()); break;
    default: throw OpError(std::string(what) + ": expected a numeric payload, got dtype bool");
  }
}

// sparse.scatter_add_rows: out = zeros((n, ...)) then out[idx[e]] += x[e] for e in order (repeated indices
// accumulate in edge order, as both of the Python op's routes do). `x` rows of `width` items, contiguous;
// `idx` has `stride`. The caller checked every index.
template <class T>
void scatter_add(const T* x, const int64_t* idx, int64_t edges, int64_t stride, int64_t width, T* out) {
  for (int64_t e = 0; e < edges; ++e) {
    T* dst = out + idx[e * stride] * width;
    const T* src = x + e * width;
    for (int64_t j = 0; j < width; ++j) dst[j] += src[j];
  }
}

// out[e] = x[idx[e]] for rows of `row_bytes` (numpy's `x[idx]`), x and out contiguous.
inline void gather_rows(const char* x, const int64_t* idx, int64_t edges, int64_t stride, size_t row_bytes,
                        char* out) {
  if (!row_bytes) return;
  for (int64_t e = 0; e < edges; ++e) std::memcpy(out + e * row_bytes, x + idx[e * stride] * row_bytes, row_bytes);
}

// A shape with its leading axis replaced by `rows`.
inline void with_rows(const Tensor& like, int64_t rows, int64_t* shape) {
  for (int k = 0; k < like.rank(); ++k) shape[k] = like.dim(k);
  shape[0] = rows;
}

// A backward message whose forward left nothing here: take_cached's error (kernel.h), for any entry type.
[[noreturn]] inline void nothing_cached(const State& s, const Layout& layout) {
  throw OpError("a backward message with state " + layout.describe(s) +
                " arrived but nothing was cached for it (its forward never ran here in training)");
}

// The entry cached under `s`, taken out (or that error).
template <class V>
V take_entry(StateMap<V>& cache, const State& s, const Layout& layout) {
  bool found = false;
  V v = cache.take(s, &found);
  if (!found) nothing_cached(s, layout);
  return v;
}

// A loss's cached gradient times the incoming gradient g (`grad * g` with g a Python float: in the
// gradient's dtype, g rounded to it first). g is 1.0 in every run; the scaled copy is for other callers.
inline Tensor loss_scaled(const Tensor& grad, double g) {
  Tensor out = Tensor::empty(grad.dtype(), grad.shape(), grad.rank());
  const Tensor src = grad.contiguous_copy();
  for (int64_t i = 0, n = src.size(); i < n; ++i) {
    if (src.dtype() == DType::f64) out.data<double>()[i] = src.data<double>()[i] * g;
    else out.data<float>()[i] = src.data<float>()[i] * static_cast<float>(g);
  }
  return out;
}

// A loss's backward (loss._Loss.backward): the gradient cached under `s`, times g unless g is 1.
inline Tensor loss_gradient(StateMap<Tensor>& cache, const State& s, const Tensor& g, const Layout& layout) {
  Tensor grad = take_cached(cache, s, layout);
  const double v = g.at(0);
  return v == 1.0 ? grad : loss_scaled(grad, v);
}

// Vectors reused across calls (a kernel's pool), so a join or cache entry of variable size costs no
// allocation once the pool has warmed up.
template <class V>
class Pool {
 public:
  std::vector<V> get() {
    if (spare_.empty()) return {};
    std::vector<V> v = std::move(spare_.back());
    spare_.pop_back();
    return v;
  }
  void put(std::vector<V>&& v) {
    if (spare_.size() >= 64) return;  // enough for what is in flight; the rest are freed
    v.clear();
    spare_.push_back(std::move(v));
  }

 private:
  std::vector<std::vector<V>> spare_;
};

}  // namespace amp
