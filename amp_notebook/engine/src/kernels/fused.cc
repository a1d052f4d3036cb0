// Fused cell kernels, the native twins of ir/ops/fused.py: TreeLSTMLeaf, TreeLSTMBranch, GRUUpdate,
// LSTMStart and LSTMUpdate, the elementwise part of one recurrent cell as one node. The ints of a spec:
// [hidden].
//
// One generic kernel (CellKernel) does the messaging for every cell: the join of its inputs by state
// (kernel.h Joins; a one-input cell completes at once), the checks the Python op makes, one output array
// for all the complete groups of a bundle (their rows side by side: the "rows" bundling without stacking
// the inputs, since every row is computed on its own), what it keeps for backward, and the gradients.
// Each cell (a struct below) brings its widths and two functions of one row, forward and backward,
// written once over SIMD lanes (vecmath.h) for float32 and float64; `pass` runs them over the rows,
// compiled for each instruction set. They are pure (outputs never alias inputs), so a row's last vector
// may overlap the one before it (simd::blocks_over) instead of ending in a partial one.
//
// Each row function is the Python op's arithmetic, operation by operation in the same order (products
// and sums round one at a time as numpy's do), so outputs and gradients equal the Python op's to the last
// bits of tanh (float64: within 1e-12). A pass reads its inputs in place (rows may be strided, items along
// a row contiguous) and writes the output and what backward needs (`save`) in one go; backward reads the
// saved rows and the inputs the cell kept (children's cells, h_gates, h, c: references, not copies).
// Per bundle: one output array, one saved array for training keys (scratch otherwise), one array per
// input gradient; nothing per element or per message besides the cache entry.
// Never touches Python, the inbox or other nodes.
#include <array>
#include <string>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/vecmath.h"

namespace amp {

namespace {

using simd::load;
using simd::store;

template <class T>
struct Rows {  // a 2-d array whose items along a row are contiguous; row r starts at p + r * ld
  T* p = nullptr;
  int64_t ld = 0;
  T* row(int64_t r) const { return p ? p + r * ld : nullptr; }
};

// What a pass reads and writes, for `rows` rows of hidden width H, as whole arrays (Args) and as the
// pointers of one row (Row) that a cell's row functions take.
template <class T>
struct Args {
  Rows<const T> in[3];  // forward: the joined inputs, by port; backward: the inputs the cell kept
  Rows<T> out;          // forward: the output
  Rows<T> save;         // forward: what backward needs
  Rows<const T> saved;  // backward: that, read back
  Rows<const T> g;      // backward: the output's gradient
  Rows<T> grad[3];      // backward: the inputs' gradients, by port
  int64_t rows = 0, H = 0;
};
template <class T>
struct Row {
  const T* in[3];
  T* out;
  T* save;
  const T* saved;
  const T* g;
  T* grad[3];
};

template <class T>
using Vec = typename simd::Lanes<T>::V;

// Store lanes [j, j + m) of each vector into consecutive blocks of H items from p: the first at p, the
// next at p + H, and so on (a row's gate blocks, or its saved blocks, in order).
template <class T, class... V>
AMP_INLINE void store_blocks(int64_t H, int64_t j, int64_t m, T* p, const V&... vs) {
  int64_t k = 0;
  (store(p + (k++) * H + j, vs, m), ...);
}

// A cell from the zero state: its gates hold blocks i, o and a candidate u (at block kO and kU of kWidth;
// any other block multiplies the zero cell and gets a zero gradient) -> [h; c] with c = sigmoid(i) *
// tanh(u), h = sigmoid(o) * tanh(c); saved [s_i, s_o, tanh(u), tanh(c)]. Backward, with dc = g_c + g_h *
// s_o * (1 - tc^2): d_i = dc * tu * s'(i), d_o = g_h * tc * s'(o), d_u = dc * s_i * (1 - tu^2), where the
// slope s' = s (1 - s) is one factor (kSlopeFirst) or two applied left to right, as each Python op groups it.
template <const char* Name, int kWidth, int kO, int kU, bool kSlopeFirst>
struct FromZero {
  static constexpr const char* kName = Name;
  static constexpr int kPorts = 1;
  static constexpr int kIn[3] = {kWidth, 0, 0};  // input widths, in hidden units
  static constexpr int kOut = 2, kSaved = 4;
  static constexpr bool kKeep[3] = {false, false, false};  // inputs that backward reads
  static constexpr bool kSharedGrad = false;  // input 1 gets input 0's gradient array

  template <class T>
  static AMP_INLINE void forward(const Row<T>& w, int64_t H) {
    const T* z = w.in[0];
    simd::blocks_over<T>(H, AMP_LANES {
      const Vec<T> si = simd::sigmoid<T>(load(z + j, m)), so = simd::sigmoid<T>(load(z + kO * H + j, m));
      const Vec<T> tu = simd::tanh<T>(load(z + kU * H + j, m));
      const Vec<T> c = si * tu;
      const Vec<T> tc = simd::tanh<T>(c);
      store_blocks(H, j, m, w.out, so * tc, c);
      store_blocks(H, j, m, w.save, si, so, tu, tc);
    });
  }

  template <class T>
  static AMP_INLINE void backward(const Row<T>& w, int64_t H) {
    const T* g = w.g;
    const T* sv = w.saved;
    T* d = w.grad[0];
    simd::blocks_over<T>(H, AMP_LANES {
      const Vec<T> gh = load(g + j, m), si = load(sv + j, m), so = load(sv + H + j, m);
      const Vec<T> tu = load(sv + 2 * H + j, m), tc = load(sv + 3 * H + j, m);
      const Vec<T> dc = load(g + H + j, m) + gh * so * (T(1) - tc * tc);
      if constexpr (kSlopeFirst) {
        store(d + j, dc * tu * (si * (T(1) - si)), m);
        store(d + kO * H + j, gh * tc * (so * (T(1) - so)), m);
      } else {
        store(d + j, dc * tu * si * (T(1) - si), m);
        store(d + kO * H + j, gh * tc * so * (T(1) - so), m);
      }
      store(d + kU * H + j, dc * si * (T(1) - tu * tu), m);
      for (int k = 1; k < kWidth; ++k)
        if (k != kO && k != kU) store(d + k * H + j, Vec<T>{}, m);
    });
  }
};

constexpr char kLeafName[] = "TreeLSTMLeaf";
constexpr char kStartName[] = "LSTMStart";
// TreeLSTMLeaf (fused.TreeLSTMLeaf): gates [i, o, u].
using Leaf = FromZero<kLeafName, 3, 1, 2, true>;
// LSTMStart (fused.LSTMStart): step 0 of an LSTM, gates [i, f, g, o] (torch.nn.LSTMCell's order); f
// multiplies the zero cell.
using Start = FromZero<kStartName, 4, 3, 2, false>;

// TreeLSTMBranch (fused.TreeLSTMBranch): gates [i, f_l, f_r, o, u], c_left, c_right -> [h; c] with
// c = s_i * tanh(u) + s_fl * c_left + s_fr * c_right (summed left to right), h = s_o * tanh(c); saved
// [s_i, s_fl, s_fr, s_o, tanh(u), tanh(c)], the children's cells kept. Backward, with dc as the leaf's:
// d_i = dc * tu * s', d_fl = dc * c_left * s', d_fr = dc * c_right * s', d_o = g_h * tc * s' (s' = s (1 - s)
// of each gate), d_u = dc * s_i * (1 - tu^2); the children get dc * s_fl and dc * s_fr.
struct Branch {
  static constexpr const char* kName = "TreeLSTMBranch";
  static constexpr int kPorts = 3;
  static constexpr int kIn[3] = {5, 1, 1};
  static constexpr int kOut = 2, kSaved = 6;
  static constexpr bool kKeep[3] = {false, true, true};
  static constexpr bool kSharedGrad = false;

  template <class T>
  static AMP_INLINE void forward(const Row<T>& w, int64_t H) {
    const T* z = w.in[0];
    const T* cl = w.in[1];
    const T* cr = w.in[2];
    simd::blocks_over<T>(H, AMP_LANES {
      const Vec<T> si = simd::sigmoid<T>(load(z + j, m)), sl = simd::sigmoid<T>(load(z + H + j, m));
      const Vec<T> sr = simd::sigmoid<T>(load(z + 2 * H + j, m)), so = simd::sigmoid<T>(load(z + 3 * H + j, m));
      const Vec<T> tu = simd::tanh<T>(load(z + 4 * H + j, m));
      const Vec<T> c = si * tu + sl * load(cl + j, m) + sr * load(cr + j, m);
      const Vec<T> tc = simd::tanh<T>(c);
      store_blocks(H, j, m, w.out, so * tc, c);
      store_blocks(H, j, m, w.save, si, sl, sr, so, tu, tc);
    });
  }

  template <class T>
  static AMP_INLINE void backward(const Row<T>& w, int64_t H) {
    const T* g = w.g;
    const T* sv = w.saved;
    const T* cl = w.in[1];
    const T* cr = w.in[2];
    T* d = w.grad[0];
    T* dl = w.grad[1];
    T* dr = w.grad[2];
    simd::blocks_over<T>(H, AMP_LANES {
      const Vec<T> gh = load(g + j, m), si = load(sv + j, m), sl = load(sv + H + j, m);
      const Vec<T> sr = load(sv + 2 * H + j, m), so = load(sv + 3 * H + j, m);
      const Vec<T> tu = load(sv + 4 * H + j, m), tc = load(sv + 5 * H + j, m);
      const Vec<T> dc = load(g + H + j, m) + gh * so * (T(1) - tc * tc);
      store_blocks(H, j, m, d,
                   dc * tu * (si * (T(1) - si)),                   // i
                   dc * load(cl + j, m) * (sl * (T(1) - sl)),      // f_l
                   dc * load(cr + j, m) * (sr * (T(1) - sr)),      // f_r
                   gh * tc * (so * (T(1) - so)),                   // o
                   dc * si * (T(1) - tu * tu));                    // u
      store(dl + j, dc * sl, m);
      store(dr + j, dc * sr, m);
    });
  }
};

// GRUUpdate (fused.GRUUpdate), torch.nn.GRUCell's gates r, z, n from x_gates [xr, xz, xn] and h_gates
// [hr, hz, hn]: r = sigmoid(xr + hr), z = sigmoid(xz + hz), n = tanh(xn + r * hn), h' = n + z * (h - n);
// saved [r, z, n], h_gates and h kept (h - n is recomputed: the same bits). Backward, with
// g_z = g * z and dn = (1 - n^2) * (g - g_z): x_gates get [dn * hn * (1 - r) r, g * (h - n) * (1 - z) z,
// dn], h_gates the same with dn * r last, h gets g_z.
struct GRU {
  static constexpr const char* kName = "GRUUpdate";
  static constexpr int kPorts = 3;
  static constexpr int kIn[3] = {3, 3, 1};
  static constexpr int kOut = 1, kSaved = 3;
  static constexpr bool kKeep[3] = {false, true, true};
  static constexpr bool kSharedGrad = false;

  template <class T>
  static AMP_INLINE void forward(const Row<T>& w, int64_t H) {
    const T* xg = w.in[0];
    const T* hg = w.in[1];
    const T* h = w.in[2];
    simd::blocks_over<T>(H, AMP_LANES {
      const Vec<T> rg = simd::sigmoid<T>(load(xg + j, m) + load(hg + j, m));
      const Vec<T> zg = simd::sigmoid<T>(load(xg + H + j, m) + load(hg + H + j, m));
      const Vec<T> n = simd::tanh<T>(load(xg + 2 * H + j, m) + rg * load(hg + 2 * H + j, m));
      store(w.out + j, n + zg * (load(h + j, m) - n), m);
      store_blocks(H, j, m, w.save, rg, zg, n);
    });
  }

  template <class T>
  static AMP_INLINE void backward(const Row<T>& w, int64_t H) {
    const T* g = w.g;
    const T* sv = w.saved;
    const T* hg = w.in[1];
    const T* h = w.in[2];
    T* dx = w.grad[0];
    T* dh = w.grad[1];
    T* dprev = w.grad[2];
    simd::blocks_over<T>(H, AMP_LANES {
      const Vec<T> gv = load(g + j, m), rg = load(sv + j, m), zg = load(sv + H + j, m), n = load(sv + 2 * H + j, m);
      const Vec<T> gz = gv * zg;
      const Vec<T> dn = (T(1) - n * n) * (gv - gz);
      const Vec<T> dr = dn * load(hg + 2 * H + j, m) * ((T(1) - rg) * rg);
      const Vec<T> dz = gv * (load(h + j, m) - n) * ((T(1) - zg) * zg);
      store_blocks(H, j, m, dx, dr, dz, dn);
      store_blocks(H, j, m, dh, dr, dz, dn * rg);
      store(dprev + j, gz, m);
    });
  }
};

// LSTMUpdate (fused.LSTMUpdate), torch.nn.LSTMCell after step 0: z = x_gates + h_gates = [i, f, g, o],
// c' = s_f * c + s_i * tanh(g), h' = s_o * tanh(c') -> [h'; c']; saved [s_i, s_f, s_o, tanh(g), tanh(c')],
// c kept. Backward, with dc as the leaf's: d_i = dc * tg * (1 - s_i) s_i, d_f = dc * c * (1 - s_f) s_f,
// d_g = dc * s_i * (1 - tg^2), d_o = g_h * tc * (1 - s_o) s_o; x_gates and h_gates get that one array, c
// gets dc * s_f.
struct Update {
  static constexpr const char* kName = "LSTMUpdate";
  static constexpr int kPorts = 3;
  static constexpr int kIn[3] = {4, 4, 1};
  static constexpr int kOut = 2, kSaved = 5;
  static constexpr bool kKeep[3] = {false, false, true};
  static constexpr bool kSharedGrad = true;

  template <class T>
  static AMP_INLINE void forward(const Row<T>& w, int64_t H) {
    const T* xg = w.in[0];
    const T* hg = w.in[1];
    const T* c = w.in[2];
    simd::blocks_over<T>(H, AMP_LANES {
      const Vec<T> si = simd::sigmoid<T>(load(xg + j, m) + load(hg + j, m));
      const Vec<T> sf = simd::sigmoid<T>(load(xg + H + j, m) + load(hg + H + j, m));
      const Vec<T> tg = simd::tanh<T>(load(xg + 2 * H + j, m) + load(hg + 2 * H + j, m));
      const Vec<T> so = simd::sigmoid<T>(load(xg + 3 * H + j, m) + load(hg + 3 * H + j, m));
      const Vec<T> cn = sf * load(c + j, m) + si * tg;
      const Vec<T> tc = simd::tanh<T>(cn);
      store_blocks(H, j, m, w.out, so * tc, cn);
      store_blocks(H, j, m, w.save, si, sf, so, tg, tc);
    });
  }

  template <class T>
  static AMP_INLINE void backward(const Row<T>& w, int64_t H) {
    const T* g = w.g;
    const T* sv = w.saved;
    const T* c = w.in[2];
    T* d = w.grad[0];
    T* dprev = w.grad[2];
    simd::blocks_over<T>(H, AMP_LANES {
      const Vec<T> gh = load(g + j, m), si = load(sv + j, m), sf = load(sv + H + j, m);
      const Vec<T> so = load(sv + 2 * H + j, m), tg = load(sv + 3 * H + j, m), tc = load(sv + 4 * H + j, m);
      const Vec<T> dc = load(g + H + j, m) + gh * so * (T(1) - tc * tc);
      store_blocks(H, j, m, d,
                   dc * tg * ((T(1) - si) * si),                   // i
                   dc * load(c + j, m) * ((T(1) - sf) * sf),       // f
                   dc * si * (T(1) - tg * tg),                     // g
                   gh * tc * ((T(1) - so) * so));                  // o
      store(dprev + j, dc * sf, m);
    });
  }
};

// The passes, compiled once per instruction set (vecmath.h AMP_SIMD_CLONES).
template <class Cell, bool kForward, class T>
AMP_SIMD_CLONES void pass(const Args<T>& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    const Row<T> w{{a.in[0].row(r), a.in[1].row(r), a.in[2].row(r)}, a.out.row(r), a.save.row(r), a.saved.row(r),
                   a.g.row(r), {a.grad[0].row(r), a.grad[1].row(r), a.grad[2].row(r)}};
    if constexpr (kForward) Cell::template forward<T>(w, a.H);
    else Cell::template backward<T>(w, a.H);
  }
}

template <class T>
constexpr DType dtype_of() {
  return sizeof(T) == 8 ? DType::f64 : DType::f32;
}

// `x` as rows a pass can read: itself when it has `dtype` and contiguous items along its rows, else a
// contiguous copy in `dtype` (numpy's cast) made into `copy`.
const Tensor& readable(const Tensor& x, DType dtype, Tensor* copy) {
  if (x.dtype() == dtype && (x.rank() < 2 || x.dim(1) <= 1 || x.stride(1) == 1)) return x;
  *copy = as_dtype(x, dtype).contiguous_copy();
  return *copy;
}

template <class T>
Rows<const T> rows_of(const Tensor& x) {
  return {x.data<const T>(), x.rank() ? x.stride(0) : 0};
}

// The messaging of every cell (see the opening comment). `Cell` gives the name, ports, widths (in hidden
// units), which inputs backward reads, and the passes.
template <class Cell>
class CellKernel : public Kernel {
 public:
  explicit CellKernel(const KernelSpec& spec) : joins_(spec), names_(spec.in_names) {
    if (spec.ints.size() != 1 || spec.ints[0] < 1)
      throw SpecError(std::string(Cell::kName) + " takes ints [hidden], hidden >= 1");
    if (static_cast<int>(spec.in_names.size()) != Cell::kPorts)
      throw SpecError(std::string(Cell::kName) + " has " + std::to_string(Cell::kPorts) + " input ports");
    H_ = spec.ints[0];
  }

  void forward(NodeCtx& ctx, int port, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    groups_.clear();
    if (Cell::kPorts == 1) {  // nothing to join: each message is a group
      for (size_t i = 0; i < xs.size(); ++i) groups_.push_back(Group{{&xs[i]}, {&states[i]}});
    } else {
      for (size_t i = 0; i < xs.size(); ++i) {
        JoinEntry got;
        if (!joins_.add(port, xs[i], states[i], Cell::kPorts, *ctx.layout, &got)) continue;
        joined_.push_back(std::move(got));
      }
      for (const JoinEntry& e : joined_) {
        Group g;
        for (int p = 0; p < Cell::kPorts; ++p) {
          g.x[p] = &e.slot[p].x;
          g.state[p] = &e.slot[p].state;
        }
        groups_.push_back(g);
      }
    }
    if (!groups_.empty()) {
      bool f32 = true;
      int64_t total = 0;
      for (const Group& g : groups_) {
        total += checked_rows(g);
        for (int p = 0; p < Cell::kPorts; ++p) f32 = f32 && g.x[p]->dtype() == DType::f32;
      }
      if (f32) forward_as<float>(ctx, total, out);
      else forward_as<double>(ctx, total, out);
    }
    groups_.clear();
    joined_.clear();
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    taken_.clear();
    for (const State& s : states) {
      bool found = false;
      taken_.push_back(cache_.take(s, &found));
      if (!found) take_cached(empty_, s, *ctx.layout);  // throws the missing-cache error
    }
    bool f32 = true;
    int64_t total = 0;
    for (size_t i = 0; i < gs.size(); ++i) {
      const Tensor& g = gs[i];
      const Tensor& saved = taken_[i].saved;
      if (g.rank() != 2 || g.dim(0) != saved.dim(0) || g.dim(1) != Cell::kOut * H_)
        throw OpError(std::string(Cell::kName) + ": a gradient of shape " + shape_text(g) +
                      " for an output of shape (" + std::to_string(saved.dim(0)) + ", " +
                      std::to_string(Cell::kOut * H_) + ")");
      f32 = f32 && g.dtype() == DType::f32 && saved.dtype() == DType::f32;
      total += g.dim(0);
    }
    if (f32) backward_as<float>(ctx, gs, states, total, out);
    else backward_as<double>(ctx, gs, states, total, out);
    taken_.clear();
  }

  size_t held() const override { return cache_.size() + joins_.size(); }

 private:
  struct Entry {
    Tensor saved;                                 // this message's rows of the bundle's saved array
    std::array<Tensor, Cell::kPorts - 1> kept;    // inputs 1.. that backward reads (Cell::kKeep)
    std::array<State, Cell::kPorts - 1> state;    // the states inputs 1.. arrived with: their gradients go back
  };
  struct Group {  // the inputs of one complete group, by port (pointers into the bundle or joined_)
    const Tensor* x[3];
    const State* state[3];
  };

  // The Python op's checks (_check_rows), in its order: each input 2-d of its width, as many rows as the first.
  int64_t checked_rows(const Group& g) const {
    int64_t rows = -1;
    for (int p = 0; p < Cell::kPorts; ++p) {
      const Tensor& x = *g.x[p];
      const int64_t width = Cell::kIn[p] * H_;
      const std::string where = std::string(Cell::kName) + " input '" + names_[p] + "': ";
      if (x.rank() != 2 || x.dim(1) != width)
        throw OpError(where + "expected shape (n, " + std::to_string(width) + "), got " + shape_text(x), p);
      if (rows >= 0 && x.dim(0) != rows)
        throw OpError(where + "expected " + std::to_string(rows) + " rows (as the other inputs), got " +
                      std::to_string(x.dim(0)), p);
      rows = x.dim(0);
    }
    return rows;
  }

  template <class T>
  void forward_as(NodeCtx& ctx, int64_t total, Outputs& out) {
    constexpr DType dtype = dtype_of<T>();
    const int64_t out_w = Cell::kOut * H_, save_w = Cell::kSaved * H_;
    Tensor y = Tensor::empty(dtype, {total, out_w});
    Tensor saved;
    if (ctx.train) {
      saved = Tensor::empty(dtype, {total, save_w});
    } else {  // the pass writes what backward would need; not training, into scratch reused per group
      int64_t most = 0;
      for (const Group& g : groups_) most = g.x[0]->dim(0) > most ? g.x[0]->dim(0) : most;
      if (scratch_.size() < static_cast<size_t>(most * save_w)) scratch_.resize(static_cast<size_t>(most * save_w));
    }
    out.items.reserve(out.items.size() + groups_.size());
    int64_t at = 0;
    for (const Group& g : groups_) {
      Args<T> a;
      a.rows = g.x[0]->dim(0);
      a.H = H_;
      Tensor copies[3];
      const Tensor* in[3];
      for (int p = 0; p < Cell::kPorts; ++p) {
        in[p] = &readable(*g.x[p], dtype, &copies[p]);
        a.in[p] = rows_of<T>(*in[p]);
      }
      a.out = {y.data<T>() + at * out_w, out_w};
      a.save = {ctx.train ? saved.data<T>() + at * save_w : reinterpret_cast<T*>(scratch_.data()), save_w};
      pass<Cell, true, T>(a);
      const State& state = *g.state[0];
      if (ctx.train) {
        Entry& c = cache_.emplace(state);
        c.saved = saved.rows(at, at + a.rows);
        for (int p = 1; p < Cell::kPorts; ++p) {
          c.state[p - 1] = *g.state[p];
          if (Cell::kKeep[p]) c.kept[p - 1] = *in[p];
        }
      }
      out.push(0, y.rows(at, at + a.rows), state);
      at += a.rows;
    }
  }

  template <class T>
  void backward_as(NodeCtx& ctx, Span<const Tensor> gs, Span<const State> states, int64_t total, Outputs& out) {
    constexpr DType dtype = dtype_of<T>();
    Tensor grads[3];
    for (int p = 0; p < Cell::kPorts; ++p)
      grads[p] = Cell::kSharedGrad && p == 1 ? grads[0] : Tensor::empty(dtype, {total, Cell::kIn[p] * H_});
    out.items.reserve(out.items.size() + gs.size() * Cell::kPorts);
    int64_t at = 0;
    for (size_t i = 0; i < gs.size(); ++i) {
      Entry& e = taken_[i];
      Args<T> a;
      a.rows = gs[i].dim(0);
      a.H = H_;
      Tensor copies[4];
      a.g = rows_of<T>(readable(gs[i], dtype, &copies[3]));
      a.saved = rows_of<T>(readable(e.saved, dtype, &copies[0]));
      for (int p = 1; p < Cell::kPorts; ++p)
        if (Cell::kKeep[p]) a.in[p] = rows_of<T>(readable(e.kept[p - 1], dtype, &copies[p]));
      for (int p = 0; p < Cell::kPorts; ++p) {
        const int64_t w = Cell::kIn[p] * H_;
        a.grad[p] = {grads[p].data<T>() + at * w, w};
      }
      pass<Cell, false, T>(a);
      for (int p = 0; p < Cell::kPorts; ++p)
        if (ctx.wants_grad(p)) out.push(p, grads[p].rows(at, at + a.rows), p == 0 ? states[i] : e.state[p - 1]);
      at += a.rows;
    }
  }

  Joins joins_;
  std::vector<std::string> names_;
  int64_t H_ = 0;
  StateMap<Entry> cache_;
  StateMap<Tensor> empty_;
  std::vector<JoinEntry> joined_;  // the complete joins of the bundle at hand (kept: no allocation per call)
  std::vector<Group> groups_;      // the groups to compute: the messages themselves, or the joins
  std::vector<Entry> taken_;       // the cache entries of the backward bundle at hand
  std::vector<double> scratch_;    // the saved rows of a forward that does not train
};

using TreeLSTMLeafKernel = CellKernel<Leaf>;
using TreeLSTMBranchKernel = CellKernel<Branch>;
using GRUUpdateKernel = CellKernel<GRU>;
using LSTMStartKernel = CellKernel<Start>;
using LSTMUpdateKernel = CellKernel<Update>;
AMP_REGISTER_KERNEL("tree_lstm_leaf", TreeLSTMLeafKernel);
AMP_REGISTER_KERNEL("tree_lstm_branch", TreeLSTMBranchKernel);
AMP_REGISTER_KERNEL("gru_update", GRUUpdateKernel);
AMP_REGISTER_KERNEL("lstm_start", LSTMStartKernel);
AMP_REGISTER_KERNEL("lstm_update", LSTMUpdateKernel);

}  // namespace
}  // namespace amp
