// CountMap: int64 id -> int64 count, for the credit ledger (credits.h), which every worker updates under one
// mutex several times per key. std::unordered_map cost each update a division (the bucket of a prime count),
// a chase to a node of its own, and, for each key, an allocation by the thread that admitted it and a free by
// the worker that completed it; on 2 workers those nodes moved between the cores' caches on every update.
//
// The algorithm: open addressing with linear probing over one dense array of 16-byte (id, count) slots, a
// power-of-two capacity kept at most half full, ids spread by a multiplicative (Fibonacci) hash so that the
// consecutive ids of keys admitted together land on different cache lines; removal by backward shift, so
// there are no tombstones and a lookup stops at the first empty slot. An update reads one or two lines and
// never allocates once the array has grown to the most ids held at once (it never shrinks).
// Not thread-safe: the ledger holds its mutex around every call. Never touches Python.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "probing.h"

namespace amp {

class CountMap {
 public:
  CountMap() { slots_.assign(kMinCapacity, Slot{}); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The count of `id`, inserted at 0 if absent. The reference lasts until the next call that inserts or erases.
  int64_t& operator[](int64_t id) {
    size_t i = home(id);
    for (; slots_[i].count != kEmpty; i = next(i))
      if (slots_[i].id == id) return slots_[i].count;
    if ((size_ + 1) * 2 > slots_.size()) {
      grow();
      return (*this)[id];
    }
    slots_[i] = Slot{id, 0};
    ++size_;
    return slots_[i].count;
  }

  // The count of `id`, or nullptr if absent.
  int64_t* find(int64_t id) {
    for (size_t i = home(id); slots_[i].count != kEmpty; i = next(i))
      if (slots_[i].id == id) return &slots_[i].count;
    return nullptr;
  }

  // Remove `id` (nothing happens if it is absent).
  void erase(int64_t id) {
    for (size_t i = home(id); slots_[i].count != kEmpty; i = next(i)) {
      if (slots_[i].id == id) {
        erase_at(i);
        --size_;
        return;
      }
    }
  }

  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.count != kEmpty) f(s.id, s.count);
  }

 private:
  static constexpr int64_t kEmpty = std::numeric_limits<int64_t>::min();  // a count no id ever holds
  static constexpr size_t kMinCapacity = 64;
  struct Slot {
    int64_t id = 0;
    int64_t count = kEmpty;
  };

  size_t home(int64_t id) const {
    return static_cast<size_t>((static_cast<uint64_t>(id) * 0x9e3779b97f4a7c15ull) >> shift_);
  }
  size_t next(size_t i) const { return (i + 1) & (slots_.size() - 1); }

  // Backward-shift deletion (probing.h).
  void erase_at(size_t hole) {
    for (size_t i = next(hole); slots_[i].count != kEmpty; i = next(i)) {
      if (moves_into_hole(hole, i, home(slots_[i].id))) {
        slots_[hole] = slots_[i];
        hole = i;
      }
    }
    slots_[hole] = Slot{};
  }

  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.size() * 2, Slot{});
    --shift_;
    for (const Slot& s : old) {
      if (s.count == kEmpty) continue;
      size_t i = home(s.id);
      while (slots_[i].count != kEmpty) i = next(i);
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
  int shift_ = 64 - 6;  // home() takes the hash's top log2(capacity) bits: 6 for kMinCapacity
};

}  // namespace amp
