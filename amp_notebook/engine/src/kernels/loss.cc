// Loss kernels, the native twins of ir/ops/loss.py: SoftmaxCrossEntropy, MSE and Sink
// (SegmentSoftmaxCrossEntropy is in loss_segment.cc). A loss joins each prediction
// with its key's target, reports the loss, caches the gradient of the mean loss for training keys, and
// pushes the loss value on kLossPort so the worker starts the backward pass.
// Never touches Python, the inbox or other nodes.
#include <cmath>

#include "kernels/rows.h"

namespace amp {

namespace {

// SoftmaxCrossEntropy (loss.SoftmaxCrossEntropy): the complete (logits, target) pairs of a bundle are
// evaluated over their stacked rows, as evaluate_all does: per row, shifted = z - max(z),
// loss = log(sum(exp(shifted))) - shifted[target], grad = softmax - onehot; per pair, the mean of its
// rows' losses, its gradient divided by its row count, and its hits (first argmax == target).
// Ports: in 0 "logits", 1 "target". Joins on the whole state or on key + match_on.
class SoftmaxCrossEntropyKernel : public Kernel {
 public:
  explicit SoftmaxCrossEntropyKernel(const KernelSpec& spec) : joins_(spec) {}

  void forward(NodeCtx& ctx, int port, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    std::vector<JoinEntry> pairs;
    for (size_t i = 0; i < xs.size(); ++i) {
      JoinEntry got;
      if (joins_.add(port, xs[i], states[i], 2, *ctx.layout, &got)) pairs.push_back(std::move(got));
    }
    if (pairs.empty()) return;
    for (const JoinEntry& p : pairs) check(p.slot[0].x, p.slot[1].x);
    for (const JoinEntry& p : pairs) {
      const Tensor& pred = p.slot[0].x;
      const State& pred_state = p.slot[0].state;
      Tensor grad;
      double loss = 0.0;
      int64_t correct = 0;
      if (pred.dtype() == DType::f32) evaluate<float>(pred, p.slot[1].x, &grad, &loss, &correct);
      else evaluate<double>(pred, p.slot[1].x, &grad, &loss, &correct);
      ctx.reports.push_back(Report{ctx.layout->key_of(pred_state), loss, pred.dim(0), correct});
      if (ctx.train) cache_.emplace(pred_state) = grad;
      out.push(kLossPort, Tensor::scalar(loss), pred_state);
    }
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      Tensor grad = take_cached(cache_, states[i], *ctx.layout);
      double g = gs[i].at(0);
      if (g != 1.0) grad = scaled(grad, g);
      out.push(0, grad, states[i]);
    }
  }

  size_t held() const override { return cache_.size() + joins_.size(); }

 private:
  static void check(const Tensor& pred, const Tensor& target) {
    if (pred.rank() != 2)
      throw OpError("SoftmaxCrossEntropy input 'logits': expected shape (batch, classes), got " + shape_text(pred), 0);
    if (target.rank() != 1 || target.dim(0) != pred.dim(0) || target.dtype() != DType::i64)
      throw OpError("SoftmaxCrossEntropy input 'target': expected " + std::to_string(pred.dim(0)) +
                        " integer class ids, got shape " + shape_text(target) + " dtype " + dtype_name(target.dtype()),
                    1);
    const int64_t classes = pred.dim(1);
    if (classes == 0)
      throw OpError("SoftmaxCrossEntropy input 'logits': expected at least one class, got shape " + shape_text(pred), 0);
    for (int64_t i = 0; i < target.dim(0); ++i) {
      int64_t t = target.data<int64_t>()[i * target.stride(0)];
      if (t < 0 || t >= classes)
        throw OpError("SoftmaxCrossEntropy input 'target': class ids must lie in [0, " + std::to_string(classes) +
                          "), found " + std::to_string(t),
                      1);
    }
  }

  // One pair's rows (the row math of evaluate_all: each row depends on its own logits only).
  template <class T>
  static void evaluate(const Tensor& pred_in, const Tensor& target, Tensor* grad_out, double* loss, int64_t* correct) {
    Tensor pred = pred_in.contiguous_copy();
    const int64_t n = pred.dim(0), c = pred.dim(1);
    Tensor grad = Tensor::empty(pred.dtype(), {n, c});
    const T* z = pred.data<T>();
    T* g = grad.data<T>();
    std::vector<T> row_loss(static_cast<size_t>(n));
    int64_t hits = 0;
    for (int64_t i = 0; i < n; ++i) {
      const T* zi = z + i * c;
      T* gi = g + i * c;
      int64_t t = target.data<int64_t>()[i * target.stride(0)];
      T top = zi[0];
      int64_t arg = 0;
      for (int64_t j = 1; j < c; ++j)
        if (zi[j] > top) top = zi[j], arg = j;
      T total = 0;
      for (int64_t j = 0; j < c; ++j) {
        gi[j] = std::exp(zi[j] - top);  // exp(shifted), the softmax's numerator
        total += gi[j];
      }
      row_loss[i] = std::log(total) - (zi[t] - top);
      for (int64_t j = 0; j < c; ++j) gi[j] = gi[j] / total;
      gi[t] -= T(1);
      hits += arg == t;
    }
    T sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += row_loss[i];
    *loss = n ? static_cast<double>(sum / static_cast<T>(n)) : std::nan("");
    for (int64_t i = 0; i < n * c; ++i) g[i] /= static_cast<T>(n);
    *correct = hits;
    *grad_out = grad;
  }

  static Tensor scaled(const Tensor& grad, double g) {
    Tensor out = Tensor::empty(grad.dtype(), grad.shape(), grad.rank());
    for (int64_t i = 0, n = grad.size(); i < n; ++i) {
      if (grad.dtype() == DType::f64) out.data<double>()[i] = grad.data<double>()[i] * g;
      else out.data<float>()[i] = static_cast<float>(grad.data<float>()[i] * g);
    }
    return out;
  }

  Joins joins_;
  StateMap<Tensor> cache_;
};
AMP_REGISTER_KERNEL("softmax_cross_entropy", SoftmaxCrossEntropyKernel);

// MSE (loss.MSE): per complete (pred, target) pair (target reshaped to pred's shape when the sizes
// agree, else the Python op's error), diff = pred - target, loss = np.mean(diff * diff) (numpy's pairwise
// sum, then the division in float64, stored in diff's dtype), grad = (2 / size) * diff in diff's dtype.
// The pairs of a bundle are joined first, then evaluated in order (evaluate_all, one by one); each reports
// (key, loss, n = rows of pred), caches its gradient for a training key and pushes its loss on kLossPort.
// Ports: in 0 "pred", 1 "target". Joins on the whole state or on key + match_on.
class MSEKernel : public Kernel {
 public:
  explicit MSEKernel(const KernelSpec& spec) : joins_(spec) {}

  void forward(NodeCtx& ctx, int port, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    pairs_.clear();
    for (size_t i = 0; i < xs.size(); ++i) {
      JoinEntry got;
      if (joins_.add(port, xs[i], states[i], 2, *ctx.layout, &got)) pairs_.push_back(std::move(got));
    }
    for (const JoinEntry& p : pairs_)
      if (p.slot[1].x.size() != p.slot[0].x.size())
        throw OpError("MSE input 'target': expected shape " + shape_text(p.slot[0].x) + " (as 'pred'), got " +
                      shape_text(p.slot[1].x));
    for (const JoinEntry& p : pairs_) {
      const Tensor& pred = p.slot[0].x;
      const State& pred_state = p.slot[0].state;
      const DType dtype = promote(pred.dtype(), p.slot[1].x.dtype());
      Tensor a = as_dtype(pred, dtype).contiguous_copy(), b = as_dtype(p.slot[1].x, dtype).contiguous_copy();
      Tensor grad = Tensor::empty(dtype, pred.shape(), pred.rank());
      double loss = dtype == DType::f64 ? evaluate<double>(a, b, grad) : evaluate<float>(a, b, grad);
      ctx.reports.push_back(Report{ctx.layout->key_of(pred_state), loss, pred.rows(), -1});
      if (ctx.train) cache_.emplace(pred_state) = grad;
      out.push(kLossPort, Tensor::scalar(loss), pred_state);
    }
    pairs_.clear();
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      out.push(0, loss_gradient(cache_, states[i], gs[i], *ctx.layout), states[i]);
    }
  }

  size_t held() const override { return cache_.size() + joins_.size(); }

 private:
  template <class T>
  double evaluate(const Tensor& pred, const Tensor& target, Tensor& grad) {
    const int64_t n = pred.size();
    if (n == 0) throw OpError("MSE input 'pred': expected at least one value, got shape " + shape_text(pred), 0);
    const T* p = pred.data<T>();
    const T* t = target.data<T>();
    T* g = grad.data<T>();
    for (int64_t i = 0; i < n; ++i) g[i] = p[i] - t[i];  // diff, kept in the gradient's buffer
    std::vector<T>& sq = squares<T>();
    sq.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) sq[i] = g[i] * g[i];
    const T mean = static_cast<T>(static_cast<double>(numpy_sum<T>(sq.data(), n)) / static_cast<double>(n));
    const T scale = static_cast<T>(2.0 / static_cast<double>(n));
    for (int64_t i = 0; i < n; ++i) g[i] = scale * g[i];
    return static_cast<double>(mean);
  }
  template <class T>
  std::vector<T>& squares() {
    if constexpr (sizeof(T) == 8) return sq64_;
    else return sq32_;
  }

  Joins joins_;
  StateMap<Tensor> cache_;
  std::vector<JoinEntry> pairs_;
  std::vector<double> sq64_;
  std::vector<float> sq32_;
};
AMP_REGISTER_KERNEL("mse", MSEKernel);

// Sink (loss.Sink): ends a value nobody reads; a training key turns around here with a zero gradient of
// the payload's shape (float payloads keep their dtype, others get float64), and nothing is reported.
class SinkKernel : public Kernel {
 public:
  explicit SinkKernel(const KernelSpec&) {}

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) {
      if (ctx.train) {
        bool inserted = false;
        Shape& shape = shapes_.emplace(states[i], &inserted);
        if (!inserted)
          throw OpError("state " + ctx.layout->describe(states[i]) +
                        " reached the Sink twice while the first is still in flight");
        shape.rank = xs[i].rank();
        for (int k = 0; k < shape.rank; ++k) shape.dims[k] = xs[i].dim(k);
        shape.dtype = xs[i].dtype() == DType::f32 ? DType::f32 : DType::f64;
      }
      out.push(kLossPort, Tensor::scalar(0.0), states[i]);
    }
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      bool found = false;
      Shape shape = shapes_.take(states[i], &found);
      if (!found)
        throw OpError("a backward message with state " + ctx.layout->describe(states[i]) +
                      " arrived at the Sink but no forward with that state passed it");
      out.push(0, Tensor::zeros(shape.dtype, shape.dims, shape.rank), states[i]);
    }
  }

  size_t held() const override { return shapes_.size(); }

 private:
  struct Shape {
    int rank = 0;
    int64_t dims[kMaxRank] = {0, 0, 0, 0};
    DType dtype = DType::f64;
  };
  StateMap<Shape> shapes_;
};
AMP_REGISTER_KERNEL("sink", SinkKernel);

}  // namespace
}  // namespace amp
