// The native worker loop: runtime/worker.py's Worker.step and the threaded backend's loop, in native code,
// on one std::thread per worker that holds no GIL (it takes it only to run a bridged op or a node's Python
// update).
//
//   loop (worker.cc):
//     drain the mailbox (a vector swapped out under the worker's mutex) into the slab and the Inbox
//     take a bundle: backward first / oldest key first as configured, forward only while not paused, at most
//       the node's live max_bundle, and for the gradients of a locally updating node no more than its next
//       update needs (runtime/worker.py bundle_cap)
//     nothing to take: spin on the mailbox's count for a while that adapts to how the worker's recent sleeps
//       ended (idle in worker.cc), then sleep on the condition variable; a sender notifies only a sleeper, so
//       a busy pipeline pays no wake-up cost; knob changes and stop wake it too
//     step the bundle
//     the loop counts where its time goes (Times): inside ops, waiting in idle(), and its whole life
//   step (step.cc), Worker.step's order exactly:
//     forward: the kernel (train = the key trains and a backward will come back); fwd_version[state] =
//       version for a parameterized node; outputs routed by port index; a loss's kLossPort outputs of
//       training keys start the backward at once (kernel.backward(kLossPort, 1.0)); loss reports checked
//       for NaN/inf (raise: the run stops before the backward leaves; skip: report dropped, key counted)
//     backward: the kernel, then per gradient of a parameterized node a staleness row (version -
//       fwd_version) and the count toward min_update_frequency (amp mode: an update becomes due)
//     update (a flush's message): apply the node's optimizer
//     trace row (event + bundle members); if an update is due: the outputs' credits are added and they are
//       delivered first, then the update runs (its own trace row); then the bundle's credits are released
//       with whatever was not delivered yet, and that is delivered; completed keys wake the driver.
//   An update checks the accumulators for NaN/inf (raise or skip, runtime/numerics.py), then steps the
//   native optimizer (optim.h) or calls the node's Python update under the GIL.
//   Any failure (OpError, ExpressionFailure, PythonFailure, non-finite values, a C++ exception) stops the
//   run: the worker records it with the bundle's node, direction, port, states and payloads (Failure in
//   engine.h) and the driver raises the NodeError.
//
// Message memory: the inbox holds handles into the worker's slab (a deque: pushing never moves a message);
// a taken bundle is moved out of the slab into the step's own vector, so delivering into the own inbox
// during the step cannot disturb it. Never touches Python (bridged kernels and the Python update hook do).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "credits.h"
#include "inbox.h"
#include "kernels/kernel.h"
#include "trace.h"

namespace amp {

class Engine;
class Simulation;
struct NodeState;

// The newest bundle's weight in a node's seconds per message (runtime/worker.py PER_MESSAGE_WEIGHT).
constexpr double kPerMessageWeight = 0.25;

// A message between nodes: runtime's Message with the port as an index (input port forward, output port
// backward, 0 for a flush's update) and the key read once from the state.
struct Message {
  int32_t node = 0;
  int32_t port = 0;
  int8_t direction = kForward;
  bool train = true;  // the key trains (validation keys run forward only)
  int64_t key = 0;    // Layout::key_of(state)
  State state;
  Tensor payload;
};

// Add to a counter that one thread alone writes (others only read it): a relaxed load and store, which
// compile to plain moves, instead of an atomic read-modify-write (a locked instruction).
template <typename T>
inline void bump(std::atomic<T>& counter, T by) {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

class Worker {
 public:
  Worker(Engine& engine, int index, Inbox::Priority priority, Inbox::Order order);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void start();
  void join();
  // Messages for this worker, from any thread (another worker's step, the driver injecting a key): all of
  // them enter the mailbox under one lock with at most one wake-up, so the worker never starts on part of a
  // batch while the rest is still being posted. `msgs` is left empty.
  void post(std::vector<Message>& msgs);
  // Look again now: a knob changed, or the run stops.
  void wake();
  // Whether `node` has parameters, for the inbox's light_first tiers (set as the node is added, before a run).
  void set_parameterized(int node, bool parameterized) { inbox_.set_parameterized(node, parameterized); }
  // A message into this worker's own inbox (its own thread, or the simulation's).
  void push_local(Message&& msg);
  // The simulation (sim.h) steps the worker instead of its thread: take the next bundle and step it; returns
  // how many messages it handled (0: nothing to take), and when the step ended in virtual time.
  size_t step_next();
  double step_end() const { return step_end_; }

  // Read by any thread (the watchdog, a diagnosis).
  // The owner alone writes these (others read them now and then), on a cache line of their own: a sender's
  // writes to the mailbox never evict them from the owner's cache, nor theirs the mailbox from the sender's.
  alignas(64) std::atomic<int64_t> handled{0};  // messages handled so far
  std::atomic<int64_t> queued{0};               // messages in the inbox (depth() adds the mailbox's)
  std::atomic<int32_t> inside_node{-1};  // the bundle being handled: node (-1: idle), direction, key
  std::atomic<int32_t> inside_direction{0};
  std::atomic<int64_t> inside_key{0};
  std::atomic<int> life{0};  // 0 not started, 1 running, 2 ended
  // Where the thread's time went (a real run's; a simulation's steps are virtual and not counted here).
  struct Times {
    double loop_s = 0.0;     // the loop's life so far: from its start to its end (or to now)
    double ops_s = 0.0;      // inside the ops: each step's handling and its updates (the trace rows' spans)
    double waiting_s = 0.0;  // in idle(): nothing to take, spinning on the mailbox or asleep
    double asleep_s = 0.0;   // the part of waiting_s spent asleep on the condition variable
    int64_t sleeps = 0;      // how often it fell asleep (each costs its waker a notify and itself a wake-up)
    int64_t bundles = 0;     // steps taken
    double cpu_s = -1.0;     // the thread's CPU time over the loop, read as it ends (-1 while it runs)
  };
  // The rest of loop_s is the engine's own work: taking and draining, credits, routing to other workers,
  // trace rows. loop_s - asleep_s - cpu_s is time the thread could have run but had no core (another thread
  // had it) or waited for a lock.
  // Any thread may ask; the owner thread alone writes the counters.
  Times times() const;
  // Messages waiting for this worker: its inbox's and its mailbox's (any thread; a moment's count).
  int64_t depth() const { return queued.load(std::memory_order_relaxed) + mail_.load(std::memory_order_relaxed); }
  std::mutex state_mu;       // held during a step: a diagnosis reads the nodes' held state under it
  TraceBuffer* trace = nullptr;
  Simulation* sim = nullptr;  // set: a simulated run (virtual time, no thread; sim.h)

 private:
  void run();
  void loop();
  void drain();
  bool take(std::vector<Message>* bundle);
  void idle();                    // wait_for_mail, its time counted in times()
  void wait_for_mail(double t0);  // spin, then sleep, until mail, a knob change or stop (worker.cc)
  // step.cc
  void step(std::vector<Message>& bundle, int32_t depth);
  void handle(std::vector<Message>& msgs);
  void forward(NodeState& n, std::vector<Message>& msgs, bool key_trains);
  void backward(NodeState& n, std::vector<Message>& msgs);
  void route_forward(NodeState& n, Outputs& emitted, bool key_trains, bool train);
  void route_back(NodeState& n, Outputs& emitted);
  void take_reports(NodeState& n, bool key_trains);
  void count_gradients(NodeState& n, const std::vector<Message>& msgs);
  void apply_update(int node);
  void deliver(std::vector<Message>& outs);

  Engine& engine_;
  const int index_;
  double spin_s_;  // how long idle() spins next, adapted between config.spin_min_s and spin_max_s
  std::thread thread_;
  // the mailbox: any thread posts under mu_; `sleeping_` (under mu_) says whether a sender must notify. What
  // senders write starts a cache line, and the owner's own state starts the next one (from drained_ on).
  alignas(64) std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Message> mailbox_;
  bool sleeping_ = false;
  std::atomic<int64_t> mail_{0};  // messages in the mailbox (spinning reads it without the lock)
  alignas(64) std::vector<Message> drained_;  // the owner's: the mailbox swapped out
  uint64_t knobs_seen_ = ~0ull;  // the knob version the local copies below were read at
  // the loop's own
  Inbox inbox_;
  std::deque<Message> slab_;
  std::vector<uint64_t> free_;
  std::vector<uint64_t> handles_;
  std::vector<int64_t> max_bundle_;  // the live knobs, copied when their version moves
  std::vector<int64_t> muf_;
  // seconds per message of this worker's bundles, per node and direction (3 * node + direction; 0: not timed
  // yet), kept for nodes whose max_bundle is over 1 when the run has a bundle budget (Worker::step)
  std::vector<double> per_message_s_;
  Inbox::Limit limit_;
  // a step's scratch (capacity kept between steps)
  std::vector<Message> outs_, part_;
  std::vector<std::vector<Message>> remote_;  // deliver: a step's messages per other worker (kept: no allocation per step)
  std::vector<Tensor> xs_;
  std::vector<State> states_;
  std::vector<int64_t> keys_, out_keys_;
  std::vector<Credit> credits_;
  std::vector<int64_t> done_, flushed_;
  std::vector<Report> reports_out_;  // a loss bundle's finite reports (take_reports)
  std::vector<int> due_;
  Outputs emitted_, loss_emitted_;
  // a step's times: its start (staleness rows), when its outputs leave (a simulation's links), its end
  double step_t0_ = 0.0, send_at_ = 0.0, step_end_ = 0.0;
  std::vector<Message> sim_bundle_;
  // times(): single-writer counters (the owner adds with a relaxed load and store: no locked instruction)
  std::atomic<double> loop_t0_{0.0}, loop_t1_{0.0}, ops_s_{0.0}, waiting_s_{0.0}, asleep_s_{0.0}, cpu_s_{0.0};
  std::atomic<int64_t> sleeps_{0}, bundles_{0};
  double cpu0_ = 0.0;  // the thread's CPU time when its loop started (owner thread only)
};

// Seconds on CLOCK_MONOTONIC: the clock of Python's time.perf_counter, so trace rows line up with Python's.
double monotonic_now();

}  // namespace amp
