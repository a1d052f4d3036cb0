// State: the small immutable record every message carries (ir/message.py State), in a fixed slot
// layout that the compile step (engine/plan.py) derives from the graph: slot i always holds the same
// field name. A slot holds an int64 and two bits say whether the field is present and whether its value
// is a bool (Python keeps True and 1 apart in values but not in equality: `State(t=True) == State(t=1)`,
// so equality and hash ignore the bool bit, as Python's do).
// Size: every message carries a State, and the worker moves each message several times (mailbox, inbox,
// bundle, outputs), so the State keeps only the first kInlineSlots slots inline (the zoo's graphs have 2 to
// 8 fields); a graph with more fields (up to kMaxSlots) keeps its higher slots in a small block that the
// State owns and copies. Shrinking the record from 136 to 80 bytes (a Message from 248 to 192) made the
// per-tree Tree-LSTM 4-7% faster (docs/measurements.md, 2026-12-07, late).
//
// StateMap<V>: what an op caches under the state of a forward message until its backward arrives
// (ir/ops/base.py NodeContext.cache / joins): a compact open-addressing index (linear probing, backward-shift
// deletion, no tombstones) over a dense array of entries. No allocation per entry once the arrays have grown
// to what is in flight, and a lookup reads 16-byte index slots rather than whole entries, which for a join's
// waiting messages are most of a kilobyte (the entry is read once, on a matching hash).
// Never touches Python, threads or payload data.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common.h"
#include "probing.h"

namespace amp {

struct State {
  uint32_t present = 0;  // bit i: slot i holds a value
  uint32_t bools = 0;    // bit i: that value is a bool (True/False in Python)
  // Slots 0..kInlineSlots-1 live here; absent ones hold 0, so equality and hash read every slot the same way.
  int64_t v[kInlineSlots] = {};

  State() = default;
  State(const State& o) : present(o.present), bools(o.bools) {
    std::memcpy(v, o.v, sizeof v);
    if (o.more_) more_ = copy_of(o.more_.get());
  }
  State(State&&) noexcept = default;
  State& operator=(const State& o) {
    if (this != &o) {
      present = o.present;
      bools = o.bools;
      std::memcpy(v, o.v, sizeof v);
      if (!o.more_) more_.reset();
      else if (more_) std::memcpy(more_.get(), o.more_.get(), kMoreBytes);
      else more_ = copy_of(o.more_.get());
    }
    return *this;
  }
  State& operator=(State&&) noexcept = default;

  bool has(int slot) const { return (present >> slot) & 1u; }
  int64_t get(int slot) const {
    if (slot < kInlineSlots) return v[slot];
    return more_ ? more_[static_cast<size_t>(slot - kInlineSlots)] : 0;
  }
  void set(int slot, int64_t value, bool is_bool = false) {
    if (slot < kInlineSlots) {
      v[slot] = value;
    } else {
      if (!more_) more_ = copy_of(nullptr);
      more_[static_cast<size_t>(slot - kInlineSlots)] = value;
    }
    present |= 1u << slot;
    bools = is_bool ? bools | (1u << slot) : bools & ~(1u << slot);
  }
  void erase(int slot) {
    if (slot < kInlineSlots) v[slot] = 0;
    else if (more_) more_[static_cast<size_t>(slot - kInlineSlots)] = 0;
    present &= ~(1u << slot);
    bools &= ~(1u << slot);
  }
  bool operator==(const State& o) const {
    if (present != o.present || std::memcmp(v, o.v, sizeof v) != 0) return false;
    for (uint32_t m = present >> kInlineSlots; m; m &= m - 1) {  // high slots: only a graph of many fields
      const int i = kInlineSlots + __builtin_ctz(m);
      if (get(i) != o.get(i)) return false;
    }
    return true;
  }
  bool operator!=(const State& o) const { return !(*this == o); }
  uint64_t hash() const {
    // splitmix64 over the presence mask and the present slots (absent slots are 0 and skipped), so equal
    // states hash equal and a state of a few fields costs a few rounds
    uint64_t h = 0x9e3779b97f4a7c15ull ^ present;
    for (uint32_t m = present; m; m &= m - 1) {
      int i = __builtin_ctz(m);
      uint64_t x = h + static_cast<uint64_t>(get(i)) + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
      h = x ^ (x >> 31);
    }
    return h;
  }

 private:
  static constexpr int kMoreSlots = kMaxSlots - kInlineSlots;
  static constexpr size_t kMoreBytes = sizeof(int64_t) * kMoreSlots;
  // A high block holding `from`'s values (null: zeros).
  static std::unique_ptr<int64_t[]> copy_of(const int64_t* from) {
    std::unique_ptr<int64_t[]> block(new int64_t[kMoreSlots]());
    if (from) std::memcpy(block.get(), from, kMoreBytes);
    return block;
  }
  // Slots kInlineSlots..kMaxSlots-1, only for a graph with more fields than fit inline; allocated when one
  // of them is first set, and kept (zeroed where absent) while the State lives.
  std::unique_ptr<int64_t[]> more_;
};

// A growing vector, and a bundle taken from the slab, move their messages' States: those moves must not throw
// (nor allocate; copies do, for a graph with a high block).
static_assert(std::is_nothrow_move_constructible_v<State> && std::is_nothrow_move_assignable_v<State>);

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
  explicit StateMap(size_t capacity = 16) {
    rehash(capacity < 8 ? 8 : capacity);
    entries_.reserve(capacity < 8 ? 8 : capacity);
  }

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

  V* find(const State& s) {
    const uint64_t h = s.hash();
    for (size_t i = h & mask_; index_[i].pos != kEmpty; i = (i + 1) & mask_) {
      Entry& e = entries_[static_cast<size_t>(index_[i].pos)];
      if (index_[i].hash == h && e.key == s) return &e.value;
    }
    return nullptr;
  }
  bool contains(const State& s) { return find(s) != nullptr; }

  // The entry for `s`, inserted (default-constructed) if absent; `inserted` tells which. The reference lasts
  // until the next emplace or take.
  V& emplace(const State& s, bool* inserted = nullptr) {
    if ((entries_.size() + 1) * 4 > index_.size() * 3) rehash(index_.size() * 2);
    const uint64_t h = s.hash();
    size_t i = h & mask_;
    for (; index_[i].pos != kEmpty; i = (i + 1) & mask_) {
      Entry& e = entries_[static_cast<size_t>(index_[i].pos)];
      if (index_[i].hash == h && e.key == s) {
        if (inserted) *inserted = false;
        return e.value;
      }
    }
    index_[i] = Slot{h, static_cast<int64_t>(entries_.size())};
    Entry& e = entries_.emplace_back();  // built in place: an entry may be most of a kilobyte
    e.hash = h;
    e.key = s;
    if (inserted) *inserted = true;
    return e.value;
  }

  // Remove `s` and return its value (`found` false and a default value if it was absent).
  V take(const State& s, bool* found = nullptr) {
    V out{};
    const bool got = take_into(s, &out);
    if (found) *found = got;
    return out;
  }

  // Remove `s` and move its value into `*out`: false (and `*out` untouched) if it was absent. No temporary,
  // for large values.
  bool take_into(const State& s, V* out) {
    const uint64_t h = s.hash();
    for (size_t i = h & mask_; index_[i].pos != kEmpty; i = (i + 1) & mask_) {
      const size_t pos = static_cast<size_t>(index_[i].pos);
      if (index_[i].hash == h && entries_[pos].key == s) {
        *out = std::move(entries_[pos].value);
        erase_at(i);
        if (pos + 1 != entries_.size()) {  // the last entry fills the hole; its index slot follows it
          entries_[pos] = std::move(entries_.back());
          slot_of_position(entries_[pos].hash, entries_.size() - 1).pos = static_cast<int64_t>(pos);
        }
        entries_.pop_back();
        return true;
      }
    }
    return false;
  }

  template <class F>
  void for_each(F&& f) const {
    for (const Entry& e : entries_) f(e.key, e.value);
  }
  void clear() {
    entries_.clear();
    for (Slot& slot : index_) slot.pos = kEmpty;
  }

 private:
  static constexpr int64_t kEmpty = -1;
  // The index: open addressing with linear probing over 16-byte slots (a hash and the entry's position), so a
  // probe reads one dense line and touches an entry only when the hash matches. The entries themselves (an
  // op's cached tensors or a join's waiting messages: hundreds of bytes each) sit densely in `entries_`,
  // where a removal moves the last entry into the hole.
  struct Slot {
    uint64_t hash = 0;
    int64_t pos = kEmpty;  // into entries_
  };
  struct Entry {
    uint64_t hash = 0;  // the key's hash, kept: moving an entry finds its index slot without rehashing
    State key;
    V value{};
  };

  Slot& slot_of_position(uint64_t h, size_t pos) {
    size_t i = h & mask_;
    while (index_[i].pos != static_cast<int64_t>(pos)) i = (i + 1) & mask_;
    return index_[i];
  }

  // Backward-shift deletion (probing.h).
  void erase_at(size_t hole) {
    size_t i = hole;
    for (;;) {
      i = (i + 1) & mask_;
      if (index_[i].pos == kEmpty) break;
      size_t home = index_[i].hash & mask_;
      if (moves_into_hole(hole, i, home)) {
        index_[hole] = index_[i];
        hole = i;
      }
    }
    index_[hole].pos = kEmpty;
  }

  void rehash(size_t capacity) {
    size_t n = 8;
    while (n < capacity) n <<= 1;
    index_.assign(n, Slot{});
    mask_ = n - 1;
    for (size_t pos = 0; pos < entries_.size(); ++pos) {
      size_t i = entries_[pos].hash & mask_;
      while (index_[i].pos != kEmpty) i = (i + 1) & mask_;
      index_[i] = Slot{entries_[pos].hash, static_cast<int64_t>(pos)};
    }
  }

  std::vector<Slot> index_;
  std::vector<Entry> entries_;
  size_t mask_ = 0;
};

}  // namespace amp
