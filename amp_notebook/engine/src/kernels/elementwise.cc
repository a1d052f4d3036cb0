// Elementwise kernels, the native twins of ir/ops/payload.py's ReLU, Tanh, Sigmoid (one input, "rows"
// bundling: one pass over the stacked rows) and Add, Sub, Mul (two inputs joined by state,
// "per_message"). The arithmetic is the Python op's, in the same order per element, so results agree to
// the rounding of tanh (float64: within 1e-12). Tanh and Sigmoid run vecmath.h's tanh on SIMD lanes, the
// one the fused cells use (within 2.3 ulp of the exact value; numpy's own vectorized tanh is within 1.3):
// the C library's is scalar, about 15 ns per item here against 1 (float32).
// Never touches Python, the inbox or other nodes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "kernels/kernel.h"
#include "kernels/vecmath.h"

namespace amp {

namespace {

// `a` if `take_a`, else `b`, bit for bit, with integer masks instead of a branch.
template <class G>
G select_bits(bool take_a, G a, G b) {
  using U = std::conditional_t<sizeof(G) == sizeof(uint32_t), uint32_t, uint64_t>;
  static_assert(sizeof(G) == sizeof(U), "a float or a double");
  U ua, ub;
  std::memcpy(&ua, &a, sizeof a);
  std::memcpy(&ub, &b, sizeof b);
  const U mask = U(0) - static_cast<U>(take_a);
  const U bits = (ua & mask) | (ub & ~mask);
  G out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// The function of one unary op: f(x) and df(x, y, g) per element, and whether an integer input stays
// integer (np.maximum(ints, 0) does; np.tanh of ints gives float64).
struct ReLUMath {
  static constexpr bool keeps_ints = true;
  template <class T>
  static T f(T x) { return (x >= 0 || x != x) ? x : T(0); }  // np.maximum(x, 0): NaN stays NaN
  template <class T>
  static void all(const T* x, T* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
  }
  template <class T, class G>
  // g * (x > 0), as numpy multiplies by a bool: g where x > 0, else g * 0 (-0 for a negative g, NaN for an
  // infinite one). Both are computed and the bits of one kept by a mask, so the loop vectorizes: written
  // as a conditional (or a multiply by the comparison), gcc makes it a branch, which mispredicts on half
  // of a ReLU's inputs and keeps the loop scalar (it may not if-convert a multiply that could trap).
  static G df(T x, T, G g) { return select_bits(x > T(0), g, g * G(0)); }
};

// tanh or the sigmoid of n contiguous items into y (not overlapping x), on SIMD lanes; compiled for each
// instruction set (vecmath.h).
template <class T, bool kSigmoid>
AMP_SIMD_CLONES void tanh_lanes(const T* x, T* y, int64_t n) {
  if (n <= 0) return;  // an empty payload: no pointer to read or write
  simd::blocks_over<T>(n, AMP_LANES {
    const typename simd::Lanes<T>::V v = simd::load(x + j, m);
    simd::store(y + j, kSigmoid ? simd::sigmoid<T>(v) : simd::tanh<T>(v), m);
  });
}

struct TanhMath {
  static constexpr bool keeps_ints = false;
  template <class T>
  static void all(const T* x, T* y, int64_t n) { tanh_lanes<T, false>(x, y, n); }
  template <class T, class G>
  static G df(T, T y, G g) { return g * (G(1) - G(y) * G(y)); }  // g * (1.0 - y * y)
};

struct SigmoidMath {  // tanh(x * 0.5) * 0.5 + 0.5, in the Python op's steps: never overflows
  static constexpr bool keeps_ints = false;
  template <class T>
  static void all(const T* x, T* y, int64_t n) { tanh_lanes<T, true>(x, y, n); }
  template <class T, class G>
  static G df(T, T y, G g) { return g * G(y) * (G(1) - G(y)); }  // g * y * (1.0 - y)
};

template <class Math, class T>
void apply_f(const Tensor& x, Tensor& y) {
  Math::template all<T>(x.data<T>(), y.data<T>(), x.size());
}

template <class Math, class T, class G>
void apply_df(const Tensor& x, const Tensor& y, const Tensor& g, Tensor& d) {
  const T* xd = x.data<T>();
  const T* yd = y.data<T>();
  const G* gd = g.data<G>();
  G* dd = d.data<G>();
  for (int64_t i = 0, n = x.size(); i < n; ++i) dd[i] = Math::template df<T, G>(xd[i], yd[i], gd[i]);
}

// _Elementwise (payload._Elementwise): y = f(x) over the stacked rows, (x, y) cached per state;
// backward df(x, y, g) over the stacked cached rows and gradients.
template <class Math>
class UnaryKernel : public Kernel {
 public:
  explicit UnaryKernel(const KernelSpec&) {}

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    std::vector<int64_t> offsets(xs.size() + 1);
    Tensor x = stack_rows(xs, offsets.data()).contiguous_copy();
    if (x.dtype() == DType::b8 || (x.dtype() == DType::i64 && !Math::keeps_ints)) x = as_dtype(x, DType::f64);
    Tensor y = Tensor::empty(x.dtype(), x.shape(), x.rank());
    switch (x.dtype()) {
      case DType::f64: apply_f<Math, double>(x, y); break;
      case DType::f32: apply_f<Math, float>(x, y); break;
      default:  // integers: only ReLU keeps them (the others took float64 above)
        if constexpr (Math::keeps_ints) apply_f<Math, int64_t>(x, y);
        else throw std::logic_error("integer payload reached a float-only elementwise op");
        break;
    }
    for (size_t i = 0; i < xs.size(); ++i) {
      Tensor yi = y.rows(offsets[i], offsets[i + 1]);
      if (ctx.train) cache_.emplace(states[i]) = Pair{x.rows(offsets[i], offsets[i + 1]), yi};
      out.push(0, yi, states[i]);
    }
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    std::vector<Tensor> xs, ys;
    for (const State& s : states) {
      bool found = false;
      Pair p = cache_.take(s, &found);
      if (!found) take_cached(empty_, s, *ctx.layout);  // throws the missing-cache error
      xs.push_back(p.x);
      ys.push_back(p.y);
    }
    std::vector<int64_t> offsets(gs.size() + 1);
    Tensor x = stack_rows(Span<const Tensor>(xs.data(), xs.size()), offsets.data()).contiguous_copy();
    Tensor y = stack_rows(Span<const Tensor>(ys.data(), ys.size()), offsets.data()).contiguous_copy();
    Tensor g = stack_rows(gs, offsets.data()).contiguous_copy();
    if (!x.same_shape(g))
      throw OpError("gradient of shape " + shape_text(g) + " for an output of shape " + shape_text(x));
    DType dtype = g.dtype() == DType::f32 && x.dtype() != DType::f64 ? DType::f32 : DType::f64;
    g = as_dtype(g, dtype);
    Tensor d = Tensor::empty(dtype, x.shape(), x.rank());
    if (dtype == DType::f64) {
      if (x.dtype() == DType::f64) apply_df<Math, double, double>(x, y, g, d);
      else if (x.dtype() == DType::f32) apply_df<Math, float, double>(x, y, g, d);
      else apply_df<Math, int64_t, double>(x, y, g, d);
    } else {
      if (x.dtype() == DType::f32) apply_df<Math, float, float>(x, y, g, d);
      else apply_df<Math, int64_t, float>(x, y, g, d);
    }
    for (size_t i = 0; i < gs.size(); ++i) out.push(0, d.rows(offsets[i], offsets[i + 1]), states[i]);
  }

  size_t held() const override { return cache_.size(); }

 private:
  struct Pair {
    Tensor x, y;
  };
  StateMap<Pair> cache_;
  StateMap<Tensor> empty_;
};

using ReLUKernel = UnaryKernel<ReLUMath>;
using TanhKernel = UnaryKernel<TanhMath>;
using SigmoidKernel = UnaryKernel<SigmoidMath>;
AMP_REGISTER_KERNEL("relu", ReLUKernel);
AMP_REGISTER_KERNEL("tanh", TanhKernel);
AMP_REGISTER_KERNEL("sigmoid", SigmoidKernel);

// The arithmetic of one binary op on equal shapes: out = f(a, b); (ga, gb) = df(a, b, g).
struct AddMath {
  template <class T>
  static T f(T a, T b) { return a + b; }
  template <class T>
  static void df(T, T, T g, T* ga, T* gb) { *ga = g; *gb = g; }
};
struct SubMath {
  template <class T>
  static T f(T a, T b) { return a - b; }
  template <class T>
  static void df(T, T, T g, T* ga, T* gb) { *ga = g; *gb = -g; }
};
struct MulMath {
  template <class T>
  static T f(T a, T b) { return a * b; }
  template <class T>
  static void df(T a, T b, T g, T* ga, T* gb) { *ga = g * b; *gb = g * a; }
};

// _Binary (payload._Binary): `a` and `b` of equal shape, joined by state (or key + match_on); the
// output and the cache entry take a's state; backward sends each input its gradient with its own state.
template <class Math, const char* Name>
class BinaryKernel : public Kernel {
 public:
  explicit BinaryKernel(const KernelSpec& spec) : joins_(spec) {}

  void forward(NodeCtx& ctx, int port, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i) {
      JoinEntry got;
      if (!joins_.add(port, xs[i], states[i], 2, *ctx.layout, &got)) continue;
      const JoinSlot& a = got.slot[0];
      const JoinSlot& b = got.slot[1];
      if (!a.x.same_shape(b.x))
        throw OpError(std::string(Name) + ": inputs 'a' " + shape_text(a.x) + " and 'b' " + shape_text(b.x) +
                      " differ in shape");
      DType dtype = promote(a.x.dtype(), b.x.dtype());
      Tensor av = as_dtype(a.x, dtype).contiguous_copy(), bv = as_dtype(b.x, dtype).contiguous_copy();
      Tensor y = Tensor::empty(dtype, av.shape(), av.rank());
      if (dtype == DType::f64) each<double>(av, bv, y);
      else each<float>(av, bv, y);
      if (ctx.train) cache_.emplace(a.state) = Entry{av, bv, a.state, b.state};
      out.push(0, y, a.state);
    }
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < gs.size(); ++i) {
      bool found = false;
      Entry e = cache_.take(states[i], &found);
      if (!found) take_cached(empty_, states[i], *ctx.layout);  // throws the missing-cache error
      DType dtype = promote(e.a.dtype(), gs[i].dtype());
      Tensor g = as_dtype(gs[i], dtype).contiguous_copy();
      Tensor a = as_dtype(e.a, dtype), b = as_dtype(e.b, dtype);
      Tensor ga = Tensor::empty(dtype, g.shape(), g.rank()), gb = Tensor::empty(dtype, g.shape(), g.rank());
      if (dtype == DType::f64) grads<double>(a, b, g, ga, gb);
      else grads<float>(a, b, g, ga, gb);
      out.push(0, ga, e.sa);
      out.push(1, gb, e.sb);
    }
  }

  size_t held() const override { return cache_.size() + joins_.size(); }

 private:
  struct Entry {
    Tensor a, b;
    State sa, sb;
  };
  template <class T>
  static void each(const Tensor& a, const Tensor& b, Tensor& y) {
    for (int64_t i = 0, n = a.size(); i < n; ++i) y.data<T>()[i] = Math::f(a.data<T>()[i], b.data<T>()[i]);
  }
  template <class T>
  static void grads(const Tensor& a, const Tensor& b, const Tensor& g, Tensor& ga, Tensor& gb) {
    for (int64_t i = 0, n = g.size(); i < n; ++i)
      Math::df(a.data<T>()[i], b.data<T>()[i], g.data<T>()[i], ga.data<T>() + i, gb.data<T>() + i);
  }
  Joins joins_;
  StateMap<Entry> cache_;
  StateMap<Tensor> empty_;
};

constexpr char kAdd[] = "Add";
constexpr char kSub[] = "Sub";
constexpr char kMul[] = "Mul";
using AddKernel = BinaryKernel<AddMath, kAdd>;
using SubKernel = BinaryKernel<SubMath, kSub>;
using MulKernel = BinaryKernel<MulMath, kMul>;
AMP_REGISTER_KERNEL("add", AddKernel);
AMP_REGISTER_KERNEL("sub", SubKernel);
AMP_REGISTER_KERNEL("mul", MulKernel);

}  // namespace
}  // namespace amp
