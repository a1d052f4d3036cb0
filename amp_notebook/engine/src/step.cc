// A worker's step: one bundle handled, traced, its outputs routed and its credits settled, in the order of
// runtime/worker.py's Worker.step (see worker.h). Each function names the Python method it mirrors.
#include <algorithm>
#include <cmath>

#include "engine.h"
#include "sim.h"

namespace amp {

namespace {

// NaN or infinity found where runtime/numerics.py looks (a loss report, accumulated gradients), with
// on_nonfinite="raise": the run stops and the driver raises the NonFiniteError.
struct NonFinite : std::runtime_error {
  Failure::Kind kind;
  int node;
  std::vector<int64_t> keys;
  Report report;
  NonFinite(Failure::Kind k, int n, std::vector<int64_t> ks, Report r = {})
      : std::runtime_error("non-finite value"), kind(k), node(n), keys(std::move(ks)), report(r) {}
};

std::vector<int64_t> sorted_keys(const std::unordered_set<int64_t>& keys) {
  std::vector<int64_t> out(keys.begin(), keys.end());
  std::sort(out.begin(), out.end());
  return out;
}

// The failure of a step, from the exception in flight, with the bundle it concerns.
Failure failure_of(std::exception_ptr error, const std::vector<Message>& bundle) {
  Failure f;
  const Message& first = bundle.front();
  f.node = first.node;
  f.direction = first.direction;
  f.port = first.port;
  for (const Message& m : bundle) {
    f.states.push_back(m.state);
    f.payloads.push_back(m.payload);
    f.trains.push_back(m.train);
  }
  try {
    std::rethrow_exception(error);
  } catch (const NonFinite& e) {
    f.kind = e.kind;
    f.node = e.node;
    f.keys = e.keys;
    f.report = e.report;
    if (e.kind == Failure::kNonFiniteGradient) f.direction = kUpdate;
  } catch (const OpError& e) {
    f.kind = Failure::kOp;
    f.message = e.what();
    f.op_port = e.port;
  } catch (const ExpressionFailure& e) {
    f.kind = Failure::kExpression;
    f.program = e.program;
    f.code = e.code;
  } catch (const PythonFailure& e) {
    f.kind = Failure::kPython;
    f.python = e.exception;
  } catch (const std::exception& e) {
    f.kind = Failure::kInternal;
    f.message = e.what();
  }
  return f;
}

}  // namespace

// Worker.step
void Worker::step(std::vector<Message>& bundle, int32_t depth) {
  const Message& first = bundle.front();
  const int node = first.node;
  const int8_t direction = first.direction;
  const int64_t key = first.key;
  inside_key.store(key, std::memory_order_relaxed);
  inside_direction.store(direction, std::memory_order_relaxed);
  inside_node.store(node, std::memory_order_release);
  std::lock_guard<std::mutex> held(state_mu);
  TraceBuffer* tr = engine_.config.tracing ? trace : nullptr;
  outs_.clear();
  due_.clear();
  Simulation* const sim_clock = sim;  // virtual time (sim.h) or the watch
  const double t0 = sim_clock ? sim_clock->now() : monotonic_now();
  step_t0_ = t0;
  double end = t0;
  int update_node = -1;
  try {
    handle(bundle);
    const double t1 = sim_clock ? sim_clock->ends(t0, bundle) : monotonic_now();
    send_at_ = end = t1;
    if (!sim_clock) bump(ops_s_, t1 - t0);
    if (engine_.config.bundle_budget_s > 0.0 && max_bundle_[static_cast<size_t>(node)] > 1) {
      // the node's seconds per message here: the first bundle's, then a moving average weighting the newest
      // kPerMessageWeight, computed as runtime/worker.py's per_message_seconds computes it
      double& average = per_message_s_[3 * static_cast<size_t>(node) + static_cast<size_t>(direction)];
      const double seconds = (t1 - t0) / static_cast<double>(bundle.size());
      average = average == 0.0 ? seconds : average + (seconds - average) * kPerMessageWeight;
    }
    if (tr) {
      if (bundle.size() == 1) {
        tr->record(node, direction, key, t0, t1, depth);
      } else {
        keys_.clear();
        for (const Message& m : bundle) keys_.push_back(m.key);
        tr->record_bundle(node, direction, Span<const int64_t>(keys_.data(), keys_.size()), t0, t1, depth);
      }
    }
    if (!due_.empty()) {  // send the outputs on first: the next stage need not wait for our update
      if (!outs_.empty()) {
        out_keys_.clear();
        for (const Message& m : outs_) out_keys_.push_back(m.key);
        engine_.ledger.add(Span<const int64_t>(out_keys_.data(), out_keys_.size()));
        deliver(outs_);
      }
      for (int due : due_) {
        update_node = due;
        const double u0 = sim_clock ? end : monotonic_now();
        apply_update(due);
        end = sim_clock ? sim_clock->updated(u0, due) : monotonic_now();
        if (!sim_clock) bump(ops_s_, end - u0);
        if (tr) tr->record(due, kUpdate, key, u0, end, depth);
      }
      update_node = -1;
    }
  } catch (...) {
    Failure f = failure_of(std::current_exception(), bundle);
    f.worker = index_;
    if (update_node >= 0 && f.kind != Failure::kNonFiniteGradient) {
      f.node = update_node;
      f.direction = kUpdate;
    }
    engine_.fail(std::move(f));
    return;
  }
  credits_.clear();
  for (const Message& m : bundle) {
    const bool update = m.direction == kUpdate;
    credits_.push_back(Credit{m.key, update, update ? m.state.get(engine_.layout.flush_slot) : -1});
  }
  out_keys_.clear();
  for (const Message& m : outs_) out_keys_.push_back(m.key);
  done_.clear();
  flushed_.clear();
  bool wake = false;
  try {
    wake = engine_.ledger.release(Span<const Credit>(credits_.data(), credits_.size()),
                                  Span<const int64_t>(out_keys_.data(), out_keys_.size()), &done_, &flushed_);
  } catch (...) {
    Failure f = failure_of(std::current_exception(), bundle);
    f.worker = index_;
    engine_.fail(std::move(f));
    return;
  }
  deliver(outs_);
  if (!done_.empty() && engine_.gated()) {  // completed keys make room at the admission gate
    engine_.refill(&outs_);  // the keys let in start here: their input messages delivered as this step's outputs
    deliver(outs_);
  }
  bump(handled, static_cast<int64_t>(bundle.size()));  // the owner alone writes it
  if (!sim_clock) bump(bundles_, int64_t{1});
  inside_node.store(-1, std::memory_order_release);
  step_end_ = end;
  if (!done_.empty() || !flushed_.empty()) {
    if (sim_clock) sim_clock->completed(end, done_, flushed_);
    else if (wake) engine_.completed();
  }
}

// Worker.handle / Worker.handle_bundle: one call of the op per direction (training and validation keys of
// a forward bundle apart); a flush's update messages update their node.
void Worker::handle(std::vector<Message>& msgs) {
  NodeState& n = *engine_.nodes[static_cast<size_t>(msgs.front().node)];
  const int8_t direction = msgs.front().direction;
  if (direction == kForward) {
    const bool train = msgs.front().train;
    bool mixed = false;
    for (const Message& m : msgs) mixed |= m.train != train;
    if (!mixed) {
      forward(n, msgs, train);
      return;
    }
    for (bool flag : {true, false}) {
      part_.clear();
      for (const Message& m : msgs)
        if (m.train == flag) part_.push_back(m);
      if (!part_.empty()) forward(n, part_, flag);
    }
  } else if (direction == kBackward) {
    backward(n, msgs);
  } else {
    for (const Message& m : msgs) apply_update(m.node);
  }
}

// Worker._forward_bundle
void Worker::forward(NodeState& n, std::vector<Message>& msgs, bool key_trains) {
  const bool train = key_trains && n.receives_backward;
  n.ctx.train = train;
  xs_.clear();
  states_.clear();
  for (const Message& m : msgs) {
    xs_.push_back(m.payload);
    states_.push_back(m.state);
  }
  emitted_.items.clear();
  n.kernel->forward(n.ctx, msgs.front().port, Span<const Tensor>(xs_.data(), xs_.size()),
                    Span<const State>(states_.data(), states_.size()), emitted_);
  if (train && n.parameterized)
    for (const State& s : states_) n.fwd_version.emplace(s) = n.version;
  route_forward(n, emitted_, key_trains, train);
}

// Worker._route_forward: outputs along their edges; a loss's outputs start the backward pass at once
// for training keys; the loss reports are taken.
void Worker::route_forward(NodeState& n, Outputs& emitted, bool key_trains, bool train) {
  std::vector<State> losses;
  for (Output& o : emitted.items) {
    if (o.port == kLossPort) {
      if (train) losses.push_back(o.state);
      continue;
    }
    if (o.port < 0 || o.port >= static_cast<int>(n.fwd.size()) || n.fwd[static_cast<size_t>(o.port)].first < 0)
      throw std::logic_error("output " + std::to_string(o.port) + " is not connected (the graph was not validated?)");
    const auto& dst = n.fwd[static_cast<size_t>(o.port)];
    outs_.push_back(Message{dst.first, dst.second, kForward, key_trains, engine_.layout.key_of(o.state), o.state,
                            std::move(o.payload)});
  }
  if (!losses.empty()) {
    std::vector<Tensor> ones(losses.size(), Tensor::scalar(1.0));
    loss_emitted_.items.clear();
    n.kernel->backward(n.ctx, kLossPort, Span<const Tensor>(ones.data(), ones.size()),
                       Span<const State>(losses.data(), losses.size()), loss_emitted_);
    route_back(n, loss_emitted_);
  }
  if (!n.ctx.reports.empty()) take_reports(n, key_trains);
}

// Worker._take_reports: a loss's reports to the driver, checked for NaN/inf first (the bundle's finite ones
// go over together, under one lock), each marked with its keys' side (a bundle's keys all train or none do).
void Worker::take_reports(NodeState& n, bool key_trains) {
  const int numerics = engine_.config.numerics;
  reports_out_.clear();
  for (const Report& r : n.ctx.reports) {
    if (numerics != 0 && !std::isfinite(r.loss)) {
      if (numerics == 2) {
        engine_.add_skipped(r.key);
        continue;
      }
      if (!reports_out_.empty()) engine_.add_reports(reports_out_);  // the reports before it still count
      std::vector<Report> rest;  // clear before leaving: the run stops, nothing reads them again
      n.ctx.reports.swap(rest);
      throw NonFinite(Failure::kNonFiniteLoss, n.index, {r.key}, r);
    }
    reports_out_.push_back(r);
    reports_out_.back().train = key_trains;
  }
  n.ctx.reports.clear();
  if (!reports_out_.empty()) engine_.add_reports(reports_out_);
}

// Worker._backward_bundle: the op's backward (it sees n_grads before these gradients), then the count.
void Worker::backward(NodeState& n, std::vector<Message>& msgs) {
  xs_.clear();
  states_.clear();
  for (const Message& m : msgs) {
    xs_.push_back(m.payload);
    states_.push_back(m.state);
  }
  emitted_.items.clear();
  n.kernel->backward(n.ctx, msgs.front().port, Span<const Tensor>(xs_.data(), xs_.size()),
                     Span<const State>(states_.data(), states_.size()), emitted_);
  if (n.parameterized) count_gradients(n, msgs);
  route_back(n, emitted_);
}

// Worker._count_gradients: each gradient's staleness row, and the count toward the next update.
void Worker::count_gradients(NodeState& n, const std::vector<Message>& msgs) {
  const double now = step_t0_;  // the Python step's time (`at`): its start
  for (const Message& m : msgs) {
    bool found = false;
    const int64_t at_forward = n.fwd_version.take(m.state, &found);
    if (!found)
      throw std::logic_error("no forward version for state " + engine_.layout.describe(m.state) +
                             " (a backward message without its forward)");
    if (trace) trace->record_staleness(n.index, m.key, static_cast<int32_t>(n.version - at_forward), now);
    n.grad_keys.insert(m.key);
  }
  n.ctx.n_grads += static_cast<int64_t>(msgs.size());
  if (engine_.config.local_updates && n.ctx.n_grads >= muf_[static_cast<size_t>(n.index)]) due_.push_back(n.index);
}

// Worker._route_back: gradients only along edges that carry them.
void Worker::route_back(NodeState& n, Outputs& emitted) {
  for (Output& o : emitted.items) {
    if (o.port < 0 || o.port >= static_cast<int>(n.bwd.size())) continue;
    const auto& src = n.bwd[static_cast<size_t>(o.port)];
    if (src.first < 0) continue;
    outs_.push_back(Message{src.first, src.second, kBackward, true, engine_.layout.key_of(o.state), o.state,
                            std::move(o.payload)});
  }
}

// Worker.apply_update: the optimizer on the mean over keys of the accumulated gradients.
void Worker::apply_update(int node) {
  NodeState& n = *engine_.nodes[static_cast<size_t>(node)];
  if (n.ctx.n_grads == 0) return;
  n.kernel->settle(n.ctx);  // every gradient in the accumulators before anything reads them
  if (n.python_update) {
    const bool updated = engine_.python_update(node, n.ctx.n_grads, sorted_keys(n.grad_keys), n.version);
    n.ctx.n_grads = 0;
    n.grad_keys.clear();
    if (updated) ++n.version;
    return;
  }
  if (engine_.config.numerics != 0 && !all_finite(n.ctx.grads)) {
    if (engine_.config.numerics == 1) throw NonFinite(Failure::kNonFiniteGradient, node, sorted_keys(n.grad_keys));
    engine_.add_skipped(n.grad_keys);
    n.ctx.n_grads = 0;
    n.grad_keys.clear();
    return;
  }
  optimizer_step(*n.optimizer, n.ctx.params, n.ctx.grads, 1.0 / static_cast<double>(n.grad_keys.size()));
  n.ctx.n_grads = 0;
  n.grad_keys.clear();
  ++n.version;
}

// Outputs to their owners: the own inbox directly; another worker's mailbox once per step, all of the
// step's messages for it together (one lock, at most one wake-up: Worker::post).
void Worker::deliver(std::vector<Message>& outs) {
  bool remote = false;
  for (Message& m : outs) {
    const int owner = engine_.nodes[static_cast<size_t>(m.node)]->owner;
    if (owner == index_) push_local(std::move(m));
    else if (sim) sim->send(index_, owner, std::move(m), send_at_);
    else {
      if (remote_.size() < engine_.workers.size()) remote_.resize(engine_.workers.size());
      remote_[static_cast<size_t>(owner)].push_back(std::move(m));
      remote = true;
    }
  }
  outs.clear();
  if (remote)
    for (size_t w = 0; w < remote_.size(); ++w) engine_.workers[w]->post(remote_[w]);
}

}  // namespace amp
