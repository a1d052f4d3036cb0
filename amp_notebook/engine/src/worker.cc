// The worker's loop: mailbox, inbox, idling and the thread (see worker.h); the step is in step.cc.
#include "worker.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define AMP_CPU_RELAX() _mm_pause()
#else
#define AMP_CPU_RELAX() std::this_thread::yield()
#endif

namespace amp {

double monotonic_now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

namespace {
// The calling thread's CPU time in seconds (a system call, not the vDSO: read as the loop starts and ends).
double thread_cpu_now() {
  timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0.0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

constexpr auto kIdleWait = std::chrono::milliseconds(50);  // a lost wake-up costs at most this
}

Worker::Worker(Engine& engine, int index, Inbox::Priority priority, Inbox::Order order)
    : engine_(engine), index_(index), spin_s_(engine.config.spin_min_s), inbox_(priority, order) {
  limit_ = [this](int node, int direction) -> int64_t {
    int64_t cap = max_bundle_[static_cast<size_t>(node)];
    const NodeState& n = *engine_.nodes[static_cast<size_t>(node)];
    if (cap > 1 && direction == kBackward && engine_.config.local_updates && n.parameterized) {
      int64_t need = muf_[static_cast<size_t>(node)] - n.ctx.n_grads;
      cap = std::min(cap, need > 1 ? need : int64_t{1});
    }
    // the bundle budget: no more messages than fit in it at the rate this worker measured (runtime/worker.py)
    const double budget = engine_.config.bundle_budget_s;
    if (cap > 1 && budget > 0.0) {
      const double seconds = per_message_s_[3 * static_cast<size_t>(node) + static_cast<size_t>(direction)];
      if (seconds > 0.0) {
        const double fit = budget / seconds;  // >= 1 messages when it fits, else the first one alone
        if (fit < static_cast<double>(cap)) cap = fit >= 1.0 ? static_cast<int64_t>(fit) : int64_t{1};
      }
    }
    return cap;
  };
}

Worker::~Worker() { join(); }

void Worker::start() {
  life.store(1);
  thread_ = std::thread([this] { run(); });
}

void Worker::join() {
  if (thread_.joinable()) thread_.join();
}

void Worker::run() {
  const std::string name = "amp-native-" + std::to_string(index_);  // what /proc/<pid>/task/*/comm shows
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  void* token = engine_.attach_thread ? engine_.attach_thread() : nullptr;
  cpu0_ = thread_cpu_now();
  loop_t0_.store(monotonic_now(), std::memory_order_relaxed);
  try {
    loop();
  } catch (const std::exception& e) {  // the loop's own failure (allocation): stop the run, say what
    Failure f;
    f.kind = Failure::kInternal;
    f.worker = index_;
    f.message = std::string("worker ") + std::to_string(index_) + ": " + e.what();
    engine_.fail(std::move(f));
  }
  inside_node.store(-1);
  cpu_s_.store(thread_cpu_now() - cpu0_, std::memory_order_relaxed);
  loop_t1_.store(monotonic_now(), std::memory_order_release);  // after cpu_s_: a reader of loop_t1_ sees it
  if (engine_.detach_thread) engine_.detach_thread(token);
  life.store(2);
  engine_.notify();
}

void Worker::post(std::vector<Message>& msgs) {
  if (msgs.empty()) return;
  const auto n = static_cast<int64_t>(msgs.size());
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Message& m : msgs) mailbox_.push_back(std::move(m));
    wake = sleeping_;
  }
  msgs.clear();
  mail_.fetch_add(n, std::memory_order_release);
  if (wake) cv_.notify_one();
}

void Worker::wake() {
  { std::lock_guard<std::mutex> lock(mu_); }  // a sleeper is either asleep (and notified) or sees the change
  cv_.notify_one();
}

void Worker::drain() {
  if (mail_.load(std::memory_order_acquire) == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    drained_.swap(mailbox_);
    mail_.store(0, std::memory_order_relaxed);
  }
  for (Message& m : drained_) push_local(std::move(m));
  drained_.clear();
}

void Worker::push_local(Message&& msg) {
  uint64_t handle;
  if (free_.empty()) {
    handle = slab_.size();
    slab_.push_back(std::move(msg));
  } else {
    handle = free_.back();
    free_.pop_back();
    slab_[handle] = std::move(msg);
  }
  const Message& m = slab_[handle];
  inbox_.push(handle, m.node, m.direction, m.port, m.key);
  bump(queued, int64_t{1});
}

bool Worker::take(std::vector<Message>* bundle) {
  const uint64_t version = engine_.knob_version();
  if (version != knobs_seen_) {  // copy the live knobs once per change, not per bundle
    knobs_seen_ = version;
    if (engine_.doomed() == index_) throw std::runtime_error("a fatal error injected into this worker's loop");
    const size_t n = engine_.nodes.size();
    max_bundle_.resize(n);
    muf_.resize(n);
    per_message_s_.resize(3 * n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      max_bundle_[i] = engine_.max_bundle(static_cast<int>(i));
      muf_[i] = engine_.min_update_frequency(static_cast<int>(i));
    }
  }
  // a simulation takes forward messages while paused, as the Python simulator does
  if (!inbox_.take(sim != nullptr || !engine_.paused(), max_bundle_, limit_, &handles_)) return false;
  bundle->clear();
  for (uint64_t h : handles_) {
    bundle->push_back(std::move(slab_[h]));
    slab_[h].payload = Tensor();
    free_.push_back(h);
  }
  bump(queued, -static_cast<int64_t>(handles_.size()));
  return true;
}

// Spin before sleeping: the next message is often close, and a sleeper costs its sender a wake-up (25-40 us
// on a VM) and itself a context switch.
//   - The spin is bounded by time, not by a count of pause instructions: a pause takes from a few to ~140
//     cycles depending on the CPU, so a count tuned on one machine spins ten times longer on another. The
//     clock is read every 64 pauses (well under a microsecond apart on any CPU).
//   - Each worker adapts its own bound, between config.spin_min_s and spin_max_s, from how its sleeps end.
//     A sleep that mail ended within spin_max_s would have been caught by a longer spin: the bound doubles
//     (at least to that gap). A sleep that lasted longer, or that a knob or stop ended, halves it. A
//     pipeline that hands messages back and forth keeps its workers spinning; a mostly idle worker (a few
//     keys in flight, a node that rarely gets work) soon spins only spin_min_s again.
//   - Past spin_min_s the spinner yields its core at every clock read, so a spinning worker gives way to the
//     driver and to other workers when there are more threads than cores.
void Worker::wait_for_mail(double t0) {
  const uint64_t version = knobs_seen_;
  const EngineConfig& config = engine_.config;
  const double until = t0 + spin_s_;
  const double yield_from = t0 + config.spin_min_s;
  for (uint32_t i = 1; spin_s_ > 0.0; ++i) {
    if (mail_.load(std::memory_order_acquire) || engine_.stopping() || engine_.knob_version() != version) return;
    AMP_CPU_RELAX();
    if ((i & 63) == 0) {
      const double now = monotonic_now();
      if (now >= until) break;
      if (now >= yield_from) std::this_thread::yield();
    }
  }
  bool mail = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!mailbox_.empty() || engine_.stopping() || engine_.knob_version() != version) return;
    sleeping_ = true;
    const double slept_from = monotonic_now();
    cv_.wait_for(lock, kIdleWait);
    sleeping_ = false;
    mail = !mailbox_.empty();
    bump(asleep_s_, monotonic_now() - slept_from);
    bump(sleeps_, int64_t{1});
  }
  const double gap = monotonic_now() - t0;
  if (mail && gap <= config.spin_max_s)
    spin_s_ = std::min(config.spin_max_s, std::max(2.0 * spin_s_, gap));
  else
    spin_s_ = std::max(config.spin_min_s, 0.5 * spin_s_);
}

// The loop's wait, its time counted (times()): one clock read more per idle spell, none per step.
void Worker::idle() {
  const double t0 = monotonic_now();
  wait_for_mail(t0);
  bump(waiting_s_, monotonic_now() - t0);
}

Worker::Times Worker::times() const {
  Times t;
  const double t0 = loop_t0_.load(std::memory_order_relaxed);
  const double t1 = loop_t1_.load(std::memory_order_acquire);
  if (t0 > 0.0) t.loop_s = (t1 > 0.0 ? t1 : monotonic_now()) - t0;
  t.ops_s = ops_s_.load(std::memory_order_relaxed);
  t.waiting_s = waiting_s_.load(std::memory_order_relaxed);
  t.asleep_s = asleep_s_.load(std::memory_order_relaxed);
  t.sleeps = sleeps_.load(std::memory_order_relaxed);
  t.bundles = bundles_.load(std::memory_order_relaxed);
  t.cpu_s = t1 > 0.0 ? cpu_s_.load(std::memory_order_relaxed) : -1.0;  // exact once the loop has ended
  return t;
}

size_t Worker::step_next() {
  if (!take(&sim_bundle_)) return 0;
  const size_t n = sim_bundle_.size();
  step(sim_bundle_, static_cast<int32_t>(depth()));
  return n;
}

void Worker::loop() {
  std::vector<Message> bundle;
  while (!engine_.stopping()) {
    drain();
    if (!take(&bundle)) {
      idle();
      continue;
    }
    step(bundle, static_cast<int32_t>(depth()));  // what waits behind it
  }
}

}  // namespace amp
