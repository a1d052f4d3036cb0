// See optim.h. T is the parameters' dtype.
#include "optim.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "blas.h"
#include "kernels/vecmath.h"

namespace amp {

namespace {

// Each update is one pass over the elements: per element, the numpy statements of optim.py in their order,
// each result rounded to T where numpy stores it, so the values are those of the statement-by-statement
// loops (one pass instead of one per statement keeps the arrays in cache and lets the loop vectorize; no
// reduction is involved, so no order of summation changes). The accumulators end as numpy leaves them.
// Each loop is compiled once per instruction set (vecmath.h AMP_SIMD_CLONES): every operation is an IEEE
// one lane by lane (a square root and a division included, no fused multiply-add), so the wider vectors
// give the same bits in fewer instructions; Adam's division and square root dominate its loop.

template <class T>
AMP_SIMD_CLONES void sgd_pass(T* pd, T* gd, int64_t n, T factor) {
  for (int64_t i = 0; i < n; ++i) {
    const T step = gd[i] * factor;  // g *= lr * scale
    pd[i] -= step;                  // p -= g
    gd[i] = step;
  }
}

template <class T>
void sgd(OptimizerState& opt, Tensor& p, Tensor& g, double scale) {
  const T factor = static_cast<T>(opt.lr.load(std::memory_order_relaxed) * scale);
  sgd_pass<T>(p.data<T>(), g.data<T>(), p.size(), factor);
}

template <class T>
AMP_SIMD_CLONES void momentum_pass(T* pd, const T* gd, T* vd, int64_t n, T mu, T s, T lr) {
  for (int64_t i = 0; i < n; ++i) {
    T v = vd[i] * mu;  // v *= momentum
    v += s * gd[i];    // v += scale * g
    pd[i] -= lr * v;   // p -= lr * v
    vd[i] = v;
  }
}

template <class T>
void momentum(OptimizerState& opt, Tensor& p, Tensor& g, Tensor& velocity, double scale) {
  momentum_pass<T>(p.data<T>(), g.data<T>(), velocity.data<T>(), p.size(), static_cast<T>(opt.momentum),
                   static_cast<T>(scale), static_cast<T>(opt.lr.load(std::memory_order_relaxed)));
}

template <class T>
struct AdamArgs {
  T *p, *g, *m, *v, *tmp;
  int64_t n;
  T s, b1, b2, one_b1, one_b2, eps;
  double lr;
};

template <class T>
AMP_SIMD_CLONES void adam_pass(const AdamArgs<T>& a) {
  T* const __restrict pd = a.p;
  T* const __restrict gd = a.g;
  T* const __restrict md = a.m;
  T* const __restrict vd = a.v;
  T* const __restrict tmp = a.tmp;
  const T s = a.s, b1 = a.b1, b2 = a.b2, one_b1 = a.one_b1, one_b2 = a.one_b2, eps = a.eps;
  const double lr = a.lr;
  for (int64_t i = 0, n = a.n; i < n; ++i) {
    const T gi = gd[i] * s;                                   // g *= scale
    T mi = md[i] * b1;                                        // m *= beta1
    mi += gi * one_b1;                                        // np.multiply(g, 1 - beta1, out=tmp); m += tmp
    T vi = vd[i] * b2;                                        // v *= beta2
    T g2 = gi * gi;                                           // g *= g
    g2 *= one_b2;                                             // g *= 1 - beta2
    vi += g2;                                                 // v += g
    T den = std::sqrt(vi);                                    // np.sqrt(v, out=g)
    den += eps;                                               // g += eps
    T step = static_cast<T>(static_cast<double>(mi) * lr);    // np.multiply(m, lr, out=tmp): in float64
    step /= den;                                              // tmp /= g
    pd[i] -= step;                                            // p -= tmp
    md[i] = mi;
    vd[i] = vi;
    gd[i] = den;
    tmp[i] = step;
  }
}

template <class T>
void adam(OptimizerState& opt, Tensor& p, Tensor& g, Tensor& m, Tensor& v, Tensor& scratch, double scale) {
  const double t = static_cast<double>(opt.t);
  AdamArgs<T> a;
  a.p = p.data<T>();
  a.g = g.data<T>();
  a.m = m.data<T>();
  a.v = v.data<T>();
  a.tmp = scratch.data<T>();
  a.n = p.size();
  a.s = static_cast<T>(scale);
  a.b1 = static_cast<T>(opt.beta1);
  a.b2 = static_cast<T>(opt.beta2);
  a.one_b1 = static_cast<T>(1 - opt.beta1);
  a.one_b2 = static_cast<T>(1 - opt.beta2);
  a.eps = static_cast<T>(opt.eps);
  // lr = self.lr * np.sqrt(1 - beta2**t) / (1 - beta1**t): a numpy float64
  a.lr = opt.lr.load(std::memory_order_relaxed) * std::sqrt(1 - std::pow(opt.beta2, t)) / (1 - std::pow(opt.beta1, t));
  adam_pass<T>(a);
}

template <class T>
void apply(OptimizerState& opt, Tensor& p, Tensor& g, size_t i, double scale) {
  switch (opt.kind) {
    case OptimizerKind::kSgd: sgd<T>(opt, p, g, scale); break;
    case OptimizerKind::kMomentum: momentum<T>(opt, p, g, opt.velocity[i], scale); break;
    case OptimizerKind::kAdam: adam<T>(opt, p, g, opt.m[i], opt.v[i], opt.scratch[i], scale); break;
  }
}

// Whether every element is finite: |x| <= the largest finite value is false for NaN and infinities. The
// test is and-ed over blocks without a branch per element, so the loop vectorizes; a block's end decides.
template <class T>
AMP_SIMD_CLONES bool finite_pass(const T* d, int64_t n) {
  const T largest = std::numeric_limits<T>::max();
  constexpr int64_t kBlock = 1024;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    int ok = 1;
    for (int64_t i = start; i < end; ++i) ok &= static_cast<int>(std::fabs(d[i]) <= largest);
    if (!ok) return false;
  }
  return true;
}

template <class T>
bool finite(const Tensor& g) {
  return finite_pass<T>(g.data<T>(), g.size());
}

}  // namespace

void optimizer_step(OptimizerState& opt, std::vector<Tensor>& params, std::vector<Tensor>& grads, double scale) {
  if (opt.kind == OptimizerKind::kAdam) opt.t += 1;  // state["t"] = state.get("t", 0) + 1, before the clip
  if (opt.clip_norm > 0) {
    double sum = 0.0;  // Python's sum(float(np.vdot(g, g)) for g in grads.values())
    for (int i : opt.norm_order) sum += vdot_self(grads[static_cast<size_t>(i)]);
    const double norm = scale * std::sqrt(sum);
    if (norm > opt.clip_norm) scale *= opt.clip_norm / norm;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].dtype() == DType::f64) apply<double>(opt, params[i], grads[i], i, scale);
    else apply<float>(opt, params[i], grads[i], i, scale);
  }
}

bool all_finite(const std::vector<Tensor>& grads) {
  for (const Tensor& g : grads)
    if (!(g.dtype() == DType::f64 ? finite<double>(g) : finite<float>(g))) return false;
  return true;
}

}  // namespace amp
