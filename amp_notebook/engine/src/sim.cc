// See sim.h.
#include "sim.h"

#include <algorithm>
#include <stdexcept>

#include "engine.h"

namespace amp {

namespace {

// A min-heap by (time, kind, sequence) with the standard library's max-heap functions: `later(a, b)` is
// whether a comes after b.
template <class E>
bool later(const E& a, const E& b) {
  if (a.t != b.t) return a.t > b.t;
  if (a.kind != b.kind) return a.kind > b.kind;
  return a.seq > b.seq;
}

}  // namespace

bool Simulation::CostKey::operator==(const CostKey& o) const {
  if (node != o.node || direction != o.direction || dtype != o.dtype || rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (shape[i] != o.shape[i]) return false;
  return true;
}

size_t Simulation::CostKeyHash::operator()(const CostKey& k) const {
  // FNV-1a over the fields that take part in equality
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(static_cast<uint64_t>(k.node));
  mix(static_cast<uint64_t>(k.direction));
  mix(static_cast<uint64_t>(k.dtype));
  mix(static_cast<uint64_t>(k.rank));
  for (int i = 0; i < k.rank; ++i) mix(static_cast<uint64_t>(k.shape[i]));
  return static_cast<size_t>(h);
}

Simulation::Simulation(Engine& engine, std::vector<double> latency, std::vector<double> seconds_per_bit,
                       std::vector<double> update_s, double receive_overhead, double receive_per_byte,
                       CostHook cost)
    : engine_(engine),
      workers_(engine.config.workers),
      latency_(std::move(latency)),
      seconds_per_bit_(std::move(seconds_per_bit)),
      update_s_(std::move(update_s)),
      receive_overhead_(receive_overhead),
      receive_per_byte_(receive_per_byte),
      receives_(receive_overhead > 0 || receive_per_byte > 0),
      cost_hook_(std::move(cost)) {
  const size_t links = static_cast<size_t>(workers_) * static_cast<size_t>(workers_);
  if (latency_.size() != links || seconds_per_bit_.size() != links)
    throw std::invalid_argument("simulation: latency and seconds_per_bit are workers x workers");
  if (update_s_.size() != engine.nodes.size()) throw std::invalid_argument("simulation: one update_s per node");
  link_bytes.assign(links, 0);
  link_messages.assign(links, 0);
  busy_.assign(static_cast<size_t>(workers_), 0);
  owed_.assign(static_cast<size_t>(workers_), 0.0);
}

template <class T>
size_t Simulation::park(std::vector<T>& store, std::vector<size_t>& free, T&& item) {
  if (free.empty()) {
    store.push_back(std::move(item));
    return store.size() - 1;
  }
  const size_t slot = free.back();
  free.pop_back();
  store[slot] = std::move(item);
  return slot;
}

void Simulation::schedule(double t, int kind, int worker, size_t slot) {
  heap_.push_back(Event{t, kind, seq_++, worker, slot});
  std::push_heap(heap_.begin(), heap_.end(), later<Event>);
}

void Simulation::inject(std::vector<Message>& msgs) {
  for (Message& m : msgs) {
    const int w = engine_.nodes[static_cast<size_t>(m.node)]->owner;
    engine_.workers[static_cast<size_t>(w)]->push_local(std::move(m));
    if (!busy_[static_cast<size_t>(w)]) {
      busy_[static_cast<size_t>(w)] = 1;
      schedule(now_, kFree, w, 0);
    }
  }
  msgs.clear();
}

bool Simulation::run(std::vector<int64_t>* done, std::vector<int64_t>* flushed) {
  while (!heap_.empty() && !engine_.failed()) {
    std::pop_heap(heap_.begin(), heap_.end(), later<Event>);
    const Event e = heap_.back();
    heap_.pop_back();
    now_ = e.t;
    const size_t w = static_cast<size_t>(e.worker);
    if (e.kind == kFree) {
      Worker& worker = *engine_.workers[w];
      stepping_ = w;
      const size_t n = worker.step_next();
      if (n == 0) {
        busy_[w] = 0;
        continue;
      }
      if (hook_error_) {
        Failure f;
        f.kind = Failure::kPython;
        f.worker = e.worker;
        f.python = std::move(hook_error_);
        hook_error_.reset();
        engine_.fail(std::move(f));
        return false;
      }
      messages += static_cast<int64_t>(n);
      bundles += 1;
      schedule(worker.step_end(), kFree, e.worker, 0);  // after the step's own events, as in Python
    } else if (e.kind == kArrive) {
      Message m = std::move(parked_[e.slot]);
      parked_free_.push_back(e.slot);
      if (receives_) {  // its bytes are cached: send() asked for them
        const double nbytes = static_cast<double>(cost(m.node, m.direction, m.payload).bytes);
        owed_[w] += receive_overhead_ + receive_per_byte_ * nbytes;
      }
      engine_.workers[w]->push_local(std::move(m));
      if (!busy_[w]) {
        busy_[w] = 1;
        schedule(now_, kFree, e.worker, 0);
      }
    } else {
      engine_.ledger.drain(&drained_done_, &drained_flushed_);  // its own queue is the threads' (this event is ours)
      auto& c = completions_[e.slot];
      done->swap(c.first);
      flushed->swap(c.second);
      c.first.clear();
      c.second.clear();
      completions_free_.push_back(e.slot);
      return true;
    }
  }
  return false;
}

const SimCost& Simulation::cost(int node, int direction, const Tensor& payload) {
  CostKey key{node, direction, -1, 0, {0, 0, 0, 0}};
  if (payload.defined()) {
    key.dtype = static_cast<int>(payload.dtype());
    key.rank = payload.rank();
    for (int i = 0; i < key.rank; ++i) key.shape[i] = payload.dim(i);
  }
  auto it = costs_.find(key);
  if (it != costs_.end()) return it->second;
  SimCost c;
  try {
    c = cost_hook_(node, direction, payload);
  } catch (const PythonFailure& error) {  // not cached: the run fails after this step (sim.h)
    if (!hook_error_) hook_error_ = error.exception;
    static const SimCost nothing{};
    return nothing;
  }
  return costs_.emplace(key, c).first->second;
}

double Simulation::ends(double start, const std::vector<Message>& bundle) {
  const Message& first = bundle.front();
  double end;
  if (bundle.size() == 1) {
    const SimCost& c = cost(first.node, first.direction, first.payload);
    end = start + c.overhead + c.work;
  } else {
    double seconds = 0.0, overhead = 0.0;
    for (const Message& m : bundle) {
      const SimCost& c = cost(first.node, first.direction, m.payload);
      seconds += c.work;
      if (c.overhead > overhead) overhead = c.overhead;
    }
    end = start + overhead + seconds;
  }
  if (!receives_) return end;
  double& owed = owed_.at(stepping_);
  end += owed;  // the same sum, in the same order, as the Python simulator's
  owed = 0.0;
  return end;
}

void Simulation::send(int from, int to, Message&& msg, double at) {
  const int64_t nbytes = cost(msg.node, msg.direction, msg.payload).bytes;
  const size_t link = static_cast<size_t>(from) * static_cast<size_t>(workers_) + static_cast<size_t>(to);
  link_bytes[link] += nbytes;
  link_messages[link] += 1;
  const double arrives = at + latency_[link] + static_cast<double>(8 * nbytes) * seconds_per_bit_[link];
  const size_t slot = park(parked_, parked_free_, std::move(msg));
  schedule(arrives, kArrive, to, slot);
}

void Simulation::completed(double end, const std::vector<int64_t>& done, const std::vector<int64_t>& flushed) {
  const size_t slot = park(completions_, completions_free_, std::make_pair(done, flushed));
  schedule(end, kComplete, 0, slot);
}

}  // namespace amp
