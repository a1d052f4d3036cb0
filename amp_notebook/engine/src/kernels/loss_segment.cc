// SegmentSoftmaxCrossEntropy, the native twin of ir/ops/loss.py's SegmentSoftmaxCrossEntropy: node
// selection over the graphs of one key, a softmax over each graph's own nodes.
// Never touches Python, the inbox or other nodes.
#include <cmath>

#include "kernels/rows.h"

namespace amp {

namespace {

// SegmentSoftmaxCrossEntropy (loss.SegmentSoftmaxCrossEntropy, "per_message"): scores (N, 1) or (N,), one
// per node of the key's disjoint union; segments (N,) the graph 0..K-1 of each node, each graph one run
// of rows in order; target (K,) each graph's answer row in the union. Checked in the Python op's order and
// words. With starts the first row of each graph (numpy's reduceat over segments):
//     top_k = max of graph k's scores, e_i = exp(s_i - top_seg(i)), total_k = e over graph k (the first
//     plus the pairwise sum of the rest, as np.add.reduceat), loss = mean_k(log(total_k) + top_k - s[t_k]),
//     grad_i = e_i / total_seg(i), grad[t_k] -= 1, grad /= K,
// all in the scores' dtype; correct counts the graphs whose first highest score is the target. Reports
// (key, loss, n = K, correct), caches the gradient (scores' shape) under the scores' state for a training
// key, pushes the loss on kLossPort. Ports: 0 "scores", 1 "segments", 2 "target".
class SegmentSoftmaxCrossEntropyKernel : public Kernel {
 public:
  explicit SegmentSoftmaxCrossEntropyKernel(const KernelSpec& spec) : joins_(spec) {}

  void forward(NodeCtx& ctx, int port, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) {
      JoinEntry got;
      if (!joins_.add(port, xs[i], states[i], 3, *ctx.layout, &got)) continue;
      const Tensor& scores = got.slot[0].x;
      const State& pred_state = got.slot[0].state;
      const int64_t k = check(scores, got.slot[1].x, got.slot[2].x);
      Tensor s = as_dtype(scores, scores.dtype() == DType::f32 ? DType::f32 : DType::f64).contiguous_copy();
      Tensor grad = Tensor::empty(s.dtype(), scores.shape(), scores.rank());
      double loss = 0.0;
      int64_t correct = 0;
      if (s.dtype() == DType::f64) evaluate<double>(s, got.slot[2].x, k, grad, &loss, &correct);
      else evaluate<float>(s, got.slot[2].x, k, grad, &loss, &correct);
      ctx.reports.push_back(Report{ctx.layout->key_of(pred_state), loss, k, correct});
      if (ctx.train) cache_.emplace(pred_state) = grad;
      out.push(kLossPort, Tensor::scalar(loss), pred_state);
    }
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      out.push(0, loss_gradient(cache_, states[i], gs[i], *ctx.layout), states[i]);
    }
  }

  size_t held() const override { return cache_.size() + joins_.size(); }

 private:
  // evaluate_segments' checks; fills starts_ (each graph's first row) and counts_; returns K.
  int64_t check(const Tensor& scores, const Tensor& segments, const Tensor& target) {
    static const std::string name = "SegmentSoftmaxCrossEntropy";
    if ((scores.rank() != 1 && scores.rank() != 2) || (scores.rank() == 2 && scores.dim(1) != 1))
      throw OpError(name + " input 'scores': expected shape (N, 1) or (N,), got " + shape_text(scores), 0);
    const int64_t n = scores.dim(0);
    const int64_t k = target.rank() ? target.dim(0) : -1;
    if (segments.rank() != 1 || segments.dim(0) != n || segments.dtype() != DType::i64)
      throw OpError(name + " input 'segments': expected " + std::to_string(n) +
                    " integer graph ids (one per score), got shape " + shape_text(segments) + " dtype " +
                    dtype_name(segments.dtype()), 1);
    if (target.rank() != 1 || target.dtype() != DType::i64 || k == 0)
      throw OpError(name + " input 'target': expected one integer row index per graph, got shape " +
                    shape_text(target) + " dtype " + dtype_name(target.dtype()), 2);
    const int64_t* seg = segments.data<int64_t>();
    const int64_t ss = segments.stride(0);
    bool ok = n > 0;
    counts_.assign(static_cast<size_t>(k), 0);
    for (int64_t r = 0; ok && r < n; ++r) {
      const int64_t v = seg[r * ss];
      ok = v >= 0 && v < k && (r == 0 || v >= seg[(r - 1) * ss]);
      if (ok) ++counts_[v];
    }
    for (int64_t g = 0; ok && g < k; ++g) ok = counts_[g] > 0;
    if (!ok)
      throw OpError(name + " input 'segments': expected graph ids 0.." + std::to_string(k - 1) +
                    " (one graph per target), each graph's nodes one run of rows in order; build the key with "
                    "data.graphs.ggsnn_bucket", 1);
    starts_.resize(static_cast<size_t>(k));
    for (int64_t g = 0, at = 0; g < k; at += counts_[g], ++g) starts_[g] = at;
    const int64_t* t = target.data<int64_t>();
    const int64_t ts = target.stride(0);
    for (int64_t g = 0; ok && g < k; ++g) ok = t[g * ts] >= 0 && t[g * ts] < n;
    for (int64_t g = 0; ok && g < k; ++g) ok = seg[t[g * ts] * ss] == g;
    if (!ok)
      throw OpError(name + " input 'target': each graph's target must be a row of that graph's own nodes, found " +
                    int_list(t, k, ts) + " for graphs of " + int_list(counts_.data(), k) + " nodes", 2);
    return k;
  }

  template <class T>
  void evaluate(const Tensor& scores, const Tensor& target, int64_t k, Tensor& grad, double* loss, int64_t* correct) {
    const T* s = scores.data<T>();
    T* e = grad.data<T>();
    const int64_t* t = target.data<int64_t>();
    const int64_t ts = target.stride(0);
    std::vector<T>& per = scratch<T>();  // per graph: top, total, then the loss terms
    per.resize(static_cast<size_t>(3 * k));
    T* top = per.data();
    T* total = top + k;
    T* terms = total + k;
    int64_t hits = 0;
    for (int64_t g = 0; g < k; ++g) {
      const int64_t a = starts_[g], b = a + counts_[g];
      T m = s[a];
      for (int64_t r = a + 1; r < b; ++r)
        if (!(m != m) && (s[r] > m || s[r] != s[r])) m = s[r];  // np.maximum: NaN wins
      top[g] = m;
      for (int64_t r = a; r < b; ++r) e[r] = std::exp(s[r] - m);
      total[g] = segment_sum<T>(e, a, b);
      terms[g] = (std::log(total[g]) + m) - s[t[g * ts]];
      int64_t first = -1;  // the first row with s == top (np.minimum.reduceat of np.where(s == top, rows, N))
      for (int64_t r = a; r < b && first < 0; ++r)
        if (s[r] == m) first = r;
      hits += first == t[g * ts];
    }
    *loss = static_cast<double>(static_cast<T>(static_cast<double>(numpy_sum<T>(terms, k)) / static_cast<double>(k)));
    for (int64_t g = 0; g < k; ++g)
      for (int64_t r = starts_[g], b = r + counts_[g]; r < b; ++r) e[r] = e[r] / total[g];
    for (int64_t g = 0; g < k; ++g) e[t[g * ts]] -= T(1);
    for (int64_t r = 0, n = grad.size(); r < n; ++r) e[r] = e[r] / static_cast<T>(k);
    *correct = hits;
  }
  template <class T>
  std::vector<T>& scratch() {
    if constexpr (sizeof(T) == 8) return scratch64_;
    else return scratch32_;
  }

  Joins joins_;
  StateMap<Tensor> cache_;
  std::vector<int64_t> counts_, starts_;
  std::vector<double> scratch64_;
  std::vector<float> scratch32_;
};
AMP_REGISTER_KERNEL("segment_softmax_cross_entropy", SegmentSoftmaxCrossEntropyKernel);

}  // namespace
}  // namespace amp
