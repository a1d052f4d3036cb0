// Normalization kernels, the native twins of ir/ops/norm.py: LayerNorm. The ints of a spec: [width, eps as
// the bits of a float64].
//
// LayerNorm (norm.LayerNorm), per row x of width W (every leading index of the payload):
//
//   mean = sum(x) / W;  var = sum((x - mean)^2) / W;  inv = 1 / sqrt(var + eps);  xhat = (x - mean) * inv
//   y = xhat * g + b
//
// and backward, with d = dy * g:
//
//   dx = inv * ((d - sum(d) / W) - xhat * (sum(d * xhat) / W));   dg += sum over rows of dy * xhat;   db += sum of dy
//
// as numpy computes them: each row sum is numpy's pairwise sum (vecmath.h), the sums over rows run row
// after row from 0 (np.sum(axis=0)), float32 rows stay float32 (eps rounded to float32 first, as numpy
// treats a Python float), and the affine step is in the dtype of x and the parameters together. A bundle is
// one pass over the messages' rows in place (no stacking copy); its parameter gradients are summed over
// all its rows before they reach the accumulators, as the Python op's stacked call does. Forward keeps
// [xhat | inv] per row (one array per bundle) for backward.
// Never touches Python, the inbox or other nodes.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/vecmath.h"

namespace amp {

namespace {

using simd::load;
using simd::store;

template <class T>
using Vec = typename simd::Lanes<T>::V;

template <class T>
constexpr DType dtype_of() {
  return sizeof(T) == 8 ? DType::f64 : DType::f32;
}

// Normalize `rows` contiguous rows of x (width W) into save = [xhat | inv] per row and, when g and b are
// given (of x's dtype), y = xhat * g + b. `tmp` holds 2 W items: x - mean and its square.
template <class T>
AMP_SIMD_CLONES void normalize_rows(const T* x, int64_t rows, int64_t W, T eps, const T* g, const T* b, T* y, T* save,
                                    T* tmp) {
  T* centered = tmp;
  T* squares = tmp + W;
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * W;
    T* xh = save + r * (W + 1);
    const T mean = simd::pairwise_sum(xr, W) / T(W);
    simd::blocks_over<T>(W, AMP_LANES {
      const Vec<T> c = load(xr + j, m) - mean;
      store(centered + j, c, m);
      store(squares + j, c * c, m);
    });
    const T inv = T(1) / std::sqrt(simd::pairwise_sum(squares, W) / T(W) + eps);
    if (g) {
      T* yr = y + r * W;
      simd::blocks_over<T>(W, AMP_LANES {
        const Vec<T> h = load(centered + j, m) * inv;
        store(xh + j, h, m);
        store(yr + j, h * load(g + j, m) + load(b + j, m), m);
      });
    } else {
      simd::blocks_over<T>(W, AMP_LANES { store(xh + j, load(centered + j, m) * inv, m); });
    }
    xh[W] = inv;
  }
}

// Backward over `rows` rows: dg and db (W each, running sums) gain dy * xhat and dy row after row; when
// dx is given, dx = inv * ((d - mean(d)) - xhat * mean(d * xhat)) with d = dy * g. `tmp` holds 2 W items.
template <class T>
AMP_SIMD_CLONES void grad_rows(const T* dy, const T* saved, int64_t rows, int64_t W, const T* g, T* dg, T* db, T* dx,
                               T* tmp) {
  T* d = tmp;
  T* dxh = tmp + W;
  for (int64_t r = 0; r < rows; ++r) {
    const T* gr = dy + r * W;
    const T* xh = saved + r * (W + 1);
    simd::blocks<T>(W, AMP_LANES {
      const Vec<T> gv = load(gr + j, m), h = load(xh + j, m);
      store(dg + j, load(dg + j, m) + gv * h, m);
      store(db + j, load(db + j, m) + gv, m);
      const Vec<T> dv = gv * load(g + j, m);
      store(d + j, dv, m);
      store(dxh + j, dv * h, m);
    });
    if (!dx) continue;
    const T inv = xh[W];
    const T mean_d = simd::pairwise_sum(d, W) / T(W);
    const T mean_dxh = simd::pairwise_sum(dxh, W) / T(W);
    T* out = dx + r * W;
    simd::blocks_over<T>(W, AMP_LANES {
      store(out + j, inv * ((load(d + j, m) - mean_d) - load(xh + j, m) * mean_dxh), m);
    });
  }
}

// `x` contiguous in `dtype`: itself when it already is, else a copy made into `copy`.
const Tensor& dense(const Tensor& x, DType dtype, Tensor* copy) {
  if (x.dtype() == dtype && x.contiguous()) return x;
  *copy = as_dtype(x, dtype).contiguous_copy();
  return *copy;
}

std::string shape_text(const int64_t* shape, int rank) {
  std::string out = "(";
  for (int i = 0; i < rank; ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (rank == 1 ? ",)" : ")");
}

// The shape the payloads of a bundle stack to (ir/ops/base.py stack: one payload as it is, several
// concatenated along axis 0, which needs one rank and one trailing shape).
int stacked_shape(Span<const Tensor> xs, int64_t* shape) {
  const Tensor& first = xs[0];
  const int rank = first.rank();
  for (int k = 0; k < rank; ++k) shape[k] = first.dim(k);
  for (size_t i = 1; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    bool same = rank > 0 && x.rank() == rank;
    for (int k = 1; same && k < rank; ++k) same = x.dim(k) == first.dim(k);
    if (!same)
      throw OpError("LayerNorm: the payloads of one bundle have shapes " + amp::shape_text(first) + " and " +
                    amp::shape_text(x) + ", which do not stack along their first axis", 0);
    shape[0] += x.dim(0);
  }
  return rank;
}

class LayerNormKernel : public Kernel {
 public:
  explicit LayerNormKernel(const KernelSpec& spec) {
    if (spec.ints.size() != 2 || spec.ints[0] < 1) throw SpecError("LayerNorm takes ints [width >= 1, eps bits]");
    if (spec.n_params != 2) throw SpecError("a LayerNorm has g and b");
    W_ = spec.ints[0];
    std::memcpy(&eps_, &spec.ints[1], sizeof eps_);
  }

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    int64_t shape[kMaxRank];
    const int rank = stacked_shape(xs, shape);
    if (rank < 1 || shape[rank - 1] != W_)
      throw OpError("LayerNorm input 'in': expected a last axis of width " + std::to_string(W_) + ", got shape " +
                    shape_text(shape, rank), 0);
    bool f32 = true;
    for (const Tensor& x : xs) f32 = f32 && x.dtype() == DType::f32;
    if (f32) forward_as<float>(ctx, xs, states, shape, rank, out);
    else forward_as<double>(ctx, xs, states, shape, rank, out);
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    taken_.clear();
    for (const State& s : states) taken_.push_back(take_cached(cache_, s, *ctx.layout));
    bool f32 = ctx.params[0].dtype() == DType::f32 && ctx.params[1].dtype() == DType::f32;
    for (size_t i = 0; i < gs.size(); ++i) {
      const Tensor& g = gs[i];
      const int64_t rows = taken_[i].dim(0);
      if (g.rank() < 1 || g.dim(g.rank() - 1) != W_ || g.size() != rows * W_)
        throw OpError("LayerNorm: a gradient of shape " + amp::shape_text(g) + " for an output of " +
                      std::to_string(rows) + " rows of width " + std::to_string(W_));
      f32 = f32 && g.dtype() == DType::f32 && taken_[i].dtype() == DType::f32;
    }
    if (f32) backward_as<float>(ctx, gs, states, out);
    else backward_as<double>(ctx, gs, states, out);
    taken_.clear();
  }

  size_t held() const override { return cache_.size(); }

 private:
  template <class T>
  T* scratch(size_t n) {
    if (scratch_.size() < n) scratch_.resize(n);
    return reinterpret_cast<T*>(scratch_.data());
  }

  // X: the dtype of x (the normalization's); the output's is X and the parameters' together.
  template <class X>
  void forward_as(NodeCtx& ctx, Span<const Tensor> xs, Span<const State> states, const int64_t* shape, int rank,
                  Outputs& out) {
    constexpr DType dx = dtype_of<X>();
    const DType dp = promote(ctx.params[0].dtype(), ctx.params[1].dtype());
    const bool same = promote(dx, dp) == dx;  // the affine step in X (else float32 x, float64 parameters)
    int64_t rows = 1;
    for (int k = 0; k < rank - 1; ++k) rows *= shape[k];
    Tensor y = Tensor::empty(promote(dx, dp), shape, rank);
    int64_t most = 0;  // the most rows of one message: not training, they are saved into scratch, reused
    for (const Tensor& x : xs) most = x.size() / W_ > most ? x.size() / W_ : most;
    X* tmp = scratch<X>(static_cast<size_t>(2 * W_ + (ctx.train ? 0 : most * (W_ + 1))));
    Tensor saved = ctx.train ? Tensor::empty(dx, {rows, W_ + 1}) : Tensor();
    Tensor copies[3];
    const Tensor& g = dense(ctx.params[0], same ? dx : DType::f64, &copies[0]);
    const Tensor& b = dense(ctx.params[1], same ? dx : DType::f64, &copies[1]);
    int64_t at = 0, at0 = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const Tensor& x = dense(xs[i], dx, &copies[2]);
      const int64_t n = x.size() / W_;
      X* sv = ctx.train ? saved.data<X>() + at * (W_ + 1) : tmp + 2 * W_;
      normalize_rows<X>(x.data<X>(), n, W_, static_cast<X>(eps_), same ? g.data<X>() : nullptr,
                        same ? b.data<X>() : nullptr, same ? y.data<X>() + at * W_ : nullptr, sv, tmp);
      if (!same) {  // numpy: xhat (float32) * g (float64) + b, in float64
        double* yr = y.data<double>() + at * W_;
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < W_; ++j)
            yr[r * W_ + j] = static_cast<double>(sv[r * (W_ + 1) + j]) * g.data<double>()[j] + b.data<double>()[j];
      }
      const int64_t n0 = xs[i].dim(0);
      if (ctx.train) cache_.emplace(states[i]) = saved.rows(at, at + n);
      out.push(0, xs.size() == 1 ? y : y.rows(at0, at0 + n0), states[i]);
      at += n;
      at0 += n0;
    }
  }

  // T: the dtype of the whole backward (float32 only if the gradients, the saved rows and the parameters are).
  template <class T>
  void backward_as(NodeCtx& ctx, Span<const Tensor> gs, Span<const State> states, Outputs& out) {
    constexpr DType dt = dtype_of<T>();
    const bool wants = ctx.wants_grad(0);
    T* sums = scratch<T>(static_cast<size_t>(4 * W_));  // dg, db, then the per-row temporaries
    std::memset(sums, 0, static_cast<size_t>(2 * W_) * sizeof(T));
    Tensor copies[3];
    const Tensor& g = dense(ctx.params[0], dt, &copies[0]);
    Tensor dx;
    if (wants) {
      int64_t shape[kMaxRank];
      const int rank = stacked_shape(gs, shape);
      dx = Tensor::empty(dt, shape, rank);
    }
    int64_t at = 0, at0 = 0;
    for (size_t i = 0; i < gs.size(); ++i) {
      const Tensor& dy = dense(gs[i], dt, &copies[1]);
      const Tensor& saved = dense(taken_[i], dt, &copies[2]);
      const int64_t n = saved.dim(0);
      grad_rows<T>(dy.data<T>(), saved.data<T>(), n, W_, g.data<T>(), sums, sums + W_,
                   wants ? dx.data<T>() + at * W_ : nullptr, sums + 2 * W_);
      if (wants) {
        const int64_t n0 = gs[i].dim(0);
        out.push(0, gs.size() == 1 ? dx : dx.rows(at0, at0 + n0), states[i]);
        at0 += n0;
      }
      at += n;
    }
    for (int k = 0; k < 2; ++k) accumulate(ctx, k, sums + k * W_);
  }

  // NodeContext.accumulate: the first gradient after an update is stored, later ones added.
  template <class T>
  void accumulate(NodeCtx& ctx, int which, const T* value) {
    Tensor& acc = ctx.grads[which];
    if (acc.dtype() == DType::f64) add_to<double>(ctx, acc, value);
    else add_to<float>(ctx, acc, value);
  }
  template <class A, class T>
  void add_to(NodeCtx& ctx, Tensor& acc, const T* value) {  // in float64, then rounded: numpy's `acc += value`
    A* a = acc.data<A>();
    const int64_t s = acc.stride(0);
    for (int64_t j = 0; j < W_; ++j)
      a[j * s] = static_cast<A>(ctx.n_grads == 0 ? static_cast<double>(value[j])
                                                 : static_cast<double>(a[j * s]) + static_cast<double>(value[j]));
  }

  int64_t W_ = 0;
  double eps_ = 0.0;
  StateMap<Tensor> cache_;
  std::vector<Tensor> taken_;
  std::vector<double> scratch_;  // row temporaries (and a forward's saved rows when it does not train)
};

AMP_REGISTER_KERNEL("layer_norm", LayerNormKernel);

}  // namespace
}  // namespace amp
