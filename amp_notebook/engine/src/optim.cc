// See optim.h. Each loop is one numpy statement of optim.py, in the same order; T is the parameters' dtype.
#include "optim.h"

#include <cmath>

#include "blas.h"

namespace amp {

namespace {

template <class T>
void sgd(OptimizerState& opt, Tensor& p, Tensor& g, double scale) {
  T* pd = p.data<T>();
  T* gd = g.data<T>();
  const T factor = static_cast<T>(opt.lr.load(std::memory_order_relaxed) * scale);  // g *= lr * scale
  const int64_t n = p.size();
  for (int64_t i = 0; i < n; ++i) gd[i] *= factor;
  for (int64_t i = 0; i < n; ++i) pd[i] -= gd[i];  // p -= g
}

template <class T>
void momentum(OptimizerState& opt, Tensor& p, Tensor& g, Tensor& velocity, double scale) {
  T* pd = p.data<T>();
  T* gd = g.data<T>();
  T* vd = velocity.data<T>();
  const T mu = static_cast<T>(opt.momentum), s = static_cast<T>(scale);
  const T lr = static_cast<T>(opt.lr.load(std::memory_order_relaxed));
  const int64_t n = p.size();
  for (int64_t i = 0; i < n; ++i) vd[i] *= mu;        // v *= momentum
  for (int64_t i = 0; i < n; ++i) vd[i] += s * gd[i];  // v += scale * g
  for (int64_t i = 0; i < n; ++i) pd[i] -= lr * vd[i];  // p -= lr * v
}

template <class T>
void adam(OptimizerState& opt, Tensor& p, Tensor& g, Tensor& m, Tensor& v, Tensor& scratch, double scale) {
  T* pd = p.data<T>();
  T* gd = g.data<T>();
  T* md = m.data<T>();
  T* vd = v.data<T>();
  T* tmp = scratch.data<T>();
  const int64_t n = p.size();
  const T s = static_cast<T>(scale), b1 = static_cast<T>(opt.beta1), b2 = static_cast<T>(opt.beta2);
  const T one_b1 = static_cast<T>(1 - opt.beta1), one_b2 = static_cast<T>(1 - opt.beta2);
  for (int64_t i = 0; i < n; ++i) gd[i] *= s;                  // g *= scale
  for (int64_t i = 0; i < n; ++i) md[i] *= b1;                 // m *= beta1
  for (int64_t i = 0; i < n; ++i) tmp[i] = gd[i] * one_b1;     // np.multiply(g, 1 - beta1, out=tmp)
  for (int64_t i = 0; i < n; ++i) md[i] += tmp[i];             // m += tmp
  for (int64_t i = 0; i < n; ++i) vd[i] *= b2;                 // v *= beta2
  for (int64_t i = 0; i < n; ++i) gd[i] *= gd[i];              // g *= g
  for (int64_t i = 0; i < n; ++i) gd[i] *= one_b2;             // g *= 1 - beta2
  for (int64_t i = 0; i < n; ++i) vd[i] += gd[i];              // v += g
  const double t = static_cast<double>(opt.t);
  // lr = self.lr * np.sqrt(1 - beta2**t) / (1 - beta1**t): a numpy float64
  const double lr = opt.lr.load(std::memory_order_relaxed) * std::sqrt(1 - std::pow(opt.beta2, t)) /
                    (1 - std::pow(opt.beta1, t));
  const T eps = static_cast<T>(opt.eps);
  for (int64_t i = 0; i < n; ++i) gd[i] = std::sqrt(vd[i]);    // np.sqrt(v, out=g)
  for (int64_t i = 0; i < n; ++i) gd[i] += eps;                // g += eps
  for (int64_t i = 0; i < n; ++i)                              // np.multiply(m, lr, out=tmp): in float64
    tmp[i] = static_cast<T>(static_cast<double>(md[i]) * lr);
  for (int64_t i = 0; i < n; ++i) tmp[i] /= gd[i];             // tmp /= g
  for (int64_t i = 0; i < n; ++i) pd[i] -= tmp[i];             // p -= tmp
}

template <class T>
void apply(OptimizerState& opt, Tensor& p, Tensor& g, size_t i, double scale) {
  switch (opt.kind) {
    case OptimizerKind::kSgd: sgd<T>(opt, p, g, scale); break;
    case OptimizerKind::kMomentum: momentum<T>(opt, p, g, opt.velocity[i], scale); break;
    case OptimizerKind::kAdam: adam<T>(opt, p, g, opt.m[i], opt.v[i], opt.scratch[i], scale); break;
  }
}

template <class T>
bool finite(const Tensor& g) {
  const T* d = g.data<T>();
  for (int64_t i = 0, n = g.size(); i < n; ++i)
    if (!std::isfinite(d[i])) return false;
  return true;
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
