// (Dis)aggregation kernels, the native twins of ir/ops/aggregate.py: Concat, Split and Bcast. They move
// payload pieces between messages of one state: Concat joins, Split and Bcast fan out and wait for the
// gradients of every output that carries one before sending their own backward.
// Never touches Python, the inbox or other nodes.
#include <cstring>

#include "kernels/kernel.h"

namespace amp {

namespace {

int count_bits(uint32_t m) { return __builtin_popcount(m); }

// Concatenate along the last axis (np.concatenate(xs, axis=-1)): equal leading shapes, one dtype.
Tensor concat_last(const std::vector<Tensor>& xs) {
  const Tensor& first = xs[0];
  int64_t width = 0;
  DType dtype = first.dtype();
  for (const Tensor& x : xs) {
    width += x.dim(x.rank() - 1);
    if (x.dtype() != dtype) dtype = promote(dtype, x.dtype());
  }
  int64_t shape[kMaxRank];
  for (int k = 0; k < first.rank(); ++k) shape[k] = first.dim(k);
  shape[first.rank() - 1] = width;
  Tensor out = Tensor::empty(dtype, shape, first.rank());
  const int64_t rows = out.size() / (width ? width : 1);
  const size_t item = itemsize(dtype);
  int64_t at = 0;
  for (const Tensor& x : xs) {
    Tensor part = as_dtype(x, dtype).contiguous_copy();
    const int64_t w = part.dim(part.rank() - 1);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(out.data<char>() + (r * width + at) * item, part.data<char>() + r * w * item, w * item);
    at += w;
  }
  return out;
}

// Concat (aggregate.Concat): the payloads of the n inputs with matching state (whole, or key + match_on),
// concatenated along the last axis in port order, with in0's state; backward splits the gradient by the
// inputs' widths (views) and returns each piece with its input's own state. At most kMaxJoinPorts inputs
// (specs.py sends wider Concats through the bridge).
class ConcatKernel : public Kernel {
 public:
  explicit ConcatKernel(const KernelSpec& spec) : joins_(spec), n_(static_cast<int>(spec.in_names.size())) {
    if (n_ < 1 || n_ > kMaxJoinPorts) throw SpecError("a native Concat joins 1 to 4 inputs");
    names_ = spec.in_names;
  }

  void forward(NodeCtx& ctx, int port, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) {
      JoinEntry got;
      if (!joins_.add(port, xs[i], states[i], n_, *ctx.layout, &got)) continue;
      std::vector<Tensor> parts;
      const Tensor& lead = got.slot[0].x;
      for (int p = 0; p < n_; ++p) {
        const Tensor& x = got.slot[p].x;
        bool same = x.rank() == lead.rank() && x.rank() > 0;
        for (int k = 0; same && k < x.rank() - 1; ++k) same = x.dim(k) == lead.dim(k);
        if (!same)
          throw OpError("Concat input '" + names_[p] + "': expected leading shape as input 'in0' " +
                        shape_text(lead) + ", got " + shape_text(x), p);
        parts.push_back(x);
      }
      const State& out_state = got.slot[0].state;
      if (ctx.train) {
        Entry& e = cache_.emplace(out_state);
        for (int p = 0; p < n_; ++p) {
          e.width[p] = got.slot[p].x.dim(got.slot[p].x.rank() - 1);
          e.state[p] = got.slot[p].state;
        }
      }
      out.push(0, concat_last(parts), out_state);
    }
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      bool found = false;
      Entry e = cache_.take(states[i], &found);
      if (!found) take_cached(empty_, states[i], *ctx.layout);  // throws the missing-cache error
      int64_t at = 0;
      for (int p = 0; p < n_; ++p) {
        out.push(p, gs[i].last_axis(at, at + e.width[p]), e.state[p]);
        at += e.width[p];
      }
    }
  }

  size_t held() const override { return cache_.size() + joins_.size(); }

 private:
  struct Entry {
    int64_t width[kMaxJoinPorts] = {0, 0, 0, 0};
    State state[kMaxJoinPorts];
  };
  Joins joins_;
  int n_;
  std::vector<std::string> names_;
  StateMap<Entry> cache_;
  StateMap<Tensor> empty_;
};
AMP_REGISTER_KERNEL("concat", ConcatKernel);

// What Split and Bcast keep per state until every output that carries a gradient has sent one back
// (aggregate._FanOut.collect): the input's shape and the gradients so far, in arrival order.
constexpr int kMaxFanOut = 8;  // wider Split/Bcast nodes go through the bridge (specs.py)
struct FanOutEntry {
  int rank = 0;
  int64_t shape[kMaxRank] = {0, 0, 0, 0};
  int got = 0;
  int port[kMaxFanOut] = {};
  Tensor grad[kMaxFanOut];
};

class FanOut : public Kernel {
 protected:
  // Add `g` for output `port`; true (and the entry taken out) once every gradient-carrying output is in.
  bool collect(NodeCtx& ctx, int port, const Tensor& g, const State& s, FanOutEntry* done) {
    FanOutEntry* e = pending_.find(s);
    if (!e)
      throw OpError("a backward message with state " + ctx.layout->describe(s) +
                    " arrived but nothing was cached for it (its forward never ran here in training)");
    if (e->got >= kMaxFanOut) throw OpError("more gradients than outputs arrived for state " + ctx.layout->describe(s));
    e->port[e->got] = port;
    e->grad[e->got] = g;
    if (++e->got < count_bits(ctx.grad_outputs)) return false;
    pending_.take_into(s, done);
    return true;
  }
  void remember(const State& s, const Tensor& x) {
    FanOutEntry& e = pending_.emplace(s);
    e.rank = x.rank();
    for (int k = 0; k < x.rank(); ++k) e.shape[k] = x.dim(k);
  }
  size_t held() const override { return pending_.size(); }
  StateMap<FanOutEntry> pending_;
};

// Split (aggregate.Split): the last axis cut into pieces of the given sizes (views), one output each;
// backward concatenates the pieces' gradients, zeros for outputs that carry none. ints: sizes.
class SplitKernel : public FanOut {
 public:
  explicit SplitKernel(const KernelSpec& spec) : sizes_(spec.ints) {
    if (sizes_.size() != spec.out_names.size() || sizes_.size() > static_cast<size_t>(kMaxFanOut))
      throw SpecError("a native Split has one size per output, at most 8");
    for (int64_t n : sizes_) total_ += n;
  }

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) {
      const Tensor& x = xs[i];
      if (x.rank() == 0 || x.dim(x.rank() - 1) != total_)
        throw OpError("Split input 'in': expected last dimension " + std::to_string(total_) + ", got " +
                      (x.rank() ? std::to_string(x.dim(x.rank() - 1)) : std::string("a scalar")), 0);
      if (ctx.train) remember(states[i], x);
      int64_t at = 0;
      for (size_t p = 0; p < sizes_.size(); ++p) {
        out.push(static_cast<int>(p), x.last_axis(at, at + sizes_[p]), states[i]);
        at += sizes_[p];
      }
    }
  }

  void backward(NodeCtx& ctx, int port, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      FanOutEntry e;
      if (!collect(ctx, port, gs[i], states[i], &e)) continue;
      DType dtype = e.grad[0].dtype();
      std::vector<Tensor> parts;
      for (size_t p = 0; p < sizes_.size(); ++p) {
        int k = 0;
        while (k < e.got && e.port[k] != static_cast<int>(p)) ++k;
        if (k < e.got) {
          parts.push_back(e.grad[k]);
        } else {  // an output without a gradient: zeros of its piece's shape
          int64_t shape[kMaxRank];
          for (int a = 0; a < e.rank; ++a) shape[a] = e.shape[a];
          shape[e.rank - 1] = sizes_[p];
          parts.push_back(Tensor::zeros(dtype, shape, e.rank));
        }
      }
      out.push(0, concat_last(parts), states[i]);
    }
  }

 private:
  std::vector<int64_t> sizes_;
  int64_t total_ = 0;
};
AMP_REGISTER_KERNEL("split", SplitKernel);

// Bcast (aggregate.Bcast): the same payload to every output; backward sums the outputs' gradients in the
// order they arrived (a copy of the first, then += each other).
class BcastKernel : public FanOut {
 public:
  explicit BcastKernel(const KernelSpec& spec) : n_(static_cast<int>(spec.out_names.size())) {
    if (n_ < 1 || n_ > kMaxFanOut) throw SpecError("a native Bcast has 1 to 8 outputs");
  }

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    if (ctx.train)
      for (size_t i = 0; i < xs.size(); ++i) remember(states[i], xs[i]);
    for (size_t i = 0; i < xs.size(); ++i)
      for (int p = 0; p < n_; ++p) out.push(p, xs[i], states[i]);
  }

  void backward(NodeCtx& ctx, int port, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      FanOutEntry e;
      if (!collect(ctx, port, gs[i], states[i], &e)) continue;
      DType dtype = e.grad[0].dtype();
      for (int k = 1; k < e.got; ++k) dtype = promote(dtype, e.grad[k].dtype());
      Tensor total = as_dtype(e.grad[0], dtype).contiguous_copy(true);
      for (int k = 1; k < e.got; ++k) {
        Tensor g = as_dtype(e.grad[k], dtype).contiguous_copy();
        if (!g.same_shape(total)) throw OpError("Bcast: the gradients of its outputs differ in shape");
        for (int64_t j = 0, n = total.size(); j < n; ++j) {
          if (dtype == DType::f64) total.data<double>()[j] += g.data<double>()[j];
          else total.data<float>()[j] += g.data<float>()[j];
        }
      }
      out.push(0, total, states[i]);
    }
  }

 private:
  int n_;
};
AMP_REGISTER_KERNEL("bcast", BcastKernel);

}  // namespace
}  // namespace amp
