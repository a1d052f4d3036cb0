// One native run: the nodes (kernel, context, optimizer, version and forward versions of each), the
// workers and their threads, the credit ledger, the live knobs, and what the driver hears (completed keys
// and flushes, loss reports, keys skipped for NaN/inf, the first failure).
//
// Who touches what. A node's NodeState belongs to the worker that owns it while the run goes; the driver
// (Python, engine/backend.py) reads and writes it only when nothing is in flight (the ledger is empty, so
// every worker is idle) or after join. The ledger, the report queue and the failure are shared and
// locked. The knobs are atomics the workers read per bundle (their version tells a worker to copy them).
// The driver waits for events on a condition variable with the GIL released; a worker notifies it only
// when a step completed keys or flushes (per key, never per message) or the run failed.
//
// Locks, and the GIL: a worker never takes the GIL while it holds an engine lock, and the Python face
// releases the GIL before any call that waits on a worker (wait, join), so Python threads and workers
// cannot deadlock. Never touches Python itself: the hooks below are set by the Python face.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "credits.h"
#include "kernels/kernel.h"
#include "optim.h"
#include "worker.h"

namespace amp {

// A node of the run: its plan (fixed) and its state (owned by its worker while the run goes). Every worker
// reads a node's owner as it routes to it, and the owner writes the node's state on every message: each
// NodeState fills whole cache lines of its own (alignas), so that no two nodes' states share a line.
struct alignas(64) NodeState {
  int index = 0;
  int owner = 0;
  bool parameterized = false;
  bool receives_backward = false;        // a backward comes back to it: it caches for training keys
  std::vector<std::pair<int, int>> fwd;  // [output port] -> (node, input port); (-1, -1): not connected
  std::vector<std::pair<int, int>> bwd;  // [input port] -> (node, output port); (-1, -1): no gradient flows
  NodeCtx ctx;
  std::unique_ptr<Kernel> kernel;
  std::unique_ptr<OptimizerState> optimizer;  // null for a node updated by Python (or with no parameters)
  bool python_update = false;
  int64_t version = 0;
  StateMap<int64_t> fwd_version;  // the version at forward of each training message in flight
  std::unordered_set<int64_t> grad_keys;  // keys whose gradients the accumulators hold
};

// The first failure of a run (what the driver turns into the NodeError, or the Python exception).
struct Failure {
  enum Kind : int { kNone = 0, kOp, kExpression, kPython, kNonFiniteLoss, kNonFiniteGradient, kInternal };
  Kind kind = kNone;
  int node = -1;
  int worker = -1;        // the worker that failed
  int direction = 0;
  int port = 0;           // the messages' port (input port forward, output port backward, kLossPort)
  std::string message;    // OpError / C++ exception text
  int op_port = -1;       // OpError's input port
  int program = -1;       // ExpressionFailure
  int code = 0;
  std::vector<State> states;   // the bundle's, in order
  std::vector<Tensor> payloads;
  std::vector<bool> trains;
  std::vector<int64_t> keys;   // the keys a non-finite value concerns
  Report report;               // a non-finite loss
  std::shared_ptr<void> python;  // a PythonFailure's exception
};

struct EngineConfig {
  int workers = 1;
  Inbox::Priority priority = Inbox::Priority::kBackwardFirst;
  Inbox::Order order = Inbox::Order::kOldestKey;
  bool local_updates = true;  // amp mode: update after min_update_frequency gradients
  int numerics = 1;           // 0 ignore, 1 raise, 2 skip (runtime/numerics.py on_nonfinite)
  bool tracing = true;
  // how long an idle worker watches its mailbox before it sleeps: each worker adapts its own spin between
  // the two (Worker::idle); equal bounds give a fixed spin, 0 sleeps at once
  double spin_min_s = 25e-6;
  double spin_max_s = 400e-6;
  // the most op time a bundle may hold (runtime/worker.py, "The bundle budget"); 0: no limit
  double bundle_budget_s = 0.0;
};

class Engine {
 public:
  Engine(EngineConfig config, Layout layout, int n_nodes);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Hooks the Python face sets: give a worker thread a Python thread state for the run (attach returns a
  // token detach takes back), and a node's Python update: (node, n_grads, grad keys, version) -> updated.
  std::function<void*()> attach_thread;
  std::function<void(void*)> detach_thread;
  std::function<bool(int, int64_t, const std::vector<int64_t>&, int64_t)> python_update;

  void start();
  void stop();  // every worker ends after its step in hand (any thread)
  void join();  // wait for every worker thread (never with the GIL held)
  bool started() const { return started_; }

  // The driver.
  void inject(std::vector<Message>& msgs);  // credits already registered with `ledger`

  // The admission gate (threads, amp mode). The controller may admit a few keys beyond max_active_keys, so
  // that a key can start the moment another completes instead of when the driver next wakes (on a machine
  // whose cores the workers fill, that wake waits for a core). The engine then keeps at most `key_limit` keys
  // in flight and holds the others at the gate, in admission order, with their messages built and their
  // credits not yet registered; a worker whose step completed keys lets held keys in (refill). A key moves
  // from the gate into the ledger under the gate's lock, so busy() never misses a key between the two.
  // Locks: the gate's before the ledger's, never the other way; messages are posted after both are released.
  using AdmittedKey = std::pair<int64_t, std::vector<Message>>;  // a key and its input messages
  void admit(std::vector<AdmittedKey>& keys);  // their credits registered here (or when they leave the gate)
  // 0: no gate (every admitted key goes in at once). Held keys go in `batch` at a time (fewer when fewer are
  // held; 1 <= batch <= limit): keys that start together travel the graph together, and their messages meet
  // in the same bundles, as when the driver admitted a wake's worth at once; one by one, each would start a
  // bundle of its own (a quarter more steps on the GG-NN on 2 workers).
  void set_key_limit(int64_t limit, int64_t batch);
  // Let held keys in while there is room: their messages go to `out` (cleared first), for the calling worker
  // to deliver as its own step's outputs once the gate's lock is released.
  void refill(std::vector<Message>* out);
  bool gated() const { return gated_.load(std::memory_order_relaxed); }
  int64_t held_keys();    // keys held at the gate now
  int64_t keys_held();    // keys that waited at the gate so far
  bool busy();            // a key or flush in flight, or a key held at the gate
  // Block until `wake_batch` keys completed (fewer once no key is left in flight) or a flush did, the run
  // failed, notify() was called, or `timeout_s` passed; the completed keys and flushes since the last call
  // (in order) go to `done` and `flushed`.
  bool wait(double timeout_s, int64_t wake_batch, std::vector<int64_t>* done, std::vector<int64_t>* flushed);
  void notify();  // wake a waiting driver (a queued call from another Python thread)
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  const Failure& failure() const { return failure_; }
  // Drop the failure's Python exception once the driver holds it: the exception's traceback reaches the
  // driver's frames, which hold this engine, a cycle Python's collector cannot see through.
  void forget_python_failure();
  void take_reports(std::vector<Report>* out);
  void take_skipped(std::vector<int64_t>* out);

  // Live knobs (any thread).
  void set_max_bundle(const std::vector<int>& nodes, int64_t m);
  void set_min_update_frequency(const std::vector<int>& nodes, int64_t m);
  void set_paused(bool paused);
  // Fault injection (the restart harness): worker `w` fails in its own loop at its next bundle, as a native
  // worker whose own code fails would. Read with the live knobs, so it costs the loop nothing.
  void doom(int w);
  int doomed() const { return doomed_.load(std::memory_order_relaxed); }
  int64_t max_bundle(int node) const { return max_bundle_[node].load(std::memory_order_relaxed); }
  int64_t min_update_frequency(int node) const { return muf_[node].load(std::memory_order_relaxed); }
  bool paused() const { return paused_.load(std::memory_order_relaxed); }
  uint64_t knob_version() const { return knob_version_.load(std::memory_order_acquire); }

  // Workers.
  void fail(Failure&& failure);  // the first failure stops the run; later ones are dropped
  void completed();              // a step completed enough keys, or a flush (Ledger::release): wake the driver
  void add_reports(const std::vector<Report>& reports);  // a bundle's, in order, under one lock
  void add_skipped(const std::unordered_set<int64_t>& keys);
  void add_skipped(int64_t key);
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  // The layout below keeps what every worker reads on every step (the configuration, the nodes, the workers,
  // the knobs, stop) off the cache lines that workers write as they go (the ledger's lock and counts, the
  // gate, the driver's wake-up, the reports): each written group starts a line of its own (alignas), so a
  // worker's write there never takes a line that the other workers are reading. On this project's 2-core VM,
  // where a line took 40 to 200 ns to move between the cores depending on where the host ran them, that sharing
  // could cost a miss per message routed to another worker.
  const EngineConfig config;
  const Layout layout;
  std::vector<std::unique_ptr<NodeState>> nodes;
  std::vector<std::unique_ptr<Worker>> workers;
  alignas(64) Ledger ledger;

 private:
  alignas(64) std::unique_ptr<std::atomic<int64_t>[]> max_bundle_, muf_;
  std::atomic<bool> paused_{false};
  std::atomic<int> doomed_{-1};
  std::atomic<uint64_t> knob_version_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> failed_{false};
  std::atomic<bool> gated_{false};  // the admission gate is on (set_key_limit); read as keys complete
  bool started_ = false;
  bool joined_ = false;
  Failure failure_;
  std::mutex failure_mu_;
  // the driver's wake-up
  alignas(64) std::mutex event_mu_;
  std::condition_variable event_cv_;
  bool event_pending_ = false;
  bool driver_waiting_ = false;
  // the admission gate
  alignas(64) std::mutex gate_mu_;
  std::deque<AdmittedKey> held_;
  int64_t key_limit_ = 0;
  int64_t key_batch_ = 1;
  int64_t held_total_ = 0;
  std::vector<std::pair<int64_t, int64_t>> let_in_credits_;  // let_in's (key, messages), kept: no allocation per call
  // Move keys from the gate's front into the ledger while there is room (gate_mu_ held); their messages go
  // to `out`, to be posted once the lock is released.
  void let_in(std::vector<Message>* out);
  // what workers hand to the driver
  alignas(64) std::mutex report_mu_;
  std::vector<Report> reports_;
  std::vector<int64_t> skipped_;
};

}  // namespace amp
