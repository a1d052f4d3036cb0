// State: the small immutable record every message carries (ir/message.py State), in a fixed slot
// layout that the compile step (engine/plan.py) derives from the graph: slot i always holds the same
// field name. A slot holds an int64 and two bits say whether the field is present and whether its value
// is a bool (Python keeps True and 1 apart in values but not in equality: `State(t=True) == State(t=1)`,
// so equality and hash ignore the bool bit, as Python's do).
//
// StateMap<V>: what an op caches under the state of a forward message until its backward arrives
// (ir/ops/base.py NodeContext.cache / joins), as an open-addressing hash table with linear probing and
// backward-shift deletion: no allocation per entry, and deletion leaves no tombstones, so a table that
// holds what is in flight stays as small as that.
// Never touches Python, threads or payload data.
#pragma once

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common.h"

namespace amp {

struct State {
  uint32_t present = 0;  // bit i: slot i holds a value
  uint32_t bools = 0;    // bit i: that value is a bool (True/False in Python)
  int64_t v[kMaxSlots] = {};  // absent slots hold 0, so equality and hash read every slot the same way

  bool has(int slot) const { return (present >> slot) & 1u; }
  int64_t get(int slot) const { return v[slot]; }
  void set(int slot, int64_t value, bool is_bool = false) {
    v[slot] = value;
    present |= 1u << slot;
    bools = is_bool ? bools | (1u << slot) : bools & ~(1u << slot);
  }
  void erase(int slot) {
    v[slot] = 0;
    present &= ~(1u << slot);
    bools &= ~(1u << slot);
  }
  bool operator==(const State& o) const {
    return present == o.present && std::memcmp(v, o.v, sizeof v) == 0;
  }
  bool operator!=(const State& o) const { return !(*this == o); }
  uint64_t hash() const {
    // splitmix64 over the presence mask and the present slots (absent slots are 0 and skipped), so equal
    // states hash equal and a state of a few fields costs a few rounds
    uint64_t h = 0x9e3779b97f4a7c15ull ^ present;
    for (uint32_t m = present; m; m &= m - 1) {
      int i = __builtin_ctz(m);
      uint64_t x = h + static_cast<uint64_t>(v[i]) + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
      h = x ^ (x >> 31);
    }
    return h;
  }
};

// The field names of a graph's slots, for conversion and for error messages.
struct Layout {
  std::vector<std::string> names;
  int key_slot = -1;    // "key": the key id the controller assigns
  int flush_slot = -1;  // "flush": the flush id of an update message
  // Python's repr of a state: State(a=1, key=3, t=True), fields sorted by name (ir/message.py).
  std::string describe(const State& s) const;
  // The message key: the state's key, or -1 - flush id for a flush's update message (ir/message.py Message).
  int64_t key_of(const State& s) const {
    if (key_slot >= 0 && s.has(key_slot)) return s.get(key_slot);
    return -1 - (flush_slot >= 0 && s.has(flush_slot) ? s.get(flush_slot) : 0);
  }
};

template <class V>
class StateMap {
 public:
  explicit StateMap(size_t capacity = 16) { rehash(capacity < 8 ? 8 : capacity); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  V* find(const State& s) {
    const uint64_t h = s.hash();
    size_t i = h & mask_;
    while (slots_[i].used) {
      if (slots_[i].hash == h && slots_[i].key == s) return &slots_[i].value;
      i = (i + 1) & mask_;
    }
    return nullptr;
  }
  bool contains(const State& s) { return find(s) != nullptr; }

  // The entry for `s`, inserted (default-constructed) if absent; `inserted` tells which.
  V& emplace(const State& s, bool* inserted = nullptr) {
    if ((size_ + 1) * 4 > slots_.size() * 3) rehash(slots_.size() * 2);
    const uint64_t h = s.hash();
    size_t i = h & mask_;
    while (slots_[i].used) {
      if (slots_[i].hash == h && slots_[i].key == s) {
        if (inserted) *inserted = false;
        return slots_[i].value;
      }
      i = (i + 1) & mask_;
    }
    slots_[i].used = true;
    slots_[i].hash = h;
    slots_[i].key = s;
    slots_[i].value = V();
    ++size_;
    if (inserted) *inserted = true;
    return slots_[i].value;
  }

  // Remove `s` and return its value (`found` false and a default value if it was absent).
  V take(const State& s, bool* found = nullptr) {
    const uint64_t h = s.hash();
    size_t i = h & mask_;
    while (slots_[i].used) {
      if (slots_[i].hash == h && slots_[i].key == s) {
        V out = std::move(slots_[i].value);
        erase_at(i);
        if (found) *found = true;
        return out;
      }
      i = (i + 1) & mask_;
    }
    if (found) *found = false;
    return V();
  }

  template <class F>
  void for_each(F&& f) const {
    for (const auto& slot : slots_)
      if (slot.used) f(slot.key, slot.value);
  }
  void clear() {
    for (auto& slot : slots_) {
      slot.used = false;
      slot.value = V();
    }
    size_ = 0;
  }

 private:
  struct Slot {
    bool used = false;
    uint64_t hash = 0;  // the key's hash, kept: deletion and growth move entries without rehashing
    State key;
    V value{};
  };

  // Backward-shift deletion: move later members of the probe run into the hole while that keeps each
  // one at or after its home slot, so lookups never need tombstones.
  void erase_at(size_t hole) {
    size_t i = hole;
    for (;;) {
      i = (i + 1) & mask_;
      if (!slots_[i].used) break;
      size_t home = slots_[i].hash & mask_;
      bool movable = (hole <= i) ? (home <= hole || home > i) : (home <= hole && home > i);
      if (movable) {
        slots_[hole] = std::move(slots_[i]);
        hole = i;
      }
    }
    slots_[hole].used = false;
    slots_[hole].value = V();
    --size_;
  }

  void rehash(size_t capacity) {
    size_t n = 8;
    while (n < capacity) n <<= 1;
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.resize(n);
    mask_ = n - 1;
    size_ = 0;
    for (auto& slot : old) {
      if (!slot.used) continue;
      size_t i = slot.hash & mask_;
      while (slots_[i].used) i = (i + 1) & mask_;
      slots_[i] = std::move(slot);
      ++size_;
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace amp
