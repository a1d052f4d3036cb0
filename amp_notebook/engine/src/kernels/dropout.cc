// Dropout, the native twin of ir/ops/dropout.py: a mask that is a function of the message, so the native
// engine draws exactly the mask of the Python op (the reference interpreter, any backend).
// Never touches Python, the inbox or other nodes.
#include <charconv>
#include <cstring>
#include <string>

#include "kernels/kernel.h"

namespace amp {

namespace {

// BLAKE2b (RFC 7693) with an 8-byte digest and no key, as hashlib.blake2b(text, digest_size=8): the
// state is the SHA-512 IV with the parameter block (digest length, fanout 1, depth 1) folded into word
// 0; the message goes through 12 rounds per 128-byte block (the last block zero-padded, counted by its
// real bytes, with the final-block flag); the digest is the first 8 bytes of the state, little-endian.
constexpr uint64_t kIV[8] = {0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull, 0x3c6ef372fe94f82bull,
                             0xa54ff53a5f1d36f1ull, 0x510e527fade682d1ull, 0x9b05688c2b3e6c1full,
                             0x1f83d9abfb41bd6bull, 0x5be0cd19137e2179ull};
constexpr uint8_t kSigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

inline uint64_t rotr(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

void compress(uint64_t h[8], const uint8_t block[128], uint64_t counted, bool last) {
  uint64_t m[16], v[16];
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  std::memcpy(m, block, sizeof m);  // the words are little-endian, as this machine's
#else
  for (int i = 0; i < 16; ++i) {
    uint64_t w = 0;
    for (int b = 7; b >= 0; --b) w = (w << 8) | block[i * 8 + b];
    m[i] = w;
  }
#endif
  for (int i = 0; i < 8; ++i) v[i] = h[i], v[i + 8] = kIV[i];
  v[12] ^= counted;  // the byte counter's low word (a text never reaches 2**64 bytes)
  if (last) v[14] = ~v[14];
  auto mix = [&](int a, int b, int c, int d, uint64_t x, uint64_t y) {
    v[a] = v[a] + v[b] + x;
    v[d] = rotr(v[d] ^ v[a], 32);
    v[c] = v[c] + v[d];
    v[b] = rotr(v[b] ^ v[c], 24);
    v[a] = v[a] + v[b] + y;
    v[d] = rotr(v[d] ^ v[a], 16);
    v[c] = v[c] + v[d];
    v[b] = rotr(v[b] ^ v[c], 63);
  };
#pragma GCC unroll 12
  for (const uint8_t* s : kSigma) {
    mix(0, 4, 8, 12, m[s[0]], m[s[1]]);
    mix(1, 5, 9, 13, m[s[2]], m[s[3]]);
    mix(2, 6, 10, 14, m[s[4]], m[s[5]]);
    mix(3, 7, 11, 15, m[s[6]], m[s[7]]);
    mix(0, 5, 10, 15, m[s[8]], m[s[9]]);
    mix(1, 6, 11, 12, m[s[10]], m[s[11]]);
    mix(2, 7, 8, 13, m[s[12]], m[s[13]]);
    mix(3, 4, 9, 14, m[s[14]], m[s[15]]);
  }
  for (int i = 0; i < 8; ++i) h[i] ^= v[i] ^ v[i + 8];
}

uint64_t blake2b_64(const std::string& text) {
  uint64_t h[8];
  std::memcpy(h, kIV, sizeof h);
  h[0] ^= 0x01010000ull ^ 8u;  // depth 1, fanout 1, no key, 8-byte digest
  const auto* data = reinterpret_cast<const uint8_t*>(text.data());
  size_t left = text.size();
  uint64_t counted = 0;
  while (left > 128) {
    counted += 128;
    compress(h, data, counted, false);
    data += 128;
    left -= 128;
  }
  uint8_t block[128] = {};
  if (left) std::memcpy(block, data, left);
  compress(h, block, counted + left, true);
  return h[0];  // the digest's first 8 bytes, read little-endian
}

// dropout.uniforms: element i of a message gets splitmix64(base + (i + 1) * golden), its top 53 bits as a
// fraction in [0, 1).
inline double uniform(uint64_t base, int64_t i) {
  uint64_t z = base + static_cast<uint64_t>(i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1p-53;
}

// Dropout (dropout.Dropout, "per_message"): for a training key each element is kept when its uniform is
// >= p and scaled by 1 / (1 - p) (0 for p >= 1), else zeroed; a validation key (ctx.train false) and p = 0
// pass the payload through. The message's base is dropout.message_base: BLAKE2b-64 of the UTF-8 text
// repr((seed, node name, sorted(state.items()))); the compile step encodes the text's start
// "(seed, 'name', " and each slot's repr(field name) (Python's reprs: the kernel only writes ints and
// True/False). Backward recomputes the mask from the gradient's state (nothing is cached) and sends the
// masked gradient when the input wants one. Payloads: in their dtype, as np.where(keep, x * scale, 0)
// .astype(x.dtype): float32 products in float32 with scale rounded to float32; integers and bools through
// float64. ints: [bits of p (IEEE double), prefix length, prefix bytes..., n fields, (slot, length,
// bytes...) per field in the order of their names].
class DropoutKernel : public Kernel {
 public:
  explicit DropoutKernel(const KernelSpec& spec) {
    const auto& v = spec.ints;
    size_t at = 0;
    auto next = [&]() -> int64_t {
      if (at >= v.size()) throw SpecError("a Dropout's spec ends early");
      return v[at++];
    };
    auto text = [&](std::string* out) {
      int64_t n = next();
      if (n < 0 || static_cast<size_t>(n) > v.size() - at) throw SpecError("a Dropout's text runs past its spec");
      for (int64_t i = 0; i < n; ++i) {
        int64_t byte = next();
        if (byte < 0 || byte > 255) throw SpecError("a Dropout's text holds a value that is not a byte");
        out->push_back(static_cast<char>(byte));
      }
    };
    const int64_t bits = next();
    std::memcpy(&p_, &bits, sizeof p_);
    if (!(p_ >= 0.0 && p_ <= 1.0)) throw SpecError("a Dropout's p lies in [0, 1]");
    scale_ = p_ >= 1.0 ? 0.0 : 1.0 / (1.0 - p_);
    text(&prefix_);
    const int64_t fields = next();
    if (fields < 0 || fields > spec.n_slots) throw SpecError("a Dropout names more fields than the layout has");
    for (int64_t f = 0; f < fields; ++f) {
      Field field;
      field.slot = static_cast<int>(next());
      if (field.slot < 0 || field.slot >= spec.n_slots) throw SpecError("a Dropout's field slot is out of range");
      text(&field.repr);
      fields_.push_back(field);
    }
    if (at != v.size()) throw SpecError("a Dropout's spec has trailing values");
  }

  void forward(NodeCtx& ctx, int, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    for (size_t i = 0; i < xs.size(); ++i)
      out.push(0, !ctx.train || p_ == 0.0 ? xs[i] : drop(xs[i], states[i]), states[i]);
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    if (!ctx.wants_grad(0)) return;
    for (size_t i = 0; i < gs.size(); ++i) out.push(0, p_ == 0.0 ? gs[i] : drop(gs[i], states[i]), states[i]);
  }

 private:
  struct Field {
    int slot;
    std::string repr;
  };

  // dropout.message_base: the hash of "(seed, 'name', [('f', v), ...])" over the present fields by name.
  uint64_t base(const State& s) {
    text_.assign(prefix_);
    text_ += '[';
    bool first = true;
    for (const Field& f : fields_) {
      if (!s.has(f.slot)) continue;
      text_ += first ? "(" : ", (";
      first = false;
      text_ += f.repr;
      text_ += ", ";
      if ((s.bools >> f.slot) & 1u) {
        text_ += s.get(f.slot) ? "True" : "False";
      } else {
        char digits[24];
        auto end = std::to_chars(digits, digits + sizeof digits, s.get(f.slot)).ptr;
        text_.append(digits, end);
      }
      text_ += ')';
    }
    text_ += "])";
    return blake2b_64(text_);
  }

  Tensor drop(const Tensor& x_in, const State& s) {
    const uint64_t b = base(s);
    const Tensor x = x_in.contiguous_copy();
    Tensor y = Tensor::empty(x.dtype(), x.shape(), x.rank());
    const int64_t n = x.size();
    switch (x.dtype()) {
      case DType::f64: {
        const double* a = x.data<double>();
        double* d = y.data<double>();
        for (int64_t i = 0; i < n; ++i) d[i] = uniform(b, i) >= p_ ? a[i] * scale_ : 0.0;
        break;
      }
      case DType::f32: {
        const float* a = x.data<float>();
        float* d = y.data<float>();
        const float scale = static_cast<float>(scale_);
        for (int64_t i = 0; i < n; ++i) d[i] = uniform(b, i) >= p_ ? a[i] * scale : 0.0f;
        break;
      }
      case DType::i64: {  // float64 products cast back (numpy's cast: truncation; INT64_MIN beyond range)
        const int64_t* a = x.data<int64_t>();
        int64_t* d = y.data<int64_t>();
        for (int64_t i = 0; i < n; ++i) {
          const double v = uniform(b, i) >= p_ ? static_cast<double>(a[i]) * scale_ : 0.0;
          d[i] = v >= -9223372036854775808.0 && v < 9223372036854775808.0 ? static_cast<int64_t>(v) : INT64_MIN;
        }
        break;
      }
      case DType::b8: {
        const uint8_t* a = x.data<uint8_t>();
        uint8_t* d = y.data<uint8_t>();
        for (int64_t i = 0; i < n; ++i) d[i] = uniform(b, i) >= p_ && a[i] && scale_ != 0.0;
        break;
      }
    }
    return y;
  }

  double p_ = 0.0, scale_ = 1.0;
  std::string prefix_;
  std::vector<Field> fields_;
  std::string text_;  // the message's hash text, rebuilt per message in reused capacity
};
AMP_REGISTER_KERNEL("dropout", DropoutKernel);

}  // namespace
}  // namespace amp
