// The credit ledger (runtime/credits.py): how the engine knows a key (or a flush) is complete without
// asking any model. A key's count starts at the messages injected for it; each handled message gives up
// its credit and gives one to each message it emits (an op never changes a message's key); the key is
// complete when its count reaches zero. A flush counts its update messages the same way.
// The worker adds the credits of emitted messages before delivering them and releases the handled
// bundle's only after its local updates, so no other worker can drive a count to zero early.
// Completion goes to Python per key (a queue the controller drains), never per message. The driver need
// not hear of every key at once: it names how many completed keys are worth a wake-up (`wake_batch`, from
// the controller's max_active_keys), and release() says when the queue reached it, when no key is left in
// flight (nothing else will complete), or when a flush completed. The rest wait for the next wake.
// Shared by every worker of a run: one mutex, held for a few map updates per bundle. Most steps hand each
// message's credit straight to its one output of the same key (a chain's step: one in, one out); no count
// changes then, so release() sees that before it locks and touches nothing (`transfers_only`).
#pragma once

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"
#include "counts.h"

namespace amp {

struct Credit {
  int64_t key;       // the message key (Layout::key_of)
  bool update;       // an update message of a flush
  int64_t flush_id;  // for an update message
};

class Ledger {
 public:
  void inject_key(int64_t key, int64_t n);
  void inject_keys(const std::vector<std::pair<int64_t, int64_t>>& keys);  // (key, n) each, under one lock
  void inject_flush(int64_t flush_id, int64_t n);
  // Credits for emitted messages about to be delivered before their bundle is released.
  void add(Span<const int64_t> out_keys);
  // The handled bundle gives up its credits, `out_keys` (not yet counted) get theirs; keys and flushes
  // that completed are appended to `done` / `flushed` and to the completion queue.
  // Returns whether the driver should be woken now (class comment).
  bool release(Span<const Credit> bundle, Span<const int64_t> out_keys, std::vector<int64_t>* done,
               std::vector<int64_t>* flushed);
  // How many completed keys wake the driver (at least 1); returns whether the queue is worth a wake now.
  bool set_wake_batch(int64_t n);
  // What completed since the last call (the controller's per-key events).
  void drain(std::vector<int64_t>* done, std::vector<int64_t>* flushed);
  std::unordered_map<int64_t, int64_t> outstanding();
  std::unordered_map<int64_t, int64_t> outstanding_flushes();
  bool busy();  // any key or flush in flight
  int64_t keys_in_flight();  // keys with credits outstanding
  int64_t peak_keys();       // the most keys in flight at once so far (tests: the admission gate held)

 private:
  bool worth_waking() const;  // whether the completion queue is worth a wake (class comment); mu_ held
  // Whether handling `bundle` and emitting `out_keys` leaves every count as it was: no update message, and
  // the emitted keys are the handled ones, as a multiset (the common case is checked first: the same keys
  // in the same order).
  static bool transfers_only(Span<const Credit> bundle, Span<const int64_t> out_keys);
  void give_up(CountMap& counts, int64_t id, std::vector<int64_t>* completed,
               std::vector<int64_t>* queue);
  std::mutex mu_;
  CountMap keys_, flushes_;  // counts.h: no allocation per key, one or two cache lines per update
  std::vector<int64_t> done_queue_, flushed_queue_;
  int64_t wake_batch_ = 1;
  int64_t peak_keys_ = 0;
};

}  // namespace amp
