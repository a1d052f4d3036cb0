// See inbox.h: the algorithm of runtime/inbox.py, line for line where the order of effects matters (a partly
// taken group re-enters its heap under its new first message's rank and arrival number, as in Python).
#include "inbox.h"

#include <algorithm>

namespace amp {

// A group is found by direct indexing, [node * 3 + direction][port], without hashing: this runs for every
// message pushed. Indices outside that table (a port past kDensePorts; negative ones, never made by the
// engine) go through the map, so no index can grow the table without bound.
int Inbox::group_of(int node, int direction, int port) {
  constexpr int kDensePorts = 256;
  const bool dense = node >= 0 && direction >= 0 && direction < 3 && port >= 0 && port < kDensePorts;
  uint64_t packed = 0;
  if (dense) {
    const size_t row = static_cast<size_t>(node) * 3 + static_cast<size_t>(direction);
    if (row < dense_.size() && static_cast<size_t>(port) < dense_[row].size()) {
      const int gi = dense_[row][static_cast<size_t>(port)];
      if (gi >= 0) return gi;
    }
  } else {
    packed = (static_cast<uint64_t>(static_cast<uint32_t>(node)) << 24) ^ (static_cast<uint64_t>(direction) << 20) ^
             static_cast<uint64_t>(static_cast<uint32_t>(port));
    auto it = index_.find(packed);
    if (it != index_.end()) return it->second;
  }
  const bool heavy = tiered_ && node >= 0 && static_cast<size_t>(node) < parameterized_.size() &&
                     parameterized_[static_cast<size_t>(node)];
  groups_.push_back(Group{node, direction, port, heavy ? 1 : 0, {}, -1, 0, false});
  const int gi = static_cast<int>(groups_.size() - 1);
  if (dense) {
    const size_t row = static_cast<size_t>(node) * 3 + static_cast<size_t>(direction);
    if (row >= dense_.size()) dense_.resize(row + 1);
    std::vector<int>& ports = dense_[row];
    if (static_cast<size_t>(port) >= ports.size()) ports.resize(static_cast<size_t>(port) + 1, -1);
    ports[static_cast<size_t>(port)] = gi;
  } else {
    index_[packed] = gi;
  }
  return gi;
}

void Inbox::set_parameterized(int node, bool parameterized) {
  if (node < 0) return;
  if (static_cast<size_t>(node) >= parameterized_.size()) parameterized_.resize(static_cast<size_t>(node) + 1, 0);
  parameterized_[static_cast<size_t>(node)] = parameterized ? 1 : 0;
}

void Inbox::push(uint64_t handle, int node, int direction, int port, int64_t key) {
  int64_t seq = ++seq_;
  int64_t rank = order_ == Order::kArrival ? seq : key;  // flush updates carry key -1: first
  Item item{rank, seq, handle};
  if (node > max_node_) max_node_ = node;
  int gi = group_of(node, direction, port);
  Group& g = groups_[gi];
  ++size_;
  if (!g.active) {
    g.active = true;
    g.created = ++created_;
    g.waiting.push_back(item);
  } else if (rank >= g.waiting.back().rank) {
    g.waiting.push_back(item);
    return;
  } else {
    auto at = std::upper_bound(g.waiting.begin(), g.waiting.end(), item);
    bool first = at == g.waiting.begin();
    g.waiting.insert(at, item);
    if (!first) return;
  }
  heap_of(g.tier, direction).push(Entry{rank, seq, gi});
  g.live = seq;
}

const Inbox::Entry* Inbox::top(Heap& heap) {
  while (!heap.empty()) {
    const Entry& e = heap.top();
    const Group& g = groups_[e.group];
    if (g.active && g.live == e.seq) return &e;
    heap.pop();
  }
  return nullptr;
}

bool Inbox::has_work(bool allow_forward) {
  for (int tier = 0; tier < 2; ++tier)
    if (top(heap_of(tier, kBackward)) || (allow_forward && top(heap_of(tier, kForward)))) return true;
  return false;
}

void Inbox::retire(Group& g) {
  g.active = false;
  g.live = -1;
  g.waiting.clear();
}

bool Inbox::take(bool allow_forward, const std::vector<int64_t>& max_bundle, const Limit& limit,
                 std::vector<uint64_t>* out) {
  out->clear();
  // the first tier with work decides; within it, backward first (fifo: the better rank of the two)
  Heap* heap = nullptr;
  int tier = 0;
  bool forward = false;
  for (int t = 0; t < 2 && !heap; ++t) {
    Heap& bwd = heap_of(t, kBackward);
    Heap& fwd = heap_of(t, kForward);
    const Entry* b = top(bwd);
    heap = b ? &bwd : nullptr;
    if (allow_forward) {
      const Entry* f = top(fwd);
      if (f && (!heap || (fifo_ && f->rank < b->rank))) {
        heap = &fwd;
        forward = true;
      }
    }
    tier = t;
  }
  if (!heap) return false;
  int gi;
  if (order_ == Order::kLargestBundle) {
    gi = -1;
    for (int i = 0; i < static_cast<int>(groups_.size()); ++i) {
      const Group& g = groups_[i];
      if (!g.active || (g.direction == kForward) != forward || g.tier != tier) continue;
      if (gi < 0) {
        gi = i;
        continue;
      }
      const Group& best = groups_[gi];
      size_t n = g.waiting.size(), bn = best.waiting.size();
      int64_t r = g.waiting.front().rank, br = best.waiting.front().rank;
      // Python: max over dict order by (len, -first rank): the first maximal group wins
      if (n > bn || (n == bn && r < br) || (n == bn && r == br && g.created < best.created)) gi = i;
    }
  } else {
    gi = heap->top().group;
    heap->pop();
  }
  Group& g = groups_[gi];
  if (g.waiting.size() == 1) {  // the common case without bundling: nothing joins
    out->push_back(g.waiting.front().handle);
    retire(g);
    --size_;
    return true;
  }
  int64_t cap = 1;
  if (max_bundle[g.node] > 1) cap = limit ? limit(g.node, g.direction) : max_bundle[g.node];
  if (static_cast<int64_t>(g.waiting.size()) <= cap) {
    for (const Item& item : g.waiting) out->push_back(item.handle);
    size_ -= g.waiting.size();
    retire(g);
    return true;
  }
  for (int64_t i = 0; i < cap; ++i) {
    out->push_back(g.waiting.front().handle);
    g.waiting.pop_front();
  }
  size_ -= static_cast<size_t>(cap);
  const Item& first = g.waiting.front();  // live: the entry names the group's new first message
  heap->push(Entry{first.rank, first.seq, gi});
  g.live = first.seq;
  return true;
}

}  // namespace amp
