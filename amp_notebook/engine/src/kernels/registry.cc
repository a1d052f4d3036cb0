// The kernel registry (a kind -> factory table filled by static Registrars at load time) and the helpers
// of kernel.h that every kernel shares: joins, popping a cache entry, shape text.
#include <map>

#include "kernels/kernel.h"

namespace amp {

namespace {
std::map<std::string, Factory>& table() {
  static std::map<std::string, Factory> kernels;  // built before main, read-only afterwards
  return kernels;
}
}  // namespace

void register_kernel(const char* kind, Factory factory) { table()[kind] = factory; }

Factory find_kernel(const std::string& kind) {
  auto it = table().find(kind);
  return it == table().end() ? nullptr : it->second;
}

std::vector<std::string> kernel_kinds() {
  std::vector<std::string> kinds;
  for (const auto& entry : table()) kinds.push_back(entry.first);
  return kinds;
}

State Joins::match(const State& s, const Layout& layout) const {
  if (full_) return s;
  State m;  // (key, *match_on): the key slot and the match_on slots, absent ones absent (Python's None)
  if (layout.key_slot >= 0 && s.has(layout.key_slot)) m.set(layout.key_slot, s.get(layout.key_slot));
  for (int slot : slots_)
    if (s.has(slot)) m.set(slot, s.get(slot));
  return m;
}

bool Joins::add(int port, const Tensor& x, const State& s, int n_ports, const Layout& layout, JoinEntry* got) {
  if (n_ports == 1) {
    got->slot[port] = JoinSlot{true, x, s};
    got->count = 1;
    return true;
  }
  const State key = match(s, layout);
  bool inserted = false;
  JoinEntry& entry = waiting_.emplace(key, &inserted);
  if (!inserted && entry.slot[port].got)
    throw OpError("input '" + names_[port] + "' received a second message for state " + layout.describe(s) +
                  " before the other inputs arrived; states reaching a join must be unique (add an Isu to a loop, "
                  "or set match_on)", port);
  entry.slot[port] = JoinSlot{true, x, s};
  if (++entry.count < n_ports) return false;
  waiting_.take_into(key, got);
  return true;
}

Tensor take_cached(StateMap<Tensor>& cache, const State& s, const Layout& layout) {
  bool found = false;
  Tensor t = cache.take(s, &found);
  if (!found)
    throw OpError("a backward message with state " + layout.describe(s) +
                  " arrived but nothing was cached for it (its forward never ran here in training)");
  return t;
}

DType promote(DType a, DType b) { return a == DType::f32 && b == DType::f32 ? DType::f32 : DType::f64; }

Tensor as_dtype(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor src = x.contiguous_copy();
  Tensor out = Tensor::empty(dtype, src.shape(), src.rank());
  for (int64_t i = 0, n = src.size(); i < n; ++i) {
    double v = src.at(i);
    switch (dtype) {
      case DType::f64: out.data<double>()[i] = v; break;
      case DType::f32: out.data<float>()[i] = static_cast<float>(v); break;
      case DType::i64: out.data<int64_t>()[i] = static_cast<int64_t>(v); break;
      case DType::b8: out.data<uint8_t>()[i] = v != 0.0; break;
    }
  }
  return out;
}

std::string shape_text(const Tensor& t) { return shape_text(t.shape(), t.rank()); }

std::string shape_text(const int64_t* shape, int rank) {
  std::string out = "(";
  for (int i = 0; i < rank; ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + (rank == 1 ? ",)" : ")");
}

}  // namespace amp
