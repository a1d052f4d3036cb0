// See credits.h.
#include "credits.h"

#include <stdexcept>
#include <string>

namespace amp {

void Ledger::inject_key(int64_t key, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  keys_[key] += n;
  peak_keys_ = std::max(peak_keys_, static_cast<int64_t>(keys_.size()));
}

void Ledger::inject_keys(const std::vector<std::pair<int64_t, int64_t>>& keys) {
  if (keys.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, n] : keys) keys_[key] += n;
  peak_keys_ = std::max(peak_keys_, static_cast<int64_t>(keys_.size()));
}

void Ledger::inject_flush(int64_t flush_id, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  flushes_[flush_id] += n;
}

void Ledger::add(Span<const int64_t> out_keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t k : out_keys) keys_[k] += 1;
}

void Ledger::give_up(CountMap& counts, int64_t id, std::vector<int64_t>* completed,
                     std::vector<int64_t>* queue) {
  int64_t* count = counts.find(id);
  if (count == nullptr) throw std::logic_error("credit released for " + std::to_string(id) + ", which holds none");
  if (--*count == 0) {
    counts.erase(id);
    completed->push_back(id);
    queue->push_back(id);
  }
}

bool Ledger::transfers_only(Span<const Credit> bundle, Span<const int64_t> out_keys) {
  if (bundle.size() != out_keys.size()) return false;
  bool same_order = true;
  for (size_t i = 0; i < bundle.size(); ++i) {
    if (bundle[i].update) return false;
    same_order = same_order && bundle[i].key == out_keys[i];
  }
  if (same_order) return true;
  // A bundle whose outputs came out in another order: compare the sorted keys.
  std::vector<int64_t> in(bundle.size()), out(out_keys.begin(), out_keys.end());
  for (size_t i = 0; i < bundle.size(); ++i) in[i] = bundle[i].key;
  std::sort(in.begin(), in.end());
  std::sort(out.begin(), out.end());
  return in == out;
}

bool Ledger::release(Span<const Credit> bundle, Span<const int64_t> out_keys, std::vector<int64_t>* done,
                     std::vector<int64_t>* flushed) {
  // Each credit passes to an output of its key: the counts stay, none reaches zero, nothing to lock. The
  // handled messages hold their credits until now, so every key here has a count of at least one.
  if (transfers_only(bundle, out_keys)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t k : out_keys) keys_[k] += 1;
  for (const Credit& c : bundle) {
    if (c.update) give_up(flushes_, c.flush_id, flushed, &flushed_queue_);
    else give_up(keys_, c.key, done, &done_queue_);
  }
  return (!done->empty() || !flushed->empty()) && worth_waking();
}

bool Ledger::worth_waking() const {
  if (!flushed_queue_.empty()) return true;
  if (done_queue_.empty()) return false;
  return static_cast<int64_t>(done_queue_.size()) >= wake_batch_ || keys_.empty();
}

bool Ledger::set_wake_batch(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  wake_batch_ = std::max<int64_t>(1, n);
  return worth_waking();
}

void Ledger::drain(std::vector<int64_t>* done, std::vector<int64_t>* flushed) {
  std::lock_guard<std::mutex> lock(mu_);
  done->swap(done_queue_);
  flushed->swap(flushed_queue_);
  done_queue_.clear();
  flushed_queue_.clear();
}

namespace {
std::unordered_map<int64_t, int64_t> as_map(const CountMap& counts) {
  std::unordered_map<int64_t, int64_t> out;
  counts.for_each([&](int64_t id, int64_t n) { out.emplace(id, n); });
  return out;
}
}  // namespace

std::unordered_map<int64_t, int64_t> Ledger::outstanding() {
  std::lock_guard<std::mutex> lock(mu_);
  return as_map(keys_);
}

std::unordered_map<int64_t, int64_t> Ledger::outstanding_flushes() {
  std::lock_guard<std::mutex> lock(mu_);
  return as_map(flushes_);
}

int64_t Ledger::keys_in_flight() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(keys_.size());
}

int64_t Ledger::peak_keys() {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_keys_;
}

bool Ledger::busy() {
  std::lock_guard<std::mutex> lock(mu_);
  return !keys_.empty() || !flushes_.empty();
}

}  // namespace amp
