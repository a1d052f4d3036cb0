// A worker's inbox (runtime/inbox.py, same rules, same choices): which message the worker handles next
// and which waiting messages join it in a bundle.
//
// * priority: backward_first takes backward messages and flush updates before forward ones; fifo takes
//   the better rank of the two directions' best groups; light_first takes the messages of nodes without
//   parameters (tier 0) before those of parameterized nodes (tier 1), backward first within each tier;
// * order: oldest_key ranks a message by its key (admission order), arrival by its arrival number;
//   largest_bundle takes the group with the most waiting messages (ties: the older best rank, then the
//   group that came first);
// * bundles: the chosen group's first messages, up to the node's max_bundle (1: none) and the worker's
//   cap (a node updating locally takes no more gradients than its next update needs).
//
// Each (node, direction, port) group keeps its messages sorted by (rank, arrival); each tier and direction
// a min-heap of (best rank, entry number, group) entries (one tier unless light_first); an entry goes
// stale when its group gets a better first message or is emptied, and is skipped when it surfaces. Heap
// work is paid per bundle, not per message. The inbox holds message handles (the worker's), never
// messages, and is touched by its worker's thread only. Never touches Python, payloads or states.
#pragma once

#include <deque>
#include <functional>
#include <queue>
#include <unordered_map>
#include <vector>

#include "common.h"

namespace amp {

enum Direction : int { kForward = 0, kBackward = 1, kUpdate = 2 };

class Inbox {
 public:
  enum class Priority { kBackwardFirst, kFifo, kLightFirst };
  enum class Order { kOldestKey, kArrival, kLargestBundle };
  // (node, direction) -> the cap for a node whose max_bundle is over 1 (null: max_bundle itself)
  using Limit = std::function<int64_t(int, int)>;

  Inbox(Priority priority, Order order)
      : fifo_(priority == Priority::kFifo), tiered_(priority == Priority::kLightFirst), order_(order) {}

  // Whether `node` has parameters (light_first puts its messages in tier 1); set before its first push.
  void set_parameterized(int node, bool parameterized);

  void push(uint64_t handle, int node, int direction, int port, int64_t key);
  // The next bundle into `out` (cleared first); false when nothing may be taken.
  bool take(bool allow_forward, const std::vector<int64_t>& max_bundle, const Limit& limit, std::vector<uint64_t>* out);
  bool has_work(bool allow_forward);
  size_t size() const { return size_; }
  int max_node() const { return max_node_; }  // the highest node pushed so far (-1: none)

 private:
  struct Item {
    int64_t rank, seq;
    uint64_t handle;
    bool operator<(const Item& o) const { return rank != o.rank ? rank < o.rank : seq < o.seq; }
  };
  struct Group {
    int node, direction, port;
    int tier;  // 0, or 1 for a parameterized node under light_first
    std::deque<Item> waiting;
    int64_t live = -1;     // entry number of its live heap entry
    int64_t created = 0;   // when it (re)appeared: dict order in Python, the tie-break of largest_bundle
    bool active = false;   // holds messages (is "in the dict")
  };
  struct Entry {
    int64_t rank, seq;
    int group;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : seq > o.seq; }
  };
  using Heap = std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>>;

  int group_of(int node, int direction, int port);
  Heap& heap_of(int tier, int direction) { return heaps_[2 * tier + (direction == kForward)]; }
  const Entry* top(Heap& heap);
  void retire(Group& g);

  bool fifo_;
  bool tiered_;
  Order order_;
  std::vector<char> parameterized_;  // per node (light_first's tiers)
  std::vector<Group> groups_;
  std::vector<std::vector<int>> dense_;       // [node * 3 + direction][port] -> group (-1: none yet)
  std::unordered_map<uint64_t, int> index_;  // packed (node, direction, port) -> group, for any other index
  Heap heaps_[4];  // [2 * tier + 0]: backward and updates, [2 * tier + 1]: forward
  int64_t seq_ = 0;
  int64_t created_ = 0;
  size_t size_ = 0;
  int max_node_ = -1;
};

}  // namespace amp
