// See engine.h.
#include "engine.h"

#include <chrono>
#include <limits>

namespace amp {

Engine::Engine(EngineConfig cfg, Layout lay, int n_nodes)
    : config(cfg),
      layout(std::move(lay)),
      max_bundle_(new std::atomic<int64_t>[static_cast<size_t>(n_nodes)]),
      muf_(new std::atomic<int64_t>[static_cast<size_t>(n_nodes)]) {
  for (int i = 0; i < n_nodes; ++i) {
    max_bundle_[i].store(1);
    muf_[i].store(1);
    nodes.push_back(std::make_unique<NodeState>());
    nodes.back()->index = i;
  }
  for (int w = 0; w < config.workers; ++w)
    workers.push_back(std::make_unique<Worker>(*this, w, config.priority, config.order));
}

Engine::~Engine() {
  stop();
  join();
}

void Engine::start() {
  if (started_) return;
  started_ = true;
  for (auto& w : workers) w->start();
}

void Engine::stop() {
  stopping_.store(true, std::memory_order_release);
  for (auto& w : workers) w->wake();
  notify();
}

void Engine::join() {
  if (!started_ || joined_) return;
  for (auto& w : workers) w->join();
  joined_ = true;
}

// A key's messages reach each worker together (Worker::post): a worker woken by the first cannot start
// the key before the rest have arrived, so the order a run handles them in does not hang on the driver's
// timing (a sync run on one worker is then repeatable, report for report).
void Engine::inject(std::vector<Message>& msgs) {
  std::vector<std::vector<Message>> per_worker(workers.size());
  for (Message& m : msgs) per_worker[static_cast<size_t>(nodes[static_cast<size_t>(m.node)]->owner)].push_back(std::move(m));
  for (size_t w = 0; w < workers.size(); ++w) workers[w]->post(per_worker[w]);
  msgs.clear();
}

void Engine::admit(std::vector<AdmittedKey>& keys) {
  std::vector<Message> now;
  {
    std::lock_guard<std::mutex> lock(gate_mu_);
    const size_t n = keys.size();
    for (AdmittedKey& k : keys) held_.push_back(std::move(k));
    let_in(&now);
    held_total_ += static_cast<int64_t>(std::min(n, held_.size()));  // the newest are the ones left waiting
  }
  keys.clear();
  inject(now);
}

void Engine::let_in(std::vector<Message>* out) {
  const int64_t limit = key_limit_ > 0 ? key_limit_ : std::numeric_limits<int64_t>::max();
  int64_t room = held_.empty() ? 0 : limit - ledger.keys_in_flight();
  // a batch at a time; never stuck, since with no key in flight the room is the limit, at least a batch
  if (key_limit_ > 0 && room < std::min<int64_t>(key_batch_, static_cast<int64_t>(held_.size()))) return;
  std::vector<std::pair<int64_t, int64_t>>& credits = let_in_credits_;
  credits.clear();
  while (room > 0 && !held_.empty()) {
    AdmittedKey& k = held_.front();
    credits.emplace_back(k.first, static_cast<int64_t>(k.second.size()));
    for (Message& m : k.second) out->push_back(std::move(m));
    held_.pop_front();
    --room;
  }
  ledger.inject_keys(credits);
}

void Engine::set_key_limit(int64_t limit, int64_t batch) {
  std::vector<Message> now;
  {
    std::lock_guard<std::mutex> lock(gate_mu_);
    key_limit_ = std::max<int64_t>(0, limit);
    key_batch_ = std::clamp<int64_t>(batch, 1, std::max<int64_t>(1, key_limit_));
    gated_.store(key_limit_ > 0, std::memory_order_relaxed);
    let_in(&now);
  }
  inject(now);
}

void Engine::refill(std::vector<Message>* out) {
  out->clear();
  std::lock_guard<std::mutex> lock(gate_mu_);
  if (!held_.empty()) let_in(out);
}

int64_t Engine::held_keys() {
  std::lock_guard<std::mutex> lock(gate_mu_);
  return static_cast<int64_t>(held_.size());
}

int64_t Engine::keys_held() {
  std::lock_guard<std::mutex> lock(gate_mu_);
  return held_total_;
}

bool Engine::busy() {
  std::lock_guard<std::mutex> lock(gate_mu_);
  return !held_.empty() || ledger.busy();
}

bool Engine::wait(double timeout_s, int64_t wake_batch, std::vector<int64_t>* done, std::vector<int64_t>* flushed) {
  {
    // The batch is set before the event lock is taken: a worker that completes keys from here on judges by
    // it, and what completed before is judged now (a smaller batch may make it worth a wake already).
    const bool ready = ledger.set_wake_batch(wake_batch);
    std::unique_lock<std::mutex> lock(event_mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (!ready && !event_pending_ && !failed()) {
      driver_waiting_ = true;
      if (event_cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
    }
    driver_waiting_ = false;
    event_pending_ = false;
  }
  ledger.drain(done, flushed);
  return failed();
}

void Engine::notify() {
  std::lock_guard<std::mutex> lock(event_mu_);
  event_pending_ = true;
  if (driver_waiting_) event_cv_.notify_one();
}

void Engine::completed() { notify(); }

void Engine::fail(Failure&& f) {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (failed()) return;
    failure_ = std::move(f);
    failed_.store(true, std::memory_order_release);
  }
  stop();
}

void Engine::forget_python_failure() {
  std::shared_ptr<void> dropped;  // released after the lock (its deleter takes the GIL)
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    dropped.swap(failure_.python);
  }
}

void Engine::take_reports(std::vector<Report>* out) {
  std::lock_guard<std::mutex> lock(report_mu_);
  out->swap(reports_);
  reports_.clear();
}

void Engine::take_skipped(std::vector<int64_t>* out) {
  std::lock_guard<std::mutex> lock(report_mu_);
  out->swap(skipped_);
  skipped_.clear();
}

void Engine::add_reports(const std::vector<Report>& reports) {
  std::lock_guard<std::mutex> lock(report_mu_);
  reports_.insert(reports_.end(), reports.begin(), reports.end());
}

void Engine::add_skipped(const std::unordered_set<int64_t>& keys) {
  std::lock_guard<std::mutex> lock(report_mu_);
  skipped_.insert(skipped_.end(), keys.begin(), keys.end());
}

void Engine::add_skipped(int64_t key) {
  std::lock_guard<std::mutex> lock(report_mu_);
  skipped_.push_back(key);
}

void Engine::set_max_bundle(const std::vector<int>& which, int64_t m) {
  for (int i : which) max_bundle_[i].store(m, std::memory_order_relaxed);
  knob_version_.fetch_add(1, std::memory_order_acq_rel);
  for (auto& w : workers) w->wake();
}

void Engine::set_min_update_frequency(const std::vector<int>& which, int64_t m) {
  for (int i : which) muf_[i].store(m, std::memory_order_relaxed);
  knob_version_.fetch_add(1, std::memory_order_acq_rel);
  for (auto& w : workers) w->wake();
}

void Engine::doom(int w) {
  doomed_.store(w, std::memory_order_relaxed);
  knob_version_.fetch_add(1, std::memory_order_acq_rel);
  for (auto& worker : workers) worker->wake();
}

void Engine::set_paused(bool p) {
  paused_.store(p, std::memory_order_relaxed);
  knob_version_.fetch_add(1, std::memory_order_acq_rel);
  for (auto& w : workers) w->wake();
}

}  // namespace amp
