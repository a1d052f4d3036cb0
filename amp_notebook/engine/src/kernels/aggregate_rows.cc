// Row-stream kernels, the native twins of ir/ops/aggregate.py's Ungroup and Group: a matrix becomes one
// message per row (or chunk of rows) numbered by a counter field in the state, and such a stream becomes
// a matrix again. Both change states: the counter slot is set on the way out and cleared on the way back.
// Never touches Python, the inbox or other nodes.
#include "kernels/rows.h"

namespace amp {

namespace {

// Ungroup (aggregate.Ungroup): x (n, ...) -> n messages x[i] with state counter = i; with a chunk k (an
// int, or an expression over the state) n / k messages x[i*k:(i+1)*k], keeping the leading axis. The
// outputs are views. For training keys the input's shape and the number of pieces are cached under the
// input's state; backward writes each piece's gradient into its rows of a buffer of x's shape and dtype
// (made at the first gradient) and sends the buffer with the parent state (counter cleared) once every
// piece came back.
// ints: [counter slot, chunk mode (0 rows, 1 a fixed chunk, 2 an expression: programs[0]), fixed chunk].
// The Python op's errors: the counter already set (a native error with its text), a chunk that is no
// positive divisor of the row count or whose expression fails (replayed: ExpressionFailure).
class UngroupKernel : public Kernel {
 public:
  explicit UngroupKernel(const KernelSpec& spec) : spec_(spec) {
    if (spec.ints.size() != 3 || spec.ints[0] < 0 || spec.ints[0] >= spec.n_slots || spec.ints[1] < 0 ||
        spec.ints[1] > 2 || (spec.ints[1] == 2) != (spec.programs.size() == 1))
      throw SpecError("an Ungroup takes [counter slot, chunk mode, chunk] and a program for a chunk expression");
    counter_ = static_cast<int>(spec.ints[0]);
    mode_ = static_cast<int>(spec.ints[1]);
    fixed_ = spec.ints[2];
  }

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) {
      const Tensor& x = xs[i];
      const State& s = states[i];
      if (s.has(counter_))
        throw OpError("state " + ctx.layout->describe(s) + " already has field '" + ctx.layout->names[counter_] +
                      "'; choose another counter name for this Ungroup");
      if (x.rank() == 0) throw OpError("Ungroup input 'in': expected rows (n, ...), got a scalar", 0);
      const int64_t n = x.dim(0);
      const int64_t k = mode_ == 0 ? 1 : chunk(s, n);
      const int64_t pieces = n / k;
      if (ctx.train && pieces > 0) {  // (the Python op also caches an entry for 0 pieces, never taken)
        bool inserted = false;
        Entry& e = cache_.emplace(s, &inserted);
        if (!inserted) throw OpError("state " + ctx.layout->describe(s) + " reached the Ungroup twice while the "
                                     "first is still in flight");
        e.rank = x.rank();
        for (int d = 0; d < x.rank(); ++d) e.dims[d] = x.dim(d);
        e.dtype = x.dtype();
        e.remaining = pieces;
      }
      for (int64_t p = 0; p < pieces; ++p) {
        State part = s;
        part.set(counter_, p);
        out.push(0, mode_ == 0 ? row_of(x, p) : x.rows(p * k, (p + 1) * k), part);
      }
    }
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      const State& s = states[i];
      State parent = s;
      parent.erase(counter_);
      Entry* e = s.has(counter_) ? cache_.find(parent) : nullptr;
      if (!e) nothing_cached(s, *ctx.layout);
      if (!e->grad.defined()) e->grad = Tensor::zeros(e->dtype, e->dims, e->rank);
      const Tensor& x = e->grad;  // of the input's shape and dtype
      const int64_t p = s.get(counter_);
      const Tensor& g = gs[i];
      // the rows this piece covers: row p (rows), or rows [p*k, (p+1)*k) with k = len(g) (chunks)
      bool fits = p >= 0 && p < x.dim(0);
      if (mode_ == 0) {
        fits = fits && g.rank() == x.rank() - 1;
        for (int d = 1; fits && d < x.rank(); ++d) fits = g.dim(d - 1) == x.dim(d);
      } else {
        fits = fits && g.rank() == x.rank() && g.rank() > 0 && (p + 1) * g.dim(0) <= x.dim(0);
        for (int d = 1; fits && d < x.rank(); ++d) fits = g.dim(d) == x.dim(d);
      }
      if (!fits)
        throw OpError("Ungroup output 'out': a gradient of shape " + shape_text(g) + " for piece " +
                      std::to_string(p) + " does not fit the input of shape " + shape_text(x));
      const int64_t a = mode_ == 0 ? p : p * g.dim(0), b = mode_ == 0 ? p + 1 : a + g.dim(0);
      Tensor src = as_dtype(g, x.dtype()).contiguous_copy();
      const size_t row_bytes = static_cast<size_t>(row_items(x)) * itemsize(x.dtype());
      if (row_bytes) std::memcpy(x.data<char>() + a * row_bytes, src.raw(), static_cast<size_t>(b - a) * row_bytes);
      if (--e->remaining > 0) continue;
      out.push(0, e->grad, parent);
      cache_.take(parent);
    }
  }

  size_t held() const override { return cache_.size(); }

 private:
  struct Entry {
    int rank = 0;
    int64_t dims[kMaxRank] = {0, 0, 0, 0};  // the input's shape and dtype
    DType dtype = DType::f64;
    Tensor grad;
    int64_t remaining = 0;
  };

  // The rows per message: a positive divisor of n (else the Python op's error, by replay).
  int64_t chunk(const State& s, int64_t n) const {
    int64_t k = fixed_;
    bool is_bool = false;
    if (mode_ == 2) {
      Value v;
      EvalStatus status = evaluate(spec_.programs[0], s, &v);
      if (status != kOk) throw ExpressionFailure(0, status);
      k = v.v;
      is_bool = v.is_bool;
    }
    if (is_bool || k <= 0 || n % k) throw ExpressionFailure(0, kBadValue);
    return k;
  }

  KernelSpec spec_;
  int counter_ = 0, mode_ = 0;
  int64_t fixed_ = 1;
  StateMap<Entry> cache_;
};
AMP_REGISTER_KERNEL("ungroup", UngroupKernel);

constexpr int64_t kMaxRows = int64_t(1) << 24;  // a Group's rows are allocated when its first one arrives

// Group (aggregate.Group): the row messages counter = 0 .. count-1 of one parent state (the state without
// the counter) wait in a join entry sized by the `count` expression on the first member's state; the
// complete group is stacked along a new leading axis (np.stack: one dtype, equal shapes) and sent with the
// parent state. Backward sends row i of the gradient (a view) with counter = i. Nothing is cached for
// backward. ints: [counter slot]; programs: [count].
class GroupKernel : public Kernel {
 public:
  explicit GroupKernel(const KernelSpec& spec) : spec_(spec) {
    if (spec.ints.size() != 1 || spec.ints[0] < 0 || spec.ints[0] >= spec.n_slots || spec.programs.size() != 1)
      throw SpecError("a Group takes [counter slot] and its count program");
    counter_ = static_cast<int>(spec.ints[0]);
  }

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) {
      const State& s = states[i];
      if (!s.has(counter_))
        throw OpError("state " + ctx.layout->describe(s) + " has no counter field '" + ctx.layout->names[counter_] +
                      "' to group by");
      State parent = s;
      parent.erase(counter_);
      bool inserted = false;
      Members& m = waiting_.emplace(parent, &inserted);
      if (inserted) {
        Value v;
        EvalStatus status = evaluate(spec_.programs[0], s, &v);
        if (status != kOk || v.v <= 0) {
          waiting_.take(parent);
          throw ExpressionFailure(0, status != kOk ? status : kBadValue);  // the Python op's error, replayed
        }
        if (v.v > kMaxRows) {
          waiting_.take(parent);
          throw OpError("count gave " + std::to_string(v.v) + " on state " + ctx.layout->describe(s) +
                        "; a group holds at most " + std::to_string(kMaxRows) + " rows");
        }
        m.rows = pool_.get();
        m.rows.resize(static_cast<size_t>(v.v));
      }
      const int64_t at = s.get(counter_);
      const int64_t n = static_cast<int64_t>(m.rows.size());
      if (at < 0 || at >= n || m.rows[at].defined())
        throw OpError("counter " + ctx.layout->names[counter_] + "=" + value_text(at, (s.bools >> counter_) & 1u) +
                      " is out of range or repeated for " + std::to_string(n) + " rows");
      m.rows[at] = xs[i];
      if (++m.got < n) continue;
      Members done = waiting_.take(parent);
      Tensor y = stack_new_axis(done.rows);
      pool_.put(std::move(done.rows));
      out.push(0, y, parent);
    }
  }

  void backward(NodeCtx&, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      const Tensor& g = gs[i];
      if (g.rank() == 0) throw OpError("Group output 'out': expected a gradient with rows, got a scalar");
      for (int64_t r = 0; r < g.dim(0); ++r) {
        State part = states[i];
        part.set(counter_, r);
        out.push(0, row_of(g, r), part);
      }
    }
  }

  size_t held() const override { return waiting_.size(); }

 private:
  struct Members {
    std::vector<Tensor> rows;  // one per counter value; a row not yet arrived is undefined
    int64_t got = 0;
  };

  // np.stack(rows): equal shapes, the common dtype, a new leading axis.
  static Tensor stack_new_axis(const std::vector<Tensor>& rows) {
    const Tensor& first = rows[0];
    if (first.rank() + 1 > kMaxRank) throw OpError("Group: rows of at most 3 axes can be stacked");
    DType dtype = first.dtype();
    for (const Tensor& r : rows) {
      if (!r.same_shape(first))
        throw OpError("Group: the rows of one group differ in shape (" + shape_text(first) + " and " +
                      shape_text(r) + "); all input arrays must have the same shape");
      if (r.dtype() != dtype) dtype = promote(dtype, r.dtype());
    }
    int64_t shape[kMaxRank];
    shape[0] = static_cast<int64_t>(rows.size());
    for (int k = 0; k < first.rank(); ++k) shape[k + 1] = first.dim(k);
    Tensor y = Tensor::empty(dtype, shape, first.rank() + 1);
    const size_t bytes = static_cast<size_t>(first.size()) * itemsize(dtype);
    for (size_t r = 0; r < rows.size(); ++r) {
      Tensor part = as_dtype(rows[r], dtype).contiguous_copy();
      if (bytes) std::memcpy(y.data<char>() + r * bytes, part.raw(), bytes);
    }
    return y;
  }

  KernelSpec spec_;
  int counter_ = 0;
  StateMap<Members> waiting_;
  Pool<Tensor> pool_;
};
AMP_REGISTER_KERNEL("group", GroupKernel);

}  // namespace
}  // namespace amp
