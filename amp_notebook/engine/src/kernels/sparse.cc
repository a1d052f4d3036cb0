// Sparse message-passing kernels, the native twins of ir/ops/sparse.py: Gather, SelectRows, ScatterSum,
// ScatterMean (a differentiable `x` joined by state with int index payloads that carry no gradient; the
// output takes x's state) and the graph readouts SumRows, MeanRows. TypedEdgeSum is in typed_edges.cc.
// Sums run in the Python op's order (edge by edge, as sparse.scatter_add_rows does on either route), so
// float64 results are those of the Python op.
// Never touches Python, the inbox or other nodes.
#include "kernels/rows.h"

namespace amp {

namespace {

// What Gather's and SelectRows' backward need: the index taken and the input's row count.
struct Taken {
  Tensor idx;  // int64 (E,)
  int64_t rows = 0;
};

// sparse._rows_backward: each row's gradient added back into the row it was taken from, zeros elsewhere
// (scatter_add_rows(idx, g, rows)): shape (rows, *g.shape[1:]), g's dtype.
Tensor rows_backward(const Taken& t, const Tensor& g_in, const char* op) {
  const int64_t edges = t.idx.dim(0);
  if (g_in.rank() == 0 || g_in.dim(0) != edges)
    throw OpError(std::string(op) + " output 'out': expected a gradient of " + std::to_string(edges) +
                  " rows, got shape " + shape_text(g_in));
  Tensor g = g_in.contiguous_copy();
  int64_t shape[kMaxRank];
  with_rows(g, t.rows, shape);
  Tensor out = Tensor::zeros(g.dtype(), shape, g.rank());
  const int64_t width = row_items(g);
  numeric_dtype(g.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    scatter_add<T>(g.data<T>(), t.idx.data<int64_t>(), edges, t.idx.stride(0), width, out.data<T>());
  });
  return out;
}

// x[idx] for an index vector already checked: (E, *x.shape[1:]) in x's dtype.
Tensor take_rows(const Tensor& x_in, const Tensor& idx) {
  Tensor x = x_in.contiguous_copy();
  int64_t shape[kMaxRank];
  with_rows(x, idx.dim(0), shape);
  Tensor y = Tensor::empty(x.dtype(), shape, x.rank());
  gather_rows(x.data<char>(), idx.data<int64_t>(), idx.dim(0), idx.stride(0),
              static_cast<size_t>(row_items(x)) * itemsize(x.dtype()), y.data<char>());
  return y;
}

// Gather (sparse.Gather) and SelectRows (sparse.SelectRows): out = x[rows], x's rows at an int index
// vector (E,) in [0, N), or (SelectRows) at the True entries of a bool mask (N,); the index and the row
// count are cached under x's state; backward adds each row's gradient back where it came from.
// Ports: 0 "x", 1 "index" (Gather) or "rows" (SelectRows). Joins on the whole state or key + match_on.
template <bool kSelect>
class TakeRowsKernel : public Kernel {
 public:
  explicit TakeRowsKernel(const KernelSpec& spec) : joins_(spec), port_(spec.in_names.at(1)) {}

  void forward(NodeCtx& ctx, int port, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) {
      JoinEntry got;
      if (!joins_.add(port, xs[i], states[i], 2, *ctx.layout, &got)) continue;
      const Tensor& x = got.slot[0].x;
      const State& sx = got.slot[0].state;
      if (x.rank() == 0) throw OpError(std::string(name()) + " input 'x': expected rows (N, ...), got a scalar", 0);
      Tensor idx = index_of(got.slot[1].x, x.dim(0));
      if (ctx.train) cache_.emplace(sx) = Taken{idx, x.dim(0)};
      out.push(0, take_rows(x, idx), sx);
    }
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      Taken t = take_entry(cache_, states[i], *ctx.layout);
      out.push(0, rows_backward(t, gs[i], name()), states[i]);
    }
  }

  size_t held() const override { return cache_.size() + joins_.size(); }

 private:
  static const char* name() { return kSelect ? "SelectRows" : "Gather"; }

  // The index vector (checked), or a mask's True positions (np.flatnonzero).
  Tensor index_of(const Tensor& rows, int64_t n) const {
    if (!kSelect || rows.dtype() != DType::b8) {
      index_vector(name(), port_, 1, rows, n);
      return rows;
    }
    if (rows.rank() != 1 || rows.dim(0) != n)
      throw OpError("SelectRows input 'rows': a boolean mask needs shape (" + std::to_string(n) +
                    ",) (one flag per row of 'x'), got " + shape_text(rows), 1);
    const uint8_t* flag = rows.data<uint8_t>();
    int64_t count = 0;
    for (int64_t r = 0; r < n; ++r) count += flag[r * rows.stride(0)] != 0;
    Tensor idx = Tensor::empty(DType::i64, {count});
    for (int64_t r = 0, e = 0; r < n; ++r)
      if (flag[r * rows.stride(0)]) idx.data<int64_t>()[e++] = r;
    return idx;
  }

  Joins joins_;
  std::string port_;
  StateMap<Taken> cache_;
};
using GatherKernel = TakeRowsKernel<false>;
using SelectRowsKernel = TakeRowsKernel<true>;
AMP_REGISTER_KERNEL("gather", GatherKernel);
AMP_REGISTER_KERNEL("select_rows", SelectRowsKernel);

// What ScatterSum's and ScatterMean's backward need: the index, the row scale (ScatterMean), the rows.
struct Scattered {
  Tensor idx, scale;
  int64_t rows = 0;
};

// ScatterSum (sparse.ScatterSum) and ScatterMean (sparse.ScatterMean): out[index[e]] += x[e], into
// len(like) rows of zeros (`like` gives the row count only); ScatterMean then multiplies row i by
// 1 / max(count_i, 1) (in float64, the product stored in out's dtype, as numpy's `out *= scale`). The
// index and the scale are cached under x's state; backward gives each edge its destination's gradient,
// g[index] (ScatterMean: (g * scale)[index], float64 as numpy's product with the float64 scale).
// Ports: 0 "x", 1 "index", 2 "like".
template <bool kMean>
class ScatterKernel : public Kernel {
 public:
  explicit ScatterKernel(const KernelSpec& spec) : joins_(spec) {}

  void forward(NodeCtx& ctx, int port, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) {
      JoinEntry got;
      if (!joins_.add(port, xs[i], states[i], 3, *ctx.layout, &got)) continue;
      const State& sx = got.slot[0].state;
      const Tensor& like = got.slot[2].x;
      if (like.rank() == 0) throw OpError(std::string(name()) + " input 'like': expected rows (N, ...), got a scalar", 2);
      const int64_t n = like.dim(0);
      const Tensor& idx = got.slot[1].x;
      index_vector(name(), "index", 1, idx, n);
      Tensor x = got.slot[0].x.contiguous_copy();
      const int64_t edges = x.rank() ? x.dim(0) : -1;
      if (edges != idx.dim(0))
        throw OpError(std::string(name()) + " inputs 'x' and 'index': expected one index per row of 'x' (" +
                      (x.rank() ? std::to_string(edges) : std::string("a scalar")) + "), got " +
                      std::to_string(idx.dim(0)), 1);
      int64_t shape[kMaxRank];
      with_rows(x, n, shape);
      Tensor y = Tensor::zeros(x.dtype(), shape, x.rank());
      const int64_t width = row_items(x);
      numeric_dtype(x.dtype(), name(), [&](auto zero) {
        using T = decltype(zero);
        scatter_add<T>(x.data<T>(), idx.data<int64_t>(), edges, idx.stride(0), width, y.data<T>());
      });
      Tensor scale;
      if (kMean) {
        if (x.dtype() == DType::i64)
          throw OpError("ScatterMean input 'x': the mean of integer rows cannot be stored in an integer payload", 0);
        scale = row_scale(idx, n);
        const double* sc = scale.data<double>();
        if (x.dtype() == DType::f64) scale_rows<double>(y, sc, n, width);
        else scale_rows<float>(y, sc, n, width);
      }
      if (ctx.train) cache_.emplace(sx) = Scattered{idx, scale, n};
      out.push(0, y, sx);
    }
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      Scattered e = take_entry(cache_, states[i], *ctx.layout);
      const Tensor& g = gs[i];
      if (g.rank() == 0 || g.dim(0) != e.rows)
        throw OpError(std::string(name()) + " output 'out': expected a gradient of " + std::to_string(e.rows) +
                      " rows, got shape " + shape_text(g));
      if (!kMean) {
        out.push(0, take_rows(g, e.idx), states[i]);
        continue;
      }
      Tensor gd = as_dtype(g, DType::f64).contiguous_copy();  // g * scale: float64
      int64_t shape[kMaxRank];
      with_rows(gd, e.idx.dim(0), shape);
      Tensor y = Tensor::empty(DType::f64, shape, gd.rank());
      const int64_t width = row_items(gd), stride = e.idx.stride(0);
      const int64_t* idx = e.idx.data<int64_t>();
      const double* sc = e.scale.data<double>();
      for (int64_t k = 0; k < e.idx.dim(0); ++k) {
        const double* src = gd.data<double>() + idx[k * stride] * width;
        double* dst = y.data<double>() + k * width;
        for (int64_t j = 0; j < width; ++j) dst[j] = src[j] * sc[idx[k * stride]];
      }
      out.push(0, y, states[i]);
    }
  }

  size_t held() const override { return cache_.size() + joins_.size(); }

 private:
  static const char* name() { return kMean ? "ScatterMean" : "ScatterSum"; }

  // 1 / max(np.bincount(idx, minlength=n), 1), float64.
  static Tensor row_scale(const Tensor& idx, int64_t n) {
    Tensor scale = Tensor::zeros(DType::f64, &n, 1);
    double* sc = scale.data<double>();
    for (int64_t k = 0; k < idx.dim(0); ++k) sc[idx.data<int64_t>()[k * idx.stride(0)]] += 1.0;
    for (int64_t r = 0; r < n; ++r) sc[r] = 1.0 / (sc[r] > 1.0 ? sc[r] : 1.0);
    return scale;
  }
  template <class T>
  static void scale_rows(Tensor& y, const double* sc, int64_t n, int64_t width) {
    T* d = y.data<T>();
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < width; ++j) d[r * width + j] = static_cast<T>(static_cast<double>(d[r * width + j]) * sc[r]);
  }

  Joins joins_;
  StateMap<Scattered> cache_;
};
using ScatterSumKernel = ScatterKernel<false>;
using ScatterMeanKernel = ScatterKernel<true>;
AMP_REGISTER_KERNEL("scatter_sum", ScatterSumKernel);
AMP_REGISTER_KERNEL("scatter_mean", ScatterMeanKernel);

// SumRows (sparse.SumRows) and MeanRows (sparse.MeanRows): the rows (N, ...) summed into one row
// (1, ...), numpy's way (`x.sum(axis=0, keepdims=True)`: row by row, or for a vector numpy's pairwise
// sum), MeanRows then divides by N in x's dtype (integers: float64). The input's shape is cached for
// training keys; backward broadcasts the gradient (divided by N for MeanRows) to that shape.
template <bool kMean>
class RowsReadoutKernel : public Kernel {
 public:
  explicit RowsReadoutKernel(const KernelSpec&) {}

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) {
      const Tensor x = xs[i].contiguous_copy();
      if (x.rank() == 0) throw OpError(std::string(name()) + " input 'in': expected rows (N, ...), got a scalar", 0);
      const int64_t n = x.dim(0);
      if (kMean && n == 0)
        throw OpError("MeanRows input 'in': expected at least one row, got 0 (the mean of nothing)", 0);
      int64_t shape[kMaxRank];
      with_rows(x, 1, shape);
      const bool to_float = kMean && n != 1 && x.dtype() == DType::i64;
      Tensor y = Tensor::empty(to_float ? DType::f64 : x.dtype(), shape, x.rank());
      numeric_dtype(x.dtype(), name(), [&](auto zero) {
        using T = decltype(zero);
        if (!to_float) return sum_rows<T>(x, y.data<T>(), kMean ? n : 1);
        Tensor total = Tensor::empty(x.dtype(), shape, x.rank());  // integers summed as integers, then divided
        sum_rows<T>(x, total.data<T>(), 1);
        for (int64_t j = 0, w = y.size(); j < w; ++j)
          y.data<double>()[j] = static_cast<double>(total.data<T>()[j]) / static_cast<double>(n);
      });
      if (ctx.train) {
        Shape& s = cache_.emplace(states[i]);
        s.rank = x.rank();
        for (int k = 0; k < x.rank(); ++k) s.dims[k] = x.dim(k);
      }
      out.push(0, y, states[i]);
    }
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      Shape s = take_entry(cache_, states[i], *ctx.layout);
      Tensor g = gs[i].contiguous_copy();
      const int64_t n = s.dims[0];
      int64_t width = 1;
      for (int k = 1; k < s.rank; ++k) width *= s.dims[k];
      if (g.size() != width && g.size() != 1)
        throw OpError(std::string(name()) + " output 'out': a gradient of shape " + shape_text(g) +
                      " does not broadcast to the input's shape " + shape_tuple(s.dims, s.rank));
      const int64_t divisor = kMean ? n : 1;
      const DType dtype = g.dtype() == DType::i64 && divisor != 1 ? DType::f64 : g.dtype();
      Tensor y = Tensor::empty(dtype, s.dims, s.rank);
      numeric_dtype(g.dtype(), name(), [&](auto zero) {
        using T = decltype(zero);
        if (dtype == DType::f64 && g.dtype() == DType::i64) spread<T, double>(g, y.data<double>(), n, width, divisor);
        else spread<T, T>(g, y.data<T>(), n, width, divisor);
      });
      out.push(0, y, states[i]);
    }
  }

  size_t held() const override { return cache_.size(); }

 private:
  struct Shape {
    int rank = 0;
    int64_t dims[kMaxRank] = {0, 0, 0, 0};
  };
  static const char* name() { return kMean ? "MeanRows" : "SumRows"; }

  // y = x.sum(axis=0) (then / divisor unless it is 1); `x` contiguous with rows.
  template <class T>
  static void sum_rows(const Tensor& x, T* y, int64_t divisor) {
    const T* d = x.data<T>();
    const int64_t n = x.dim(0), width = row_items(x);
    if (x.rank() == 1) {
      y[0] = numpy_sum<T>(d, n);
    } else {
      for (int64_t j = 0; j < width; ++j) y[j] = T(0);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < width; ++j) y[j] += d[r * width + j];
    }
    if (divisor != 1)
      for (int64_t j = 0; j < width; ++j) y[j] = y[j] / static_cast<T>(divisor);
  }
  template <class T, class Y>
  static void spread(const Tensor& g, Y* y, int64_t n, int64_t width, int64_t divisor) {
    const T* d = g.data<T>();
    const bool one = g.size() == 1;
    for (int64_t j = 0; j < width; ++j) {
      Y v = static_cast<Y>(d[one ? 0 : j]);
      if (divisor != 1) v = v / static_cast<Y>(divisor);
      for (int64_t r = 0; r < n; ++r) y[r * width + j] = v;
    }
  }

  StateMap<Shape> cache_;
};
using SumRowsKernel = RowsReadoutKernel<false>;
using MeanRowsKernel = RowsReadoutKernel<true>;
AMP_REGISTER_KERNEL("sum_rows", SumRowsKernel);
AMP_REGISTER_KERNEL("mean_rows", MeanRowsKernel);

}  // namespace
}  // namespace amp
