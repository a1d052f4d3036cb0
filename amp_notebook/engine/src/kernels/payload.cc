// Payload kernels, the native twins of ir/ops/payload.py: Input, Identity, Linear, Embedding, Discard
// (the elementwise ones are in elementwise.cc). Each names the
// Python op it equals; the math is the Python op's, step by step, so float64 results agree to rounding
// (matrix products bit for bit: blas.h calls numpy's BLAS as numpy does).
// Never touches Python, the inbox or other nodes.
#include <cmath>
#include <cstring>

#include "blas.h"
#include "kernels/deferred_grad.h"
#include "kernels/kernel.h"

namespace amp {

namespace {

// Input (payload.Input): forward passes the injected payload on; gradients stop here.
class InputKernel : public Kernel {
 public:
  explicit InputKernel(const KernelSpec&) {}
  void forward(NodeCtx&, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) out.push(0, xs[i], states[i]);
  }
  void backward(NodeCtx&, int, Span<const Tensor>, Span<const State>, Outputs&) override {}
};
AMP_REGISTER_KERNEL("input", InputKernel);

// Identity (payload.Identity): the payload passes through both ways.
class IdentityKernel : public Kernel {
 public:
  explicit IdentityKernel(const KernelSpec&) {}
  void forward(NodeCtx&, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) out.push(0, xs[i], states[i]);
  }
  void backward(NodeCtx&, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) out.push(0, gs[i], states[i]);
  }
};
AMP_REGISTER_KERNEL("identity", IdentityKernel);

// y += b, broadcast over rows (numpy's `y += b`). A contiguous bias row (the usual case) takes a loop over
// plain vector loads; any other stride a gather. Each element gets its one addition either way.
template <class T>
void add_row_vector(Tensor& y, const Tensor& b) {
  T* yd = y.data<T>();
  const int64_t rows = y.dim(0), cols = y.dim(1), bs = b.stride(0);
  const T* bd = b.data<T>();
  if (bs == 1) {
    for (int64_t i = 0; i < rows; ++i) {
      T* __restrict row = yd + i * cols;
      const T* __restrict bias = bd;
      for (int64_t j = 0; j < cols; ++j) row[j] += bias[j];
    }
    return;
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) yd[i * cols + j] += bd[j * bs];
}

// out = np.sum(g, axis=0): row after row, so each column adds its values in numpy's order. Rows of
// contiguous columns (the usual case) take plain vector loads; any other layout a gather.
template <class T>
void sum_rows_into(const Tensor& g, T* out) {
  const int64_t rows = g.dim(0), cols = g.dim(1), s0 = g.stride(0), s1 = g.stride(1);
  const T* gd = g.data<T>();
  if (s1 == 1) {
    T* __restrict acc = out;
    if (rows == 0) {
      for (int64_t j = 0; j < cols; ++j) acc[j] = T(0);
      return;
    }
    for (int64_t j = 0; j < cols; ++j) acc[j] = gd[j];
    for (int64_t i = 1; i < rows; ++i) {
      const T* __restrict row = gd + i * s0;
      for (int64_t j = 0; j < cols; ++j) acc[j] += row[j];
    }
    return;
  }
  for (int64_t j = 0; j < cols; ++j) out[j] = rows ? gd[j * s1] : T(0);
  for (int64_t i = 1; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j] += gd[i * s0 + j * s1];
}

template <class T>
void add_into(T* dst, const Tensor& src) {
  const T* s = src.data<T>();
  for (int64_t i = 0, n = src.size(); i < n; ++i) dst[i] += s[i];
}

// Linear (payload.Linear): y = x @ W + b over the stacked rows of the bundle; backward accumulates
// dW = x^T g and db = sum of g's rows (written in place into the first gradient after an update, added
// afterwards; dW of a bundle of a few rows is held back and added at settle: deferred_grad.h), and sends
// dx = g @ W^T when the input wants it. ints: [has_bias].
class LinearKernel : public Kernel {
 public:
  explicit LinearKernel(const KernelSpec& spec) : bias_(!spec.ints.empty() && spec.ints[0] != 0) {
    if (spec.n_params != (bias_ ? 2 : 1)) throw SpecError("a Linear has W (and b with a bias)");
  }

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    std::vector<int64_t> offsets(xs.size() + 1);
    const Tensor& W = ctx.params[0];
    Tensor stacked = stack_rows(xs, offsets.data());
    if (stacked.rank() != 2 || stacked.dim(1) != W.dim(0))
      throw OpError("Linear input 'in': expected shape (batch, " + std::to_string(W.dim(0)) + "), got " +
                        shape_text(xs[0]), 0);
    DType dtype = promote(stacked.dtype(), W.dtype());
    Tensor x = as_dtype(stacked, dtype);
    Tensor w = as_dtype(W, dtype);
    Tensor y = Tensor::empty(dtype, {x.dim(0), w.dim(1)});
    matmul(x, w, y);
    if (bias_) {
      Tensor b = as_dtype(ctx.params[1], dtype);
      if (dtype == DType::f64) add_row_vector<double>(y, b);
      else add_row_vector<float>(y, b);
    }
    if (ctx.train)
      for (size_t i = 0; i < xs.size(); ++i) cache_.emplace(states[i]) = xs[i];
    for (size_t i = 0; i < xs.size(); ++i) out.push(0, y.rows(offsets[i], offsets[i + 1]), states[i]);
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    std::vector<Tensor> cached;
    cached.reserve(states.size());
    for (const State& s : states) cached.push_back(take_cached(cache_, s, *ctx.layout));
    std::vector<int64_t> offsets(gs.size() + 1);
    Tensor x = stack_rows(Span<const Tensor>(cached.data(), cached.size()), offsets.data());
    Tensor g = stack_rows(gs, offsets.data());
    if (g.rank() != 2 || g.dim(0) != x.dim(0) || g.dim(1) != ctx.params[0].dim(1))
      throw OpError("Linear output 'out': expected a gradient of shape (" + std::to_string(x.dim(0)) + ", " +
                    std::to_string(ctx.params[0].dim(1)) + "), got " + shape_text(gs[0]));
    Tensor& gW = ctx.grads[0];
    if (DeferredGradient::fits(gW, x, g)) {
      deferred_.add(gW, x, g, ctx.n_grads == 0);  // grads["W"] waits for settle (deferred_grad.h)
      if (bias_) add_bias_gradient(ctx, g);
    } else {
      deferred_.settle(gW);
      if (ctx.n_grads == 0 && x.dtype() == g.dtype() && g.dtype() == gW.dtype()) {
        matmul(transposed(x), g, gW);  // np.matmul(x.T, g, out=grads["W"])
        if (bias_) add_bias_gradient(ctx, g);
      } else {
        accumulate(ctx, x, g);
      }
    }
    if (!ctx.wants_grad(0)) return;
    const Tensor& W = ctx.params[0];
    DType dtype = promote(g.dtype(), W.dtype());
    Tensor gd = as_dtype(g, dtype);
    Tensor dx = Tensor::empty(dtype, {gd.dim(0), W.dim(0)});
    matmul(gd, transposed(as_dtype(W, dtype)), dx);
    for (size_t i = 0; i < gs.size(); ++i) out.push(0, dx.rows(offsets[i], offsets[i + 1]), states[i]);
  }

  size_t held() const override { return cache_.size(); }
  void settle(NodeCtx& ctx) override { deferred_.settle(ctx.grads[0]); }

 private:
  // NodeContext.accumulate("W", x.T @ g) and ("b", g.sum(axis=0)) for rows that do not wait (a large bundle,
  // mixed dtypes): the product in numpy's result dtype, then stored (first gradient) or added.
  void accumulate(NodeCtx& ctx, const Tensor& x, const Tensor& g) {
    DType dtype = promote(x.dtype(), g.dtype());
    Tensor xt = as_dtype(x, dtype);
    Tensor gt = as_dtype(g, dtype);
    Tensor dW = Tensor::empty(dtype, {xt.dim(1), gt.dim(1)});
    matmul(transposed(xt), gt, dW);
    store(ctx, 0, dW);
    if (bias_) add_bias_gradient(ctx, gt);
  }
  // grads["b"]: g's rows summed, written in place as the first gradient after an update (when the dtypes
  // agree: np.sum(g, axis=0, out=grads["b"])), else summed in g's dtype and stored or added.
  void add_bias_gradient(NodeCtx& ctx, const Tensor& g) {
    Tensor& acc = ctx.grads[1];
    if (ctx.n_grads == 0 && g.dtype() == acc.dtype()) {
      if (g.dtype() == DType::f64) sum_rows_into<double>(g, acc.data<double>());
      else sum_rows_into<float>(g, acc.data<float>());
      return;
    }
    Tensor db = Tensor::empty(g.dtype(), {g.dim(1)});
    if (g.dtype() == DType::f64) sum_rows_into<double>(g, db.data<double>());
    else sum_rows_into<float>(g, db.data<float>());
    store(ctx, 1, db);
  }

  static void store(NodeCtx& ctx, int which, const Tensor& value) {
    Tensor& acc = ctx.grads[which];
    Tensor v = as_dtype(value, acc.dtype());
    if (ctx.n_grads == 0) {
      std::memcpy(acc.raw(), v.raw(), static_cast<size_t>(v.size()) * itemsize(v.dtype()));
    } else if (acc.dtype() == DType::f64) {
      add_into<double>(acc.data<double>(), v);
    } else {
      add_into<float>(acc.data<float>(), v);
    }
  }

  bool bias_;
  StateMap<Tensor> cache_;
  DeferredGradient deferred_;
};
AMP_REGISTER_KERNEL("linear", LinearKernel);

// Embedding (payload.Embedding): rows of the table E looked up by integer ids (any shape of ids: the
// output is ids.shape + (dim,)); the ids of each message are cached for training keys; backward adds
// each gradient row into the accumulator row of its id, in order (np.add.at), after zeroing it for the
// first gradient since an update. The ids get no gradient.
class EmbeddingKernel : public Kernel {
 public:
  explicit EmbeddingKernel(const KernelSpec& spec) {
    if (spec.n_params != 1) throw SpecError("an Embedding has one table E");
  }

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    const Tensor& E = ctx.params[0];
    for (const Tensor& x : xs) check_ids(x, E.dim(0));
    std::vector<int64_t> offsets(xs.size() + 1);
    Tensor ids = stack_rows(xs, offsets.data()).contiguous_copy();
    int64_t shape[kMaxRank];
    if (ids.rank() + 1 > kMaxRank) throw OpError("Embedding input 'in': ids of at most 3 axes", 0);
    for (int k = 0; k < ids.rank(); ++k) shape[k] = ids.dim(k);
    const int64_t dim = E.dim(1);
    shape[ids.rank()] = dim;
    Tensor y = Tensor::empty(E.dtype(), shape, ids.rank() + 1);
    const size_t row_bytes = static_cast<size_t>(dim) * itemsize(E.dtype());
    const int64_t* id = ids.data<int64_t>();
    for (int64_t i = 0, n = ids.size(); i < n; ++i)
      std::memcpy(y.data<char>() + i * row_bytes, E.data<char>() + id[i] * row_bytes, row_bytes);
    for (size_t i = 0; i < xs.size(); ++i) {
      if (ctx.train) cache_.emplace(states[i]) = ids.rows(offsets[i], offsets[i + 1]);
      out.push(0, y.rows(offsets[i], offsets[i + 1]), states[i]);
    }
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs&) override {
    std::vector<Tensor> cached;
    for (const State& s : states) cached.push_back(take_cached(cache_, s, *ctx.layout));
    std::vector<int64_t> offsets(gs.size() + 1);
    Tensor ids = stack_rows(Span<const Tensor>(cached.data(), cached.size()), offsets.data()).contiguous_copy();
    Tensor& acc = ctx.grads[0];
    Tensor g = as_dtype(stack_rows(gs, offsets.data()), acc.dtype()).contiguous_copy();
    const int64_t dim = acc.dim(1);
    if (g.size() != ids.size() * dim)
      throw OpError("Embedding output 'out': expected a gradient of " + std::to_string(ids.size()) + " rows of " +
                    std::to_string(dim) + ", got shape " + shape_text(gs[0]));
    if (ctx.n_grads == 0) std::memset(acc.raw(), 0, static_cast<size_t>(acc.size()) * itemsize(acc.dtype()));
    if (acc.dtype() == DType::f64) scatter_add<double>(ids, g, acc, dim);
    else scatter_add<float>(ids, g, acc, dim);
  }

  size_t held() const override { return cache_.size(); }

 private:
  static void check_ids(const Tensor& x, int64_t rows) {
    if (x.dtype() != DType::i64)
      throw OpError(std::string("Embedding input 'in': expected integer ids, got dtype ") + dtype_name(x.dtype()), 0);
    int64_t lo = 0, hi = 0;
    for (int64_t i = 0, n = x.size(); i < n; ++i) {
      int64_t v = static_cast<int64_t>(x.at(i));
      if (i == 0 || v < lo) lo = v;
      if (i == 0 || v > hi) hi = v;
    }
    if (x.size() && (lo < 0 || hi >= rows))
      throw OpError("Embedding input 'in': ids must lie in [0, " + std::to_string(rows) + "), found [" +
                        std::to_string(lo) + ", " + std::to_string(hi) + "]; raise num_embeddings or fix the token ids",
                    0);
  }
  template <class T>
  static void scatter_add(const Tensor& ids, const Tensor& g, Tensor& acc, int64_t dim) {
    const int64_t* id = ids.data<int64_t>();
    const T* gd = g.data<T>();
    T* a = acc.data<T>();
    for (int64_t i = 0, n = ids.size(); i < n; ++i)
      for (int64_t j = 0; j < dim; ++j) a[id[i] * dim + j] += gd[i * dim + j];
  }
  StateMap<Tensor> cache_;
};
AMP_REGISTER_KERNEL("embedding", EmbeddingKernel);

// Discard (payload.Discard): consumes a message and sends nothing on, not even a gradient.
class DiscardKernel : public Kernel {
 public:
  explicit DiscardKernel(const KernelSpec&) {}
  void forward(NodeCtx&, int, Span<const Tensor>, Span<const State>, Outputs&) override {}
  void backward(NodeCtx&, int, Span<const Tensor>, Span<const State>, Outputs&) override {}
};
AMP_REGISTER_KERNEL("discard", DiscardKernel);

}  // namespace
}  // namespace amp
