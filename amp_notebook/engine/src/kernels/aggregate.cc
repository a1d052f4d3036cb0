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
// (aggregate._FanOut.collect): the input's shape, which outputs' gradients are in, and what they add up to so
// far. Each gradient is folded in as it arrives, so an entry holds one tensor, not one per output: entries wait
// for as long as their keys are in flight, and with many keys in flight their size is what decides whether
// the worker's working set stays in its caches.
constexpr int kMaxFanOut = 8;  // wider Split/Bcast nodes go through the bridge (specs.py)
struct FanOutEntry {
  int rank = 0;
  int64_t shape[kMaxRank] = {0, 0, 0, 0};
  uint32_t ports = 0;  // bit p: output p's gradient is in
  Tensor acc;          // Split: the input's gradient, assembled piece by piece; Bcast: the sum so far
};

class FanOut : public Kernel {
 protected:
  explicit FanOut(const KernelSpec& spec) : out_names_(spec.out_names) {}

  // The entry of state `s` (OpError if its forward never ran here), after checking that output `port` has
  // not sent its gradient already (the Python op keeps one gradient per output).
  FanOutEntry& entry(NodeCtx& ctx, int port, const State& s) {
    FanOutEntry* e = pending_.find(s);
    if (!e)
      throw OpError("a backward message with state " + ctx.layout->describe(s) +
                    " arrived but nothing was cached for it (its forward never ran here in training)");
    if (e->ports & (1u << port))
      throw OpError("output '" + out_names_[static_cast<size_t>(port)] + "' sent a second gradient for state " +
                    ctx.layout->describe(s) + " before the other outputs sent theirs; states leaving a " +
                    "Split or Bcast must come back once each");
    return *e;
  }
  // Mark `port` in; true (and the entry moved into `done`) once every gradient-carrying output is in.
  bool arrived(NodeCtx& ctx, FanOutEntry& e, int port, const State& s, FanOutEntry* done) {
    e.ports |= 1u << port;
    if (count_bits(e.ports) < count_bits(ctx.grad_outputs)) return false;
    pending_.take_into(s, done);
    return true;
  }
  void remember(const State& s, const Tensor& x) {
    FanOutEntry& e = pending_.emplace(s);
    e.rank = x.rank();
    for (int k = 0; k < x.rank(); ++k) e.shape[k] = x.dim(k);
  }
  size_t held() const override { return pending_.size(); }

  std::vector<std::string> out_names_;
  StateMap<FanOutEntry> pending_;
};

// Split (aggregate.Split): the last axis cut into pieces of the given sizes (views), one output each;
// backward concatenates the pieces' gradients, zeros for outputs that carry none. ints: sizes.
// The concatenation is built as the pieces arrive: the first allocates the input's gradient (zeroed when some
// output carries no gradient) in its dtype, each piece is copied into its columns, and a piece of a wider
// dtype widens what is there first (float32 to float64 is exact), so the result is np.concatenate's, dtype
// included.
class SplitKernel : public FanOut {
 public:
  explicit SplitKernel(const KernelSpec& spec) : FanOut(spec), sizes_(spec.ints) {
    if (sizes_.size() != spec.out_names.size() || sizes_.size() > static_cast<size_t>(kMaxFanOut))
      throw SpecError("a native Split has one size per output, at most 8");
    for (int64_t n : sizes_) {
      offsets_.push_back(total_);
      total_ += n;
    }
  }

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) {
      const Tensor& x = xs[i];
      if (x.rank() == 0 || x.dim(x.rank() - 1) != total_)
        throw OpError("Split input 'in': expected last dimension " + std::to_string(total_) + ", got " +
                      (x.rank() ? std::to_string(x.dim(x.rank() - 1)) : std::string("a scalar")), 0);
      if (ctx.train) remember(states[i], x);
      for (size_t p = 0; p < sizes_.size(); ++p)
        out.push(static_cast<int>(p), x.last_axis(offsets_[p], offsets_[p] + sizes_[p]), states[i]);
    }
  }

  void backward(NodeCtx& ctx, int port, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      FanOutEntry& e = entry(ctx, port, states[i]);
      place(ctx, e, port, gs[i]);
      FanOutEntry done;
      if (arrived(ctx, e, port, states[i], &done)) out.push(0, std::move(done.acc), states[i]);
    }
  }

 private:
  // Copy output `port`'s gradient `g` into its columns of the entry's gradient.
  void place(NodeCtx& ctx, FanOutEntry& e, int port, const Tensor& g) const {
    const size_t p = static_cast<size_t>(port);
    bool fits = g.rank() == e.rank && g.dim(e.rank - 1) == sizes_[p];
    for (int a = 0; fits && a + 1 < e.rank; ++a) fits = g.dim(a) == e.shape[a];
    if (!fits) {
      int64_t want[kMaxRank];
      for (int a = 0; a < e.rank; ++a) want[a] = e.shape[a];
      want[e.rank - 1] = sizes_[p];
      throw OpError("Split output '" + out_names_[p] + "': expected a gradient of shape " +
                    shape_text(want, e.rank) + ", got " + shape_text(g));
    }
    if (!e.acc.defined()) {
      // every output that carries a gradient writes its own columns; the others' stay zero
      const bool all = count_bits(ctx.grad_outputs) == static_cast<int>(sizes_.size());
      e.acc = all ? Tensor::empty(g.dtype(), e.shape, e.rank) : Tensor::zeros(g.dtype(), e.shape, e.rank);
    } else if (g.dtype() != e.acc.dtype() && promote(e.acc.dtype(), g.dtype()) != e.acc.dtype()) {
      e.acc = as_dtype(e.acc, promote(e.acc.dtype(), g.dtype()));
    }
    const Tensor piece = as_dtype(g, e.acc.dtype()).contiguous_copy();
    const size_t item = itemsize(e.acc.dtype());
    const int64_t w = sizes_[p], rows = w ? piece.size() / w : 0;
    char* dst = e.acc.data<char>() + static_cast<size_t>(offsets_[p]) * item;
    const char* src = piece.data<char>();
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + static_cast<size_t>(r * total_) * item, src + static_cast<size_t>(r * w) * item,
                  static_cast<size_t>(w) * item);
  }

  std::vector<int64_t> sizes_, offsets_;
  int64_t total_ = 0;
};
AMP_REGISTER_KERNEL("split", SplitKernel);

// Bcast (aggregate.Bcast): the same payload to every output; backward sums the outputs' gradients in the
// order they arrived, as the Python op does: a copy of the first (in its dtype), then += each other, each
// sum computed in the wider of the two dtypes and stored in the first's. The sum is kept as it grows.
class BcastKernel : public FanOut {
 public:
  explicit BcastKernel(const KernelSpec& spec) : FanOut(spec), n_(static_cast<int>(spec.out_names.size())) {
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
      FanOutEntry& e = entry(ctx, port, states[i]);
      const Tensor& g = gs[i];
      if (!is_float(g.dtype()))
        throw OpError("Bcast output '" + out_names_[static_cast<size_t>(port)] + "': expected a float gradient, got " +
                      dtype_name(g.dtype()));
      if (!e.acc.defined()) {
        e.acc = g;  // the first gradient, shared until a second one arrives
      } else {
        if (!g.same_shape(e.acc))
          throw OpError("Bcast output '" + out_names_[static_cast<size_t>(port)] + "': expected a gradient of shape " +
                        shape_text(e.acc) + " like the other outputs', got " + shape_text(g));
        if (count_bits(e.ports) == 1) e.acc = e.acc.contiguous_copy(true);  // the sum's own array
        add_into(e.acc, g);
      }
      FanOutEntry done;
      if (!arrived(ctx, e, port, states[i], &done)) continue;
      // one gradient in all: still a copy, as the Python op's total is
      out.push(0, count_bits(done.ports) == 1 ? done.acc.contiguous_copy(true) : std::move(done.acc), states[i]);
    }
  }

 private:
  // total += g elementwise (numpy's in-place add: computed in the wider dtype, stored in total's).
  static void add_into(Tensor& total, const Tensor& g_in) {
    const Tensor g = g_in.contiguous_copy();
    const int64_t n = total.size();
    if (total.dtype() == DType::f64) {
      double* t = total.data<double>();
      const Tensor g64 = as_dtype(g, DType::f64);  // g itself when it is float64 already
      for (int64_t j = 0; j < n; ++j) t[j] += g64.data<double>()[j];
    } else if (g.dtype() == DType::f32) {
      float* t = total.data<float>();
      for (int64_t j = 0; j < n; ++j) t[j] += g.data<float>()[j];
    } else {  // a float32 sum and a float64 gradient: each sum in float64, stored as float32
      float* t = total.data<float>();
      const Tensor g64 = as_dtype(g, DType::f64);
      for (int64_t j = 0; j < n; ++j) t[j] = static_cast<float>(static_cast<double>(t[j]) + g64.data<double>()[j]);
    }
  }

  static bool is_float(DType d) { return d == DType::f32 || d == DType::f64; }

  int n_;
};
AMP_REGISTER_KERNEL("bcast", BcastKernel);

}  // namespace
}  // namespace amp
