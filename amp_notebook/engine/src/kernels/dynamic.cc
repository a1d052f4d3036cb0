// Dynamic (dis)aggregation kernels, the native twins of ir/ops/dynamic.py's Flatmap, Partition and Collect
// (Distribute is a Cond: control.cc). They walk a per-key structure known only from the data: a table's
// column 0 addresses its rows (Flatmap: one message per row; Partition: one per group of rows) and
// Collect merges the messages whose states map to one group. All three write state fields.
// Never touches Python, the inbox or other nodes.
#include <algorithm>
#include <cmath>

#include "kernels/rows.h"

namespace amp {

namespace {

// A failure whose text only the Python op knows how to write (a value, a shape, a state in its words):
// the messages are replayed through the Python op, which raises it (kernel.h; engine/errors.py). Used
// for checks that depend on the message alone, never on what the node holds.
[[noreturn]] void replay() { throw ExpressionFailure(0, kBadValue); }

// dynamic._integer_column: column 0 of a (n, 1 + k) table as int64 row addresses, each paired with its
// row: a float column rounded half to even (np.rint) and within 1e-3 of an integer (else the Python op's
// error); an integer column as it is; a bool one refused. Where numpy's cast of a rounded float to int64
// gives INT64_MIN (NaN, beyond int64) so does this.
void addresses(const Tensor& x, std::vector<std::pair<int64_t, int64_t>>* out) {
  const int64_t n = x.dim(0), s0 = x.stride(0);
  out->resize(static_cast<size_t>(n));
  if (x.dtype() == DType::i64) {
    for (int64_t i = 0; i < n; ++i) (*out)[i] = {x.data<int64_t>()[i * s0], i};
    return;
  }
  if (x.dtype() == DType::b8) replay();
  const double tolerance = x.dtype() == DType::f32 ? static_cast<double>(1e-3f) : 1e-3;  // compared in the column's type
  for (int64_t i = 0; i < n; ++i) {
    double c = x.dtype() == DType::f64 ? x.data<double>()[i * s0] : x.data<float>()[i * s0];
    double r = std::nearbyint(c);
    if (std::fabs(c - r) > tolerance) replay();
    bool fits = r >= -9223372036854775808.0 && r < 9223372036854775808.0;
    (*out)[i] = {fits ? static_cast<int64_t>(r) : INT64_MIN, i};
  }
}

// What Flatmap's and Partition's backward fill in (dynamic._RowGradients): the table's shape, its
// (address, row) pairs sorted by address (then row: a stable sort), and the gradient of the table, float64
// (np.result_type(g, float64)), zero in column 0, made at the first part's gradient.
struct RowGradients {
  int64_t rows = 0, cols = 0;
  std::vector<std::pair<int64_t, int64_t>> order;
  Tensor grad;
  int64_t remaining = 0;
};

// The shared backward (dynamic._RowSplit.backward): the part with address v writes g into columns 1.. of
// the rows whose address is v (one row for Flatmap, a group for Partition), in their order; the table's
// gradient goes back with the parent state once every part came back.
class RowSplit : public Kernel {
 protected:
  explicit RowSplit(const KernelSpec& spec, int n_ints) {
    if (static_cast<int>(spec.ints.size()) != n_ints || spec.ints[0] < 0 || spec.ints[0] >= spec.n_slots)
      throw SpecError(spec.kind + " takes its field slot first");
    field_ = static_cast<int>(spec.ints[0]);
    keep_2d_ = spec.ints[1] != 0;
  }

  // The table checked as the Python op checks it (width 2 only, without keep_2d, when `exact_two`).
  static void check_table(const Tensor& x, bool exact_two) {
    if (x.rank() != 2 || x.dim(1) < 2 || (exact_two && x.dim(1) != 2)) replay();
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      const State& s = states[i];
      State parent = s;
      erase_written(&parent);
      RowGradients* e = s.has(field_) ? cache_.find(parent) : nullptr;
      if (!e) nothing_cached(s, *ctx.layout);
      auto lo = std::lower_bound(e->order.begin(), e->order.end(), std::make_pair(s.get(field_), INT64_MIN));
      auto hi = lo;
      while (hi != e->order.end() && hi->first == s.get(field_)) ++hi;
      const int64_t m = hi - lo, k = e->cols - 1;
      if (m == 0 || gs[i].size() != m * k)
        throw OpError(kind_name() + " output 'out': a gradient of shape " + shape_text(gs[i]) + " for " +
                      std::to_string(m) + " row(s) of " + std::to_string(k) + " values, state " +
                      ctx.layout->describe(s));
      if (!e->grad.defined()) {
        const int64_t shape[2] = {e->rows, e->cols};
        e->grad = Tensor::zeros(DType::f64, shape, 2);
      }
      Tensor g = as_dtype(gs[i], DType::f64).contiguous_copy();
      double* grad = e->grad.data<double>();
      for (int64_t r = 0; r < m; ++r) std::memcpy(grad + lo[r].second * e->cols + 1, g.data<double>() + r * k, k * 8);
      if (--e->remaining > 0) continue;
      out.push(0, e->grad, parent);
      RowGradients done = cache_.take(parent);
      pool_.put(std::move(done.order));
    }
  }

  size_t held() const override { return cache_.size(); }

  virtual std::string kind_name() const = 0;
  virtual void erase_written(State* s) const { s->erase(field_); }

  int field_ = 0;
  bool keep_2d_ = true;
  StateMap<RowGradients> cache_;
  Pool<std::pair<int64_t, int64_t>> pool_;
};

// Flatmap (dynamic.Flatmap): a table (n, 1 + k) -> n messages, row i with state field = its address and
// payload x[i:i+1, 1:] (keep_2d) or x[i, 1:] (views). Addresses must be distinct and the field new.
// ints: [field slot, keep_2d]. Every forward error is the Python op's, replayed.
class FlatmapKernel : public RowSplit {
 public:
  explicit FlatmapKernel(const KernelSpec& spec) : RowSplit(spec, 2) {}

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) {
      const Tensor& x = xs[i];
      if (states[i].has(field_)) replay();
      check_table(x, false);
      std::vector<std::pair<int64_t, int64_t>> order = pool_.get();
      addresses(x, &order);
      const Tensor values = x.last_axis(1, x.dim(1));
      for (const auto& [v, r] : order) {  // in row order
        State part = states[i];
        part.set(field_, v);
        out.push(0, keep_2d_ ? values.rows(r, r + 1) : row_of(values, r), part);
      }
      std::sort(order.begin(), order.end());
      for (size_t r = 1; r < order.size(); ++r)
        if (order[r].first == order[r - 1].first) replay();  // a repeated address
      if (ctx.train && !order.empty()) {
        RowGradients& e = cache_.emplace(states[i]);
        e.rows = x.dim(0);
        e.cols = x.dim(1);
        e.order = std::move(order);
        e.remaining = e.rows;
      } else {
        pool_.put(std::move(order));
      }
    }
  }

 private:
  std::string kind_name() const override { return "Flatmap"; }
};
AMP_REGISTER_KERNEL("flatmap", FlatmapKernel);

// Partition (dynamic.Partition): a table (n, 1 + k) -> one message per distinct address v, ascending,
// holding the rows with address v in their order without column 0 (a copy, (m, k), or (m,) without
// keep_2d), with state field = v and, if a size field is set, size = m. ints: [field slot, keep_2d,
// size slot or -1]. Every forward error is the Python op's, replayed.
class PartitionKernel : public RowSplit {
 public:
  explicit PartitionKernel(const KernelSpec& spec) : RowSplit(spec, 3), size_(static_cast<int>(spec.ints[2])) {
    if (size_ < -1 || size_ >= spec.n_slots) throw SpecError("a Partition's size slot is out of range");
  }

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) {
      const Tensor& x = xs[i];
      if (states[i].has(field_) || (size_ >= 0 && states[i].has(size_))) replay();
      check_table(x, !keep_2d_);
      std::vector<std::pair<int64_t, int64_t>> order = pool_.get();
      addresses(x, &order);
      std::sort(order.begin(), order.end());  // by address, then row: np.argsort(kind="stable")
      const int64_t k = x.dim(1) - 1;
      const size_t item = itemsize(x.dtype());
      int64_t groups = 0;
      for (size_t a = 0; a < order.size();) {
        size_t b = a;
        while (b < order.size() && order[b].first == order[a].first) ++b;
        const int64_t m = static_cast<int64_t>(b - a);
        Tensor part = keep_2d_ ? Tensor::empty(x.dtype(), {m, k}) : Tensor::empty(x.dtype(), {m});
        char* dst = part.data<char>();
        for (size_t r = a; r < b; ++r)
          for (int64_t j = 0; j < k; ++j, dst += item)
            std::memcpy(dst, x.data<char>() + (order[r].second * x.stride(0) + (j + 1) * x.stride(1)) * item, item);
        State s = states[i];
        s.set(field_, order[a].first);
        if (size_ >= 0) s.set(size_, m);
        out.push(0, part, s);
        ++groups;
        a = b;
      }
      if (ctx.train && groups) {
        RowGradients& e = cache_.emplace(states[i]);
        e.rows = x.dim(0);
        e.cols = x.dim(1);
        e.order = std::move(order);
        e.remaining = groups;
      } else {
        pool_.put(std::move(order));
      }
    }
  }

 private:
  std::string kind_name() const override { return "Partition"; }
  void erase_written(State* s) const override {
    s->erase(field_);
    if (size_ >= 0) s->erase(size_);
  }
  int size_;
};
AMP_REGISTER_KERNEL("partition", PartitionKernel);

constexpr int64_t kMaxMembers = int64_t(1) << 24;  // a group's slots are allocated when it opens

// Collect (dynamic.Collect): messages of one key whose `key` expression gives the same value form a group
// of `count` members (an int, or an expression on the first member's state), each in the slot its `index`
// expression gives. A complete group is concatenated in slot order along the last axis, or the first
// (axis 0), into one message whose state is slot 0's with `field` set to the group's value and the `drop`
// fields removed; the members' sizes along the axis and their states are cached under that state, and
// backward cuts the gradient into views, each sent with its member's state.
// ints: [field slot or -1, axis (0 or -1), count mode (0 fixed, 1 programs[2]), fixed count, n_drop,
//        drop slots...]; programs: [key, index, (count)].
// Errors of one message (a failing expression, a count or slot the op cannot use, members without rows)
// are the Python op's, replayed; those that depend on the members already waiting are native OpErrors
// with the Python op's words.
class CollectKernel : public Kernel {
 public:
  explicit CollectKernel(const KernelSpec& spec) : spec_(spec) {
    const auto& v = spec.ints;
    if (v.size() < 5 || v[0] < -1 || v[0] >= spec.n_slots || (v[1] != 0 && v[1] != -1) || v[2] < 0 || v[2] > 1 ||
        v[4] < 0 || static_cast<int64_t>(v.size()) != 5 + v[4] || spec.programs.size() != 2 + static_cast<size_t>(v[2]))
      throw SpecError("a Collect takes [field, axis, count mode, count, n_drop, drops...] and 2 or 3 programs");
    field_ = static_cast<int>(v[0]);
    axis0_ = v[1] == 0;
    fixed_ = v[2] == 0 ? v[3] : 0;
    for (int64_t i = 0; i < v[4]; ++i) {
      if (v[5 + i] < 0 || v[5 + i] >= spec.n_slots) throw SpecError("a Collect drops a slot out of range");
      drops_.push_back(static_cast<int>(v[5 + i]));
    }
  }

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    const Layout& layout = *ctx.layout;
    for (size_t i = 0; i < xs.size(); ++i) {
      const State& s = states[i];
      const Value value = run(0, s);
      const Value slot = run(1, s);
      State group;  // (key, value): the key id and the group's key value
      if (layout.key_slot >= 0 && s.has(layout.key_slot)) group.set(0, s.get(layout.key_slot));
      group.set(1, value.v);
      Members* m = waiting_.find(group);
      const int64_t n = m ? static_cast<int64_t>(m->slots.size()) : count(s, layout);
      if (slot.is_bool || slot.v < 0 || slot.v >= n) replay();
      if (axis0_ && xs[i].rank() < 2) replay();
      if (!m) {
        m = &waiting_.emplace(group);
        m->slots = pool_.get();
        m->slots.resize(static_cast<size_t>(n));
      }
      JoinSlot& taken = m->slots[slot.v];
      if (taken.got)
        throw OpError("Collect: slot " + std::to_string(slot.v) + " of group " + value_text(value.v, value.is_bool) +
                      " (key " + std::to_string(layout.key_of(s)) + ") is filled twice, by state " +
                      layout.describe(taken.state) + " and by " + layout.describe(s) +
                      "; members of a group need distinct index values", 0);
      taken = JoinSlot{true, xs[i], s};
      if (++m->got < n) continue;
      Members done = waiting_.take(group);
      emit(ctx, done.slots, value, out);
      pool_.put(std::move(done.slots));
    }
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      Sizes e = take_entry(cache_, states[i], *ctx.layout);
      const Tensor& g = gs[i];
      int64_t total = 0;
      for (const Member& mb : e.members) total += mb.size;
      const int axis = axis0_ ? 0 : g.rank() - 1;
      if (g.rank() == 0 || g.dim(axis) != total)
        throw OpError("Collect output 'out': expected a gradient of " + std::to_string(total) + " along axis " +
                      (axis0_ ? "0" : "-1") + ", got shape " + shape_text(g));
      int64_t at = 0;
      for (const Member& mb : e.members) {
        out.push(0, axis0_ ? g.rows(at, at + mb.size) : g.last_axis(at, at + mb.size), mb.state);
        at += mb.size;
      }
      sizes_pool_.put(std::move(e.members));
    }
  }

  size_t held() const override { return waiting_.size() + cache_.size(); }

 private:
  struct Members {
    std::vector<JoinSlot> slots;
    int64_t got = 0;
  };
  struct Member {
    int64_t size;
    State state;
  };
  struct Sizes {
    std::vector<Member> members;
  };

  Value run(int program, const State& s) const {
    Value v;
    EvalStatus status = evaluate(spec_.programs[program], s, &v);
    if (status != kOk) throw ExpressionFailure(program, status);
    return v;
  }
  int64_t count(const State& s, const Layout& layout) const {
    int64_t n = fixed_;
    if (n <= 0) {
      Value v = run(2, s);
      if (v.is_bool || v.v <= 0) replay();
      n = v.v;
    }
    if (n > kMaxMembers)
      throw OpError("Collect count gave " + std::to_string(n) + " on state " + layout.describe(s) +
                    "; a group holds at most " + std::to_string(kMaxMembers) + " members", 0);
    return n;
  }

  // The members' shapes agree but along the axis (Collect._check_shapes), then the merged message.
  void emit(NodeCtx& ctx, const std::vector<JoinSlot>& slots, const Value& value, Outputs& out) {
    const Layout& layout = *ctx.layout;
    const Tensor& lead = slots[0].x;
    const int r = lead.rank();
    if (!axis0_ && r == 0) throw OpError("Collect: members are scalars; zero-dimensional arrays cannot be concatenated", 0);
    DType dtype = lead.dtype();
    int64_t total = 0;
    for (size_t k = 0; k < slots.size(); ++k) {
      const Tensor& x = slots[k].x;
      bool same = x.rank() == r;
      for (int d = 0; same && d < r; ++d) same = d == (axis0_ ? 0 : r - 1) || x.dim(d) == lead.dim(d);
      if (!same) {
        const std::string which = axis0_ ? "trailing" : "leading";
        const std::string got = axis0_ ? shape_tuple(x.shape() + 1, x.rank() - 1)
                                       : shape_tuple(x.shape(), x.rank() ? x.rank() - 1 : 0);
        const std::string want = axis0_ ? shape_tuple(lead.shape() + 1, r - 1) : shape_tuple(lead.shape(), r - 1);
        throw OpError("Collect: member in slot " + std::to_string(k) + " (state " + layout.describe(slots[k].state) +
                      ") has " + which + " shape " + got + ", expected " + want + " (as slot 0); members are "
                      "concatenated along axis " + (axis0_ ? "0" : "-1"), 0);
      }
      total += x.dim(axis0_ ? 0 : r - 1);
      if (x.dtype() != dtype) dtype = promote(dtype, x.dtype());
    }
    State merged = slots[0].state;
    for (int d : drops_) merged.erase(d);
    if (field_ >= 0) merged.set(field_, value.v, value.is_bool);
    if (ctx.train) {
      bool inserted = false;
      Sizes& e = cache_.emplace(merged, &inserted);
      if (!inserted)
        throw OpError("Collect: two groups produced the same output state " + layout.describe(merged) +
                      " while the first is in flight; each group needs its own state: set a field to the key value "
                      "(field=...) or drop fewer fields", 0);
      e.members = sizes_pool_.get();
      for (const JoinSlot& m : slots) e.members.push_back(Member{m.x.dim(axis0_ ? 0 : r - 1), m.state});
    }
    out.push(0, concatenate(slots, dtype, total), merged);
  }

  // np.concatenate of the members along the axis, in the common dtype.
  Tensor concatenate(const std::vector<JoinSlot>& slots, DType dtype, int64_t total) const {
    const Tensor& lead = slots[0].x;
    int64_t shape[kMaxRank];
    for (int d = 0; d < lead.rank(); ++d) shape[d] = lead.dim(d);
    shape[axis0_ ? 0 : lead.rank() - 1] = total;
    Tensor y = Tensor::empty(dtype, shape, lead.rank());
    const size_t item = itemsize(dtype);
    if (axis0_) {  // members' rows one after another
      char* dst = y.data<char>();
      for (const JoinSlot& m : slots) {
        Tensor part = as_dtype(m.x, dtype).contiguous_copy();
        const size_t bytes = static_cast<size_t>(part.size()) * item;
        if (bytes) std::memcpy(dst, part.raw(), bytes);
        dst += bytes;
      }
      return y;
    }
    const int64_t rows = total ? y.size() / total : 0;  // the product of the leading axes
    int64_t at = 0;
    for (const JoinSlot& m : slots) {
      Tensor part = as_dtype(m.x, dtype).contiguous_copy();
      const int64_t w = part.dim(part.rank() - 1);
      for (int64_t r = 0; r < rows && w; ++r)
        std::memcpy(y.data<char>() + (r * total + at) * item, part.data<char>() + r * w * item, w * item);
      at += w;
    }
    return y;
  }

  KernelSpec spec_;
  int field_ = -1;
  bool axis0_ = false;
  int64_t fixed_ = 0;
  std::vector<int> drops_;
  StateMap<Members> waiting_;
  StateMap<Sizes> cache_;
  Pool<JoinSlot> pool_;
  Pool<Member> sizes_pool_;
};
AMP_REGISTER_KERNEL("collect", CollectKernel);

}  // namespace
}  // namespace amp
