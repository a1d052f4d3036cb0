// The simulated-hardware backend (runtime/backends/simulated.py) in native code: the engine's workers stepped
// one at a time on the caller's thread, on a virtual clock that a cost model advances. No worker thread runs.
//
// The algorithm is the Python simulator's, event for event, so both give the same trace, bit for bit. One heap
// orders events by (virtual time, kind, sequence number); at one instant arrivals come first, then key
// completions, then workers taking their next bundle; the sequence number (one counter for every event
// scheduled) breaks the remaining ties in the order events were scheduled.
//   FREE(w) at t: worker w takes its next bundle (none: it goes idle) and steps it at once (step.cc). The step
//     starts at t and its handling ends at `ends(t, bundle)`: the per-call overhead once (the largest of the
//     bundle's) plus the work of every message, each read from a cache keyed by (node, direction, dtype, shape)
//     that asks the cost model (a hook the Python face sets) on a miss, plus the receiving time w owes (below).
//     A local update after it ends `update_s[node]` later. The worker's next FREE is at the step's end.
//   ARRIVE(w, message): a message from another worker lands in w's inbox; an idle w gets a FREE now. w owes
//     the time it takes to receive it, receive_overhead + receive_per_byte * bytes (both zero unless the cost
//     model charges receiving), and pays what it owes in its next step. A step's
//     outputs to another worker leave when its handling ends and arrive after the link's latency plus
//     8 * bytes * seconds per bit (bytes from the same cache, of the receiving node); outputs to its own worker
//     go straight into its inbox, where only it sees them, after its step.
//   COMPLETE(keys, flushes) at the end of the step that completed them: run() returns them to the driver, whose
//     controller admits keys (inject: into their workers' inboxes at that virtual time, no link cost) and
//     starts flushes.
// A cost hook that raises (a Python exception, as a PythonFailure) fails the run once the step in hand is
// done, with that exception unchanged and no node named: the Python simulator raises the cost model's error
// as it is. Touches Python only through the cost hook (set by the Python face, which takes the GIL for it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensor.h"

namespace amp {

class Engine;
struct Message;

// What the cost model charges for one message at a node: seconds of per-call overhead (paid once per bundle),
// seconds of work (paid per message), and the bytes it puts on a link.
struct SimCost {
  double overhead = 0.0;
  double work = 0.0;
  int64_t bytes = 0;
};

class Simulation {
 public:
  // (node, direction, payload) -> its cost; called once per distinct (node, direction, dtype, shape).
  using CostHook = std::function<SimCost(int node, int direction, const Tensor& payload)>;

  // latency and seconds_per_bit: workers x workers, row-major (from, to); update_s: one per node;
  // receive_overhead and receive_per_byte: a worker's seconds per message received from another worker and per
  // byte of it (all finite and >= 0, checked by the caller).
  Simulation(Engine& engine, std::vector<double> latency, std::vector<double> seconds_per_bit,
             std::vector<double> update_s, double receive_overhead, double receive_per_byte, CostHook cost);

  // The driver: messages admitted now (credits already registered); then events until the next completion
  // (true, its keys and flushes in `done` / `flushed`), a failure, or no event left (false; the caller asks
  // the engine whether it failed).
  void inject(std::vector<Message>& msgs);
  bool run(std::vector<int64_t>* done, std::vector<int64_t>* flushed);
  double now() const { return now_; }

  // The step's side (step.cc): when the stepping worker's handling of a bundle begun at `start` ends (what it
  // owes for receiving is paid here); a message sent to another worker at `at`; keys and flushes a step
  // completed at `end`.
  double ends(double start, const std::vector<Message>& bundle);
  double updated(double start, int node) const { return start + update_s_[static_cast<size_t>(node)]; }
  void send(int from, int to, Message&& msg, double at);
  void completed(double end, const std::vector<int64_t>& done, const std::vector<int64_t>& flushed);

  int64_t messages = 0;  // handled
  int64_t bundles = 0;
  std::vector<int64_t> link_bytes, link_messages;  // workers x workers, row-major (from, to)

 private:
  enum Kind : int { kArrive = 0, kComplete = 1, kFree = 2 };
  struct Event {
    double t;
    int kind;
    uint64_t seq;
    int worker;
    size_t slot;  // kArrive: parked_ index; kComplete: completions_ index
  };
  struct CostKey {
    int node;
    int direction;
    int dtype;  // -1: no payload
    int rank;
    int64_t shape[4];
    bool operator==(const CostKey& o) const;
  };
  struct CostKeyHash {
    size_t operator()(const CostKey& k) const;
  };

  const SimCost& cost(int node, int direction, const Tensor& payload);
  void schedule(double t, int kind, int worker, size_t slot);
  template <class T>
  static size_t park(std::vector<T>& store, std::vector<size_t>& free, T&& item);

  Engine& engine_;
  const int workers_;
  std::vector<double> latency_, seconds_per_bit_, update_s_;
  const double receive_overhead_, receive_per_byte_;
  const bool receives_;       // either is > 0
  std::vector<double> owed_;  // per worker: receiving time its next step pays
  size_t stepping_ = 0;       // the worker whose step run() is taking (ends() charges it)
  CostHook cost_hook_;
  std::unordered_map<CostKey, SimCost, CostKeyHash> costs_;
  std::vector<Event> heap_;
  uint64_t seq_ = 0;
  double now_ = 0.0;
  std::vector<char> busy_;
  std::vector<Message> parked_;  // messages on a link
  std::vector<size_t> parked_free_;
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> completions_;
  std::vector<size_t> completions_free_;
  std::vector<int64_t> drained_done_, drained_flushed_;
  std::shared_ptr<void> hook_error_;  // the cost hook's exception, raised after the step in hand
};

}  // namespace amp
