// Vector math for the row-wise kernels (fused.cc, norm.cc, elementwise.cc's Tanh and Sigmoid): tanh and
// the logistic sigmoid on SIMD lanes, loads and stores with a partial tail, numpy's pairwise sum, and the
// attribute that compiles a loop once per instruction set (AVX-512, AVX2, baseline SSE2) and picks the one
// the CPU runs at load time.
//
// Why our own tanh: the cells and the activations spend most of their time in tanh (a sigmoid is one
// tanh), and the C library's tanh is scalar, ten or more times slower per element than numpy's
// vectorized one (measured here: 15 ns per float32 item against 1 with AVX2). The
// formula, the same for float64 and float32:
//
//   tanh(x) = sign(x) * e / (e + 2),   e = expm1(2|x|)          (|x| clamped where tanh(x) rounds to 1)
//   expm1(y) = 2^n * p + (2^n - 1),    n = round(y / ln 2),  r = y - n ln 2 (ln 2 in two parts, exact n ln 2_hi),
//                                       p = expm1(r) = r + r^2 (1/2! + r/3! + ... + r^11/13!)   (|r| <= ln2/2)
//
// The Taylor series is cut where its remainder is below a quarter of an ulp (degree 13 for float64, 7
// for float32), so p is as exact as its rounding; 2^n * p + (2^n - 1) has no cancellation since y >= 0.
// Near 0 the quotient is e/(e+2) ~ y/2 with e accurate to its last bits, so the result stays accurate in
// relative terms down to subnormals (no branch for small |x|). Measured against long double over 440,000
// points from -25 to 25 and down to 1e-300: at most 2.3 ulp in float64 and 2.0 in float32 (numpy's own
// tanh: 1.2 and 1.3; tests/engine/test_cells.py holds ours to 3); NaN stays NaN, +-inf give +-1, -0 gives
// -0. sigmoid(x) is 0.5 * tanh(0.5 x) + 0.5 in exactly the steps of the Python Sigmoid (payload.Sigmoid.f),
// so it never overflows.
//
// No branch depends on the data, so every lane runs the same instructions: GCC's vector extensions carry
// the lanes (8 float64 / 16 float32 per vector; the compiler splits them into what the target has).
// Without FMA contraction (turned off below) every instruction set gives the same bits. The two selects
// (the clamp, NaN kept) are integer masks, not a comparison and `?:`: GCC 12 splits arithmetic on a
// 64-byte vector into the target's halves, but lowers a comparison or a select on one it cannot hold
// whole (AVX2, SSE2) lane by lane into scalar code, which made this tanh ~4x slower there (measured:
// 3.9 against 1.0 ns per float32 item with AVX2; the bits are the same).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(AMP_NO_CLONES)
#define AMP_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define AMP_SIMD_CLONES
#endif
#define AMP_INLINE inline __attribute__((always_inline))
// The head of a lambda body over lane blocks (simd::blocks): inlined, so it runs in the caller's clone.
#define AMP_LANES [&](int64_t j, int64_t m) __attribute__((always_inline))

// Products and sums round one by one as numpy's do: no fused multiply-add in the clones that have FMA
// (g++ contracts by default), so every instruction set gives the same bits. For the rest of the file
// that includes this header.
#pragma GCC optimize("fp-contract=off")

// Vectors wider than the baseline ABI never cross a call (everything here is inlined), so the warning
// about passing them is moot, in this header and in the lanes of the file that includes it.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace amp {
namespace simd {

template <class T>
struct Lanes;

template <>
struct Lanes<double> {
  typedef double V __attribute__((vector_size(64)));
  typedef int64_t I __attribute__((vector_size(64)));
  static constexpr int kCount = 8;
  static constexpr int kMantissa = 52;
  static constexpr int64_t kBias = 1023;
  static constexpr int64_t kSign = INT64_MIN;
  static constexpr double kClamp = 20.0;  // tanh(x) rounds to 1 from 19.1 on
  static constexpr double kMagic = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  static constexpr int64_t kMagicBits = 0x4338000000000000;
  static constexpr double kInvLn2 = 1.4426950408889634;
  static constexpr double kLn2Hi = 6.93145751953125e-1;  // 19 significant bits: n * kLn2Hi is exact
  static constexpr double kLn2Lo = 1.42860682030941723212e-6;
};

template <>
struct Lanes<float> {
  typedef float V __attribute__((vector_size(64)));
  typedef int32_t I __attribute__((vector_size(64)));
  static constexpr int kCount = 16;
  static constexpr int kMantissa = 23;
  static constexpr int32_t kBias = 127;
  static constexpr int32_t kSign = INT32_MIN;
  static constexpr float kClamp = 10.0f;  // tanh(x) rounds to 1 from 9.0 on
  static constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  static constexpr int32_t kMagicBits = 0x4B400000;
  static constexpr float kInvLn2 = 1.44269504f;
  static constexpr float kLn2Hi = 0.693359375f;  // 9 significant bits
  static constexpr float kLn2Lo = -2.12194440e-4f;
};

// The first `n` (<= lane count) items at p as a vector, the rest zero; and back.
template <class T>
AMP_INLINE typename Lanes<T>::V load(const T* p, int64_t n = Lanes<T>::kCount) {
  typename Lanes<T>::V v = {};
  std::memcpy(&v, p, static_cast<size_t>(n) * sizeof(T));
  return v;
}
template <class T>
AMP_INLINE void store(T* p, const typename Lanes<T>::V& v, int64_t n = Lanes<T>::kCount) {
  std::memcpy(p, &v, static_cast<size_t>(n) * sizeof(T));
}

// r + r^2 (1/2! + r/3! + ...): expm1 on |r| <= ln2/2, to the last bit of T.
AMP_INLINE Lanes<double>::V expm1_reduced(const Lanes<double>::V& r) {
  Lanes<double>::V q = r * (1.0 / 6227020800.0) + 1.0 / 479001600.0;  // 1/13!, 1/12!
  q = q * r + 1.0 / 39916800.0;
  q = q * r + 1.0 / 3628800.0;
  q = q * r + 1.0 / 362880.0;
  q = q * r + 1.0 / 40320.0;
  q = q * r + 1.0 / 5040.0;
  q = q * r + 1.0 / 720.0;
  q = q * r + 1.0 / 120.0;
  q = q * r + 1.0 / 24.0;
  q = q * r + 1.0 / 6.0;
  q = q * r + 0.5;
  return r + r * r * q;
}
AMP_INLINE Lanes<float>::V expm1_reduced(const Lanes<float>::V& r) {
  Lanes<float>::V q = r * (1.0f / 5040.0f) + 1.0f / 720.0f;  // 1/7!, 1/6!
  q = q * r + 1.0f / 120.0f;
  q = q * r + 1.0f / 24.0f;
  q = q * r + 1.0f / 6.0f;
  q = q * r + 0.5f;
  return r + r * r * q;
}

// The bits of a non-negative T as its lane integer: for non-negative floats (NaN and infinity included)
// the integers order as the values do.
template <class T>
constexpr typename std::conditional<sizeof(T) == 8, int64_t, int32_t>::type bits_of(T v) {
  return __builtin_bit_cast(typename std::conditional<sizeof(T) == 8, int64_t, int32_t>::type, v);
}

// All ones in the lanes where a > b, else zero, for lanes in [0, max]: the sign of b - a (which cannot
// overflow), spread by a logical shift and a negation (AVX2 has no arithmetic shift of int64 lanes).
template <class I, class S>
AMP_INLINE I above(const I& a, S b) {
  typedef typename std::make_unsigned<S>::type U1;
  typedef U1 U __attribute__((vector_size(64)));
  return I{} - (I)((U)(b - a) >> (8 * sizeof(S) - 1));
}

// `a` in the lanes where `mask` is all ones, `b` where it is zero, bit for bit.
template <class V, class I>
AMP_INLINE V select(const I& mask, const V& a, const V& b) {
  return (V)(((I)a & mask) | ((I)b & ~mask));
}

// tanh on every lane (the formula in this file's opening comment).
template <class T>
AMP_INLINE typename Lanes<T>::V tanh(const typename Lanes<T>::V& x) {
  using L = Lanes<T>;
  using V = typename L::V;
  using I = typename L::I;
  const I sign = (I)x & L::kSign;
  V a = (V)((I)x & ~L::kSign);
  a = select(above((I)a, bits_of<T>(L::kClamp)), V{} + L::kClamp, a);  // NaN too; restored below
  const V y = a + a;
  const V t = y * L::kInvLn2 + L::kMagic;
  const V n = t - L::kMagic;
  const V r = (y - n * L::kLn2Hi) - n * L::kLn2Lo;
  const V p = expm1_reduced(r);
  const I k = (I)t - L::kMagicBits;  // n as an integer: the low bits of t
  const V scale = (V)((k + L::kBias) << L::kMantissa);
  const V e = scale * p + (scale - T(1));
  const V th = e / (e + T(2));
  const V out = (V)((I)th | sign);
  return select(above((I)x & ~L::kSign, bits_of<T>(T(INFINITY))), x, out);  // NaN lanes: x itself
}

// The Python Sigmoid's steps: y = x * 0.5; tanh(y); * 0.5; + 0.5.
template <class T>
AMP_INLINE typename Lanes<T>::V sigmoid(const typename Lanes<T>::V& x) {
  return tanh<T>(x * T(0.5)) * T(0.5) + T(0.5);
}

// Apply `body(j, n)` to lane blocks [j, j + n) covering [0, width) once each: full vectors, then one
// partial tail (loaded and stored item by item). For bodies that update in place (dst += ...).
template <class T, class Body>
AMP_INLINE void blocks(int64_t width, Body&& body) {
  constexpr int64_t L = Lanes<T>::kCount;
  int64_t j = 0;
  for (; j + L <= width; j += L) body(j, L);
  if (j < width) body(j, width - j);
}

// The same for pure bodies (what they store is a function of what they load, and no store lands where
// a load reads): full vectors only, the last one ending at `width` and so overlapping the one before it
// (its common lanes are computed and stored again, with the same bits); a partial vector only when the
// whole width is less than one vector.
template <class T, class Body>
AMP_INLINE void blocks_over(int64_t width, Body&& body) {
  constexpr int64_t L = Lanes<T>::kCount;
  if (width < L) {
    body(0, width);
    return;
  }
  int64_t j = 0;
  for (; j + L <= width; j += L) body(j, L);
  if (j < width) body(width - L, L);
}

// numpy's pairwise summation (pairwise_sum in umath/loops_utils.h) of n contiguous items: under 8 a
// plain loop from 0; up to 128 eight running sums combined as a tree, then the remainder; beyond that
// halves (at a multiple of 8) summed recursively. np.sum / np.mean over a contiguous last axis give
// exactly this. Inlined (into the caller's clone) down to halves of at most 128 items.
template <class T>
AMP_INLINE T pairwise_block(const T* a, int64_t n) {  // n <= 128
  if (n < 8) {
    T res = T(0);
    for (int64_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  T r[8];
  for (int k = 0; k < 8; ++k) r[k] = a[k];
  int64_t i = 8;
  for (; i < n - (n % 8); i += 8)
    for (int k = 0; k < 8; ++k) r[k] += a[i + k];
  T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
  for (; i < n; ++i) res += a[i];
  return res;
}

template <class T>
T pairwise_wide(const T* a, int64_t n);

template <class T>
AMP_INLINE T pairwise_sum(const T* a, int64_t n) {
  if (n <= 128) return pairwise_block(a, n);
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  if (n - n2 <= 128) return pairwise_block(a, n2) + pairwise_block(a + n2, n - n2);
  return pairwise_wide(a, n2) + pairwise_wide(a + n2, n - n2);
}

template <class T>
T pairwise_wide(const T* a, int64_t n) {
  return pairwise_sum(a, n);
}

}  // namespace simd
}  // namespace amp
