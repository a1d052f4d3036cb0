// The Python face of a native run (`_native.Engine`), which engine/backend.py builds and drives:
//
//   Engine(codec, n_nodes, workers, priority, order, local_updates, numerics, tracing, spin_min_us, spin_max_us)
//   add_node(...), set_trace(worker, TraceBuffer), set_python_update(fn), start()     building (GIL held)
//   set_inputs(dtype, [(name, node, port, fill_width, cast)]), admit_many([(key, train, inputs, fields, rows)])
//   -> per key -1, the first input holding NaN/inf or -2 (refused) (admission.h; admission(key, train, inputs,
//   fields, rows) builds one key's and returns the messages),
//   admit_messages(key, messages) (a key as Python messages, through the gate), admit_key/admit_flush,
//   inject(messages, post), set_key_limit(n, batch), held_keys(), keys_held(), peak_keys()   the admission
//   gate (engine.h: at most n keys in flight, the others held until a batch can go in; 0: no gate),
//   wait(timeout, wake_batch) -> (done, flushed, failed):  the driver (post=False converts and checks only)
//   take_reports(), fold_reports(decay, totals), take_skipped(), failure()            what workers handed over
//   set_max_bundle / set_min_update_frequency / set_paused, set_lr                     live knobs
//   handled(), queued(), activity(), in_flight(), busy(), held(node)                  watchdog and diagnosis
//   worker_times() -> per worker (loop_s, ops_s, waiting_s, asleep_s, sleeps, bundles, messages, cpu_s)
//   node_state(node), stop(), join()                                                  end of a run
//   simulate(latency, seconds_per_bit, update_s, receive, cost) instead of start(),   a simulated run (sim.h):
//     then inject(...), sim_run() -> (done, flushed, failed), sim_now(), sim_stats()  no thread, virtual time
//   optimizer_step(spec, params, grads, scale)                                        one native step (tests)
//
// Everything entering is checked here once (node indices, routes, ports, optimizer memory shapes); the
// workers trust it. Calls that wait on workers (wait, join) release the GIL first, and the handle's
// destructor stops and joins the threads before anything is freed.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unordered_map.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>

#include "admission.h"
#include "bridge.h"
#include "engine.h"
#include "probes.h"
#include "sim.h"
#include "spec.h"

namespace amp {

namespace {

using Route = std::vector<std::pair<int, int>>;

constexpr int64_t kRefused = -2;  // admit_many: a key this path does not take (engine/backend.py REFUSED)

// {"kind": "sgd"|"momentum"|"adam", "lr", "momentum", "beta1", "beta2", "eps", "clip_norm" (0: none), "t",
//  "velocity" | "m", "v", "scratch": one array per parameter (like it), "norm_order": parameter indices};
// the memory arrays are borrowed (their owners go to `keep`).
std::unique_ptr<OptimizerState> optimizer_state(nb::dict spec, const NodeCtx& ctx, std::vector<nb::object>* keep) {
    auto opt = std::make_unique<OptimizerState>();
    std::string kind = nb::cast<std::string>(spec["kind"]);
    opt->kind = kind == "sgd" ? OptimizerKind::kSgd : kind == "momentum" ? OptimizerKind::kMomentum
              : kind == "adam" ? OptimizerKind::kAdam : throw nb::value_error(("optimizer: no native '" + kind + "'").c_str());
    opt->lr.store(nb::cast<double>(spec["lr"]));
    opt->momentum = nb::cast<double>(spec["momentum"]);
    opt->beta1 = nb::cast<double>(spec["beta1"]);
    opt->beta2 = nb::cast<double>(spec["beta2"]);
    opt->eps = nb::cast<double>(spec["eps"]);
    opt->clip_norm = nb::cast<double>(spec["clip_norm"]);
    opt->t = nb::cast<int64_t>(spec["t"]);
    opt->norm_order = nb::cast<std::vector<int>>(spec["norm_order"]);
    const size_t n = ctx.params.size();
    if (opt->norm_order.size() != n) throw nb::value_error("optimizer: norm_order names every parameter once");
    for (int i : opt->norm_order)
      if (i < 0 || static_cast<size_t>(i) >= n) throw nb::value_error("optimizer: norm_order out of range");
    for (const Tensor& p : ctx.params)
      if (!p.contiguous()) throw nb::value_error("optimizer: parameters must be contiguous");
    auto arrays = [&](const char* name, std::vector<Tensor>* out) {
      nb::list list = nb::borrow<nb::list>(spec[name]);
      if (nb::len(list) != n) throw nb::value_error((std::string("optimizer: one '") + name + "' array per parameter").c_str());
      for (size_t i = 0; i < n; ++i) {
        keep->push_back(nb::borrow(list[i]));
        Tensor t = borrow_array(list[i], "optimizer memory");
        if (!t.same_shape(ctx.params[i]) || t.dtype() != ctx.params[i].dtype())
          throw nb::value_error((std::string("optimizer: '") + name + "' differs from its parameter").c_str());
        out->push_back(t);
      }
    };
    if (opt->kind == OptimizerKind::kMomentum) arrays("velocity", &opt->velocity);
    if (opt->kind == OptimizerKind::kAdam) {
      arrays("m", &opt->m);
      arrays("v", &opt->v);
      arrays("scratch", &opt->scratch);
    }
    return opt;
  }

class EngineHandle {
 public:
  EngineHandle(nb::object codec, int n_nodes, int workers, const std::string& priority, const std::string& order,
               bool local_updates, int numerics, bool tracing, double spin_min_us, double spin_max_us,
               double bundle_budget_s)
      : codec_obj_(codec), codec_(nb::cast<const StateCodec*>(codec)) {
    if (n_nodes < 1 || workers < 1) throw nb::value_error("a run has at least one node and one worker");
    if (numerics < 0 || numerics > 2) throw nb::value_error("numerics: 0 ignore, 1 raise, 2 skip");
    EngineConfig config;
    config.workers = workers;
    config.priority = priority_of(priority);
    config.order = order_of(order);
    config.local_updates = local_updates;
    config.numerics = numerics;
    config.tracing = tracing;
    if (!(spin_min_us >= 0.0 && spin_min_us <= spin_max_us && spin_max_us <= 1e6))
      throw nb::value_error("spin_min_us, spin_max_us: expected 0 <= spin_min_us <= spin_max_us <= 1e6 microseconds");
    config.spin_min_s = spin_min_us * 1e-6;
    config.spin_max_s = spin_max_us * 1e-6;
    if (!(bundle_budget_s >= 0.0 && bundle_budget_s <= 1e6))  // NaN fails both
      throw nb::value_error("bundle_budget_s: expected 0 (no limit) or seconds up to 1e6");
    config.bundle_budget_s = bundle_budget_s;
    engine_ = std::make_unique<Engine>(config, codec_->layout(), n_nodes);
    added_.assign(static_cast<size_t>(n_nodes), false);
    in_ports_.resize(static_cast<size_t>(n_nodes));
    n_out_.resize(static_cast<size_t>(n_nodes));
  }

  ~EngineHandle() {
    if (engine_) {
      {
        nb::gil_scoped_release release;  // a worker may be waiting for the GIL inside a bridged op
        engine_->stop();
        engine_->join();
      }
      sim_.reset();     // messages on simulated links (their payloads may hold Python memory)
      engine_.reset();  // kernels (bridged ones drop Python references) with the GIL held
    }
  }

  void add_node(int index, int owner, nb::dict spec, nb::list params, nb::list grads, uint32_t grad_inputs,
                uint32_t grad_outputs, Route fwd, Route bwd, bool parameterized, bool receives_backward,
                nb::object bridge, nb::object optimizer, bool python_update, int64_t version, int64_t n_grads,
                std::vector<int64_t> grad_keys, int64_t min_update_frequency, int64_t max_bundle) {
    require_building();
    if (index < 0 || index >= static_cast<int>(added_.size()) || added_[static_cast<size_t>(index)])
      throw nb::value_error("node index out of range or given twice");
    if (owner < 0 || owner >= engine_->config.workers) throw nb::value_error("owner: no such worker");
    if (min_update_frequency < 1 || max_bundle < 1) throw nb::value_error("min_update_frequency and max_bundle >= 1");
    if (n_grads < 0) throw nb::value_error("n_grads >= 0");
    NodeState& n = *engine_->nodes[static_cast<size_t>(index)];
    for (nb::handle p : params) keep_.push_back(nb::borrow(p));
    for (nb::handle g : grads) keep_.push_back(nb::borrow(g));
    KernelSpec ks = spec_from_python(*codec_, spec, params, grads, &n.ctx);
    n.kernel = kernel_for(ks, *codec_, bridge);
    n.ctx.grad_inputs = grad_inputs;
    n.ctx.grad_outputs = grad_outputs;
    n.ctx.n_grads = n_grads;
    if (fwd.size() != ks.out_names.size() || bwd.size() != ks.in_names.size())
      throw nb::value_error("routes: one per output port forward, one per input port backward");
    n.owner = owner;
    n.fwd = std::move(fwd);
    n.bwd = std::move(bwd);
    n.parameterized = parameterized;
    for (auto& w : engine_->workers) w->set_parameterized(index, parameterized);
    n.receives_backward = receives_backward;
    n.python_update = python_update;
    n.version = version;
    n.grad_keys.insert(grad_keys.begin(), grad_keys.end());
    if (parameterized && !python_update) {
      if (optimizer.is_none()) throw nb::value_error("a parameterized node needs an optimizer or a Python update");
      n.optimizer = optimizer_from_python(nb::borrow<nb::dict>(optimizer), n.ctx);
    }
    needs_python_ |= python_update || !bridge.is_none();
    in_ports_[static_cast<size_t>(index)] = ks.in_names;
    n_out_[static_cast<size_t>(index)] = static_cast<int>(ks.out_names.size());
    std::vector<int> one{index};
    engine_->set_min_update_frequency(one, min_update_frequency);
    engine_->set_max_bundle(one, max_bundle);
    added_[static_cast<size_t>(index)] = true;
  }

  void set_trace(int worker, nb::object buffer) {
    require_building();
    if (worker < 0 || worker >= engine_->config.workers) throw nb::value_error("trace: no such worker");
    engine_->workers[static_cast<size_t>(worker)]->trace = nb::cast<TraceBuffer*>(buffer);
    keep_.push_back(buffer);
  }

  void set_python_update(nb::object fn) {
    require_building();
    python_update_ = fn;
    engine_->python_update = [this](int node, int64_t n, const std::vector<int64_t>& keys, int64_t version) {
      nb::gil_scoped_acquire gil;
      try {
        return nb::cast<bool>(python_update_(node, n, keys, version));
      } catch (...) {
        rethrow_as_python_failure();
      }
    };
  }

  void start() {
    require_building();
    check_built();
    if (needs_python_) {
      engine_->attach_thread = [] { return attach_python_thread(); };
      engine_->detach_thread = [](void* token) { detach_python_thread(token); };
    }
    engine_->start();
  }

  // A simulated run instead of start(): the calling thread steps the workers in virtual time (sim.h).
  // latency and seconds_per_bit: workers x workers (from, to); update_s: one per node; receive: (seconds per
  // message received from another worker, seconds per byte of it); cost(node, direction, shape, dtype or None)
  // -> (overhead seconds, work seconds, bytes), asked once per distinct key.
  void simulate(std::vector<std::vector<double>> latency, std::vector<std::vector<double>> seconds_per_bit,
                std::vector<double> update_s, std::pair<double, double> receive, nb::object cost) {
    require_building();
    check_built();
    const size_t workers = static_cast<size_t>(engine_->config.workers);
    auto flat = [workers](const std::vector<std::vector<double>>& m, const char* name) {
      std::vector<double> out;
      if (m.size() != workers) throw nb::value_error((std::string(name) + ": one row per worker").c_str());
      for (const auto& row : m) {
        if (row.size() != workers) throw nb::value_error((std::string(name) + ": one column per worker").c_str());
        for (double v : row)
          if (!std::isfinite(v) || v < 0) throw nb::value_error((std::string(name) + ": finite values >= 0").c_str());
        out.insert(out.end(), row.begin(), row.end());
      }
      return out;
    };
    std::vector<double> lat = flat(latency, "latency"), spb = flat(seconds_per_bit, "seconds_per_bit");
    if (update_s.size() != added_.size()) throw nb::value_error("update_s: one per node");
    for (double v : update_s)
      if (!std::isfinite(v) || v < 0) throw nb::value_error("update_s: finite values >= 0");
    for (double v : {receive.first, receive.second})
      if (!std::isfinite(v) || v < 0) throw nb::value_error("receive: finite values >= 0");
    cost_ = cost;
    Simulation::CostHook hook = [this](int node, int direction, const Tensor& payload) {
      nb::gil_scoped_acquire gil;
      try {
        std::vector<int64_t> dims(payload.shape(), payload.shape() + (payload.defined() ? payload.rank() : 0));
        nb::object dtype = payload.defined() ? nb::object(nb::str(dtype_name(payload.dtype()))) : nb::none();
        nb::tuple got = nb::cast<nb::tuple>(cost_(node, direction, nb::tuple(nb::cast(dims)), dtype));
        SimCost c{nb::cast<double>(got[0]), nb::cast<double>(got[1]), nb::cast<int64_t>(got[2])};
        if (!std::isfinite(c.overhead) || !std::isfinite(c.work) || c.overhead < 0 || c.work < 0 || c.bytes < 0)
          throw nb::value_error("the cost model gave a negative or non-finite cost");
        return c;
      } catch (...) {
        rethrow_as_python_failure();
      }
    };
    sim_ = std::make_unique<Simulation>(*engine_, std::move(lat), std::move(spb), std::move(update_s), receive.first,
                                        receive.second, std::move(hook));
    for (auto& w : engine_->workers) w->sim = sim_.get();
  }

  nb::tuple sim_run() {
    require_simulation();
    std::vector<int64_t> done, flushed;
    {
      nb::gil_scoped_release release;  // a bridged op and the cost hook take it back
      sim_->run(&done, &flushed);
    }
    return nb::make_tuple(done, flushed, engine_->failed());
  }

  double sim_now() {
    require_simulation();
    return sim_->now();
  }

  nb::tuple sim_stats() {  // (messages, bundles, link bytes, link messages), links workers x workers row-major
    require_simulation();
    return nb::make_tuple(sim_->messages, sim_->bundles, sim_->link_bytes, sim_->link_messages);
  }

  // Every node added, every route leading somewhere (once, before the workers run).
  void check_built() {
    const int n_nodes = static_cast<int>(added_.size());
    for (int i = 0; i < n_nodes; ++i) {
      if (!added_[static_cast<size_t>(i)]) throw nb::value_error(("node " + std::to_string(i) + " was never added").c_str());
      const NodeState& n = *engine_->nodes[static_cast<size_t>(i)];
      for (const auto& [dst, port] : n.fwd)
        if (dst != -1 && (dst < 0 || dst >= n_nodes || port < 0 || port >= static_cast<int>(in_ports_[dst].size())))
          throw nb::value_error(("node " + std::to_string(i) + ": a forward route leads nowhere").c_str());
      for (const auto& [src, port] : n.bwd)
        if (src != -1 && (src < 0 || src >= n_nodes || port < 0 || port >= n_out_[static_cast<size_t>(src)]))
          throw nb::value_error(("node " + std::to_string(i) + ": a backward route leads nowhere").c_str());
      if (n.python_update && !engine_->python_update) throw nb::value_error("a Python update needs set_python_update");
    }
  }

  // The Input nodes a key's admission feeds (admission.h), once, before the run: (name, node, input port name,
  // fill width or -1, float Input), in the plan's order; `dtype` is the run's float dtype.
  void set_inputs(const std::string& dtype, nb::list inputs) {
    require_building();
    if (dtype != "float32" && dtype != "float64") throw nb::value_error("set_inputs: dtype float32 or float64");
    run_dtype_ = dtype == "float32" ? DType::f32 : DType::f64;
    admission_ = Admission();
    for (nb::handle h : inputs) {
      nb::tuple t = nb::cast<nb::tuple>(h);
      if (nb::len(t) != 5) throw nb::value_error("set_inputs: (name, node, port, fill_width, cast) per Input");
      const int node = nb::cast<int>(t[1]);
      if (node < 0 || node >= static_cast<int>(added_.size()) || !added_[static_cast<size_t>(node)])
        throw nb::value_error("set_inputs: no such node");
      admission_.add(nb::cast<nb::str>(t[0]), node, port_index(node, nb::cast<std::string>(t[2])),
                     nb::cast<int64_t>(t[3]), nb::cast<bool>(t[4]));
    }
    inputs_set_ = true;
  }

  // Keys in one call, each (key, train, inputs, fields, rows), in admission order: each key's input messages
  // built from its batch (admission.h), checked by the run's rule. Returns one result per key:
  //   -1       admitted (its credits registered, its messages posted);
  //   >= 0     the first input holding NaN/inf (not admitted: the caller's guard decides);
  //   kRefused this path raised ValueError or TypeError, or could not read the tuple's items (not admitted:
  //            the caller admits it through Python messages, whose errors name the input).
  // The admitted keys' credits are registered under one lock and their messages posted together, one post per
  // worker, so the driver pays the call, the lock and a sleeping worker's wake-up once per batch of keys, not
  // once per key. A simulated run injects them key by key, in order (its event order is the Python
  // simulator's). Any other exception leaves every key of the call unadmitted.
  std::vector<int64_t> admit_many(nb::list keys) {
    const size_t n = nb::len(keys);
    std::vector<int64_t> results(n, -1);
    std::vector<std::pair<int64_t, int64_t>> credits;
    std::vector<std::vector<Message>> built;
    credits.reserve(n);
    built.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      nb::handle item = keys[i];
      if (!nb::isinstance<nb::tuple>(item) || nb::len(item) != 5)
        throw nb::type_error("admit_many: each key is a tuple (key, train, inputs, fields, rows)");
      nb::tuple t = nb::borrow<nb::tuple>(item);
      const int64_t key = nb::cast<int64_t>(t[0]);
      std::vector<Message> out;
      try {
        results[i] = build_admission(key, nb::cast<bool>(t[1]), nb::cast<nb::dict>(t[2]), nb::cast<nb::dict>(t[3]),
                                     nb::cast<int64_t>(t[4]), &out);
      } catch (const nb::builtin_exception& e) {
        if (e.type() != nb::exception_type::value_error && e.type() != nb::exception_type::type_error) throw;
        results[i] = kRefused;
      } catch (nb::python_error& e) {
        if (!e.matches(PyExc_ValueError) && !e.matches(PyExc_TypeError)) throw;
        results[i] = kRefused;  // the error is dropped here; the Python path raises its own, naming the input
      } catch (const nb::cast_error&) {
        results[i] = kRefused;  // inputs or fields not a dict, rows not an int: the Python path reads them
      }
      if (results[i] != -1) continue;
      credits.emplace_back(key, static_cast<int64_t>(out.size()));
      built.push_back(std::move(out));
    }
    if (sim_) {
      engine_->ledger.inject_keys(credits);
      for (std::vector<Message>& out : built) sim_->inject(out);
    } else {
      std::vector<Engine::AdmittedKey> admitted;
      admitted.reserve(built.size());
      for (size_t i = 0; i < built.size(); ++i) admitted.emplace_back(credits[i].first, std::move(built[i]));
      engine_->admit(admitted);  // through the admission gate (set_key_limit)
    }
    return results;
  }

  // The admission gate's limit (engine.h): at most `limit` keys in flight, the others admitted held; 0 opens it.
  // A simulated run has no gate: its driver admits in virtual time, with no wake to wait for.
  void set_key_limit(int64_t limit, int64_t batch) {
    if (limit < 0) throw nb::value_error("set_key_limit: a number of keys >= 0 (0: no gate)");
    if (batch < 1 || (limit > 0 && batch > limit))
      throw nb::value_error("set_key_limit: keys go in a batch at a time, 1 <= batch <= limit");
    if (sim_ && limit > 0) throw nb::value_error("set_key_limit: a simulated run admits without a gate");
    engine_->set_key_limit(limit, batch);
  }

  // A key admitted as Python messages (the path for a batch admit_many does not take), converted as inject
  // converts them and then admitted as admit_many admits a key: through the admission gate.
  void admit_messages(int64_t key, nb::list msgs) {
    std::vector<Message> out = convert_messages(msgs);
    for (const Message& m : out)
      if (m.key != key || m.direction != kForward)
        throw nb::value_error("admit_messages: a key's input messages are forward messages of that key");
    if (sim_) {
      engine_->ledger.inject_key(key, static_cast<int64_t>(out.size()));
      sim_->inject(out);
      return;
    }
    std::vector<Engine::AdmittedKey> admitted;
    admitted.emplace_back(key, std::move(out));
    engine_->admit(admitted);
  }

  // The messages admit_many would post for a key, built and handed back instead (nothing registered or posted):
  // (-1 or the first input holding NaN/inf, [(node, port, direction, train, key, state, payload)]). The tests
  // compare them with the Python path's.
  nb::tuple admission(int64_t key, bool train, nb::dict inputs, nb::dict fields, int64_t rows) {
    std::vector<Message> out;
    const int64_t bad = build_admission(key, train, inputs, fields, rows, &out);
    nb::list msgs;
    for (const Message& m : out)
      msgs.append(nb::make_tuple(m.node, m.port, static_cast<int>(m.direction), m.train, m.key,
                                 codec_->decode(m.state), tensor_to_python(m.payload)));
    return nb::make_tuple(bad, msgs);
  }

  // Messages from Python, checked and converted (nothing registered or posted).
  std::vector<Message> convert_messages(nb::list msgs) {
    std::vector<Message> out;
    out.reserve(nb::len(msgs));
    const int n_nodes = static_cast<int>(added_.size());
    nb::object last_state;  // a key's input messages share one State: encode it once (held, so its address
    State encoded;          // cannot pass to another object while compared)
    for (nb::handle h : msgs) {
      Message m;
      m.node = nb::cast<int>(h.attr("node"));
      m.direction = static_cast<int8_t>(nb::cast<int>(h.attr("direction")));
      if (m.node < 0 || m.node >= n_nodes || m.direction < kForward || m.direction > kUpdate ||
          !added_[static_cast<size_t>(m.node)])
        throw nb::value_error("inject: a message with no such node or direction");
      m.train = nb::cast<bool>(h.attr("train"));
      nb::object state = h.attr("state");
      if (!state.is(last_state)) {
        encoded = codec_->encode(state);
        last_state = std::move(state);
      }
      m.state = encoded;
      m.key = engine_->layout.key_of(m.state);
      if (m.direction == kForward) {
        m.port = port_index(m.node, nb::cast<std::string>(h.attr("port")));
        m.payload = tensor_from_python(h.attr("payload"), "payload of an injected message");
      } else if (m.direction == kUpdate) {
        if (m.key >= 0) throw nb::value_error("inject: an update message carries a flush, not a key");
      } else {
        throw nb::value_error("inject: the controller injects forward and update messages only");
      }
      out.push_back(std::move(m));
    }
    return out;
  }

  void inject(nb::list msgs, bool post) {
    std::vector<Message> out = convert_messages(msgs);
    if (!post) return;
    if (sim_) sim_->inject(out);
    else engine_->inject(out);
  }

  nb::tuple wait(double timeout, int64_t wake_batch) {
    std::vector<int64_t> done, flushed;
    bool failed;
    {
      nb::gil_scoped_release release;
      failed = engine_->wait(timeout, wake_batch, &done, &flushed);
    }
    return nb::make_tuple(done, flushed, failed);
  }

  std::vector<Report> take_all_reports() {
    std::vector<Report> reports;
    engine_->take_reports(&reports);
    return reports;
  }

  // The loss reports handed over since the last call, in order, as columns (key, loss, n, correct; correct
  // -1 where the loss counts none): four lists, not a dict per report, since a Tree-LSTM reports per tree node.
  nb::tuple take_reports() {
    std::vector<Report> reports = take_all_reports();
    std::vector<int64_t> keys, ns, correct;
    std::vector<double> losses;
    keys.reserve(reports.size());
    ns.reserve(reports.size());
    correct.reserve(reports.size());
    losses.reserve(reports.size());
    for (const Report& r : reports) {
      keys.push_back(r.key);
      losses.push_back(r.loss);
      ns.push_back(r.n);
      correct.push_back(r.correct);
    }
    return nb::make_tuple(keys, losses, ns, correct);
  }

  // The loss reports handed over since the last call, folded into the session's running sums in order
  // (reports.h): `totals` is (train, val, recent_loss, recent_accuracy), a side (n, loss sum, correct sum or
  // None), a moving average None until the first training report. Returns None when no report came, else the
  // totals in the same shape, with None for a side no report touched (the session leaves its sums as they are).
  nb::object fold_reports(double decay, nb::tuple totals) {
    ReportTotals t = totals_from_python(decay, totals);  // checked before the reports are taken
    const std::vector<Report> reports = take_all_reports();
    if (reports.empty()) return nb::none();
    fold_reports_into(reports, decay, &t);
    return totals_to_python(t);
  }

  std::vector<int64_t> take_skipped() {
    std::vector<int64_t> out;
    engine_->take_skipped(&out);
    return out;
  }

  nb::object failure() {
    if (!engine_->failed()) return nb::none();
    const Failure& f = engine_->failure();
    nb::dict d;
    static const char* kinds[] = {"none", "op", "expression", "python", "nonfinite_loss", "nonfinite_gradient",
                                  "internal"};
    d["kind"] = kinds[f.kind];
    d["node"] = f.node;
    d["worker"] = f.worker;
    d["direction"] = f.direction;
    d["port"] = f.port;
    d["message"] = f.message;
    d["op_port"] = f.op_port;
    d["program"] = f.program;
    d["code"] = f.code;
    nb::list states, payloads;
    for (const State& s : f.states) states.append(codec_->decode(s));
    for (const Tensor& t : f.payloads) payloads.append(t.defined() ? tensor_to_python(t) : nb::none());
    d["states"] = states;
    d["payloads"] = payloads;
    d["trains"] = std::vector<bool>(f.trains.begin(), f.trains.end());
    d["keys"] = f.keys;
    d["report"] = report_to_python(f.report);
    d["python"] = f.python ? nb::borrow(static_cast<PyObject*>(f.python.get())) : nb::none();
    return d;
  }

  void set_knob(const std::string& knob, std::vector<int> which, int64_t value) {
    for (int i : which)
      if (i < 0 || i >= static_cast<int>(added_.size())) throw nb::value_error("knob: no such node");
    if (knob == "paused") engine_->set_paused(value != 0);
    else if (knob == "fail") engine_->doom(static_cast<int>(value));  // fault injection: that worker fails
    else if (value < 1) throw nb::value_error("knob: expected a value >= 1");
    else if (knob == "max_bundle") engine_->set_max_bundle(which, value);
    else if (knob == "min_update_frequency") engine_->set_min_update_frequency(which, value);
    else throw nb::value_error(("knob: no knob '" + knob + "'").c_str());
  }

  void set_lr(int node, double lr) {
    OptimizerState* opt = node_at(node).optimizer.get();
    if (opt) opt->lr.store(lr);
  }

  nb::list activity() {  // per worker: (life, node or -1, direction, key)
    nb::list out;
    for (auto& w : engine_->workers)
      out.append(nb::make_tuple(w->life.load(), w->inside_node.load(), w->inside_direction.load(), w->inside_key.load()));
    return out;
  }

  // What a node holds: (kernel entries, forward versions' states), or None while its worker is inside a step.
  nb::object held(int node) {
    NodeState& n = node_at(node);
    Worker& w = *engine_->workers[static_cast<size_t>(n.owner)];
    std::unique_lock<std::mutex> lock(w.state_mu, std::try_to_lock);
    if (!lock.owns_lock()) return nb::none();
    nb::list states;
    n.fwd_version.for_each([&](const State& s, const int64_t&) { states.append(codec_->decode(s)); });
    return nb::make_tuple(n.kernel->held(), states);
  }

  // (version, n_grads, sorted grad keys, Adam's t): read when quiescent. The kernel's held-back gradients go
  // into the accumulators first (Kernel::settle), under the owner's step lock, so that Python, which reads
  // the accumulators next (a checkpoint, an epoch's end), finds every gradient there. The GIL is let go while
  // the lock is taken: a worker inside a step through the bridge may be waiting for it.
  nb::tuple node_state(int node) {
    NodeState& n = node_at(node);
    {
      nb::gil_scoped_release released;
      std::lock_guard<std::mutex> lock(engine_->workers[static_cast<size_t>(n.owner)]->state_mu);
      n.kernel->settle(n.ctx);
    }
    std::vector<int64_t> keys(n.grad_keys.begin(), n.grad_keys.end());
    std::sort(keys.begin(), keys.end());
    return nb::make_tuple(n.version, n.ctx.n_grads, keys, n.optimizer ? n.optimizer->t : 0);
  }

  Engine& engine() { return *engine_; }

  // The collector's view of the Python objects the handle holds (nanobind's type slots below). The Python
  // update and the cost hook are closures over the session, which holds the backend, which holds this
  // handle: without this view such a cycle could never be collected.
  int traverse(visitproc visit, void* arg) {
    Py_VISIT(codec_obj_.ptr());
    Py_VISIT(python_update_.ptr());
    Py_VISIT(cost_.ptr());
    for (const nb::object& o : keep_) Py_VISIT(o.ptr());
    return 0;
  }

  // Break a cycle the collector found: drop the hooks (no run can be going: nothing reaches the handle).
  void clear() {
    python_update_ = nb::object();
    cost_ = nb::object();
  }

 private:
  void require_building() const {
    if (engine_->started() || sim_) throw nb::value_error("the run has started: nodes and hooks are fixed");
  }

  void require_simulation() const {
    if (!sim_) throw nb::value_error("not a simulated run: call simulate() first");
  }

  NodeState& node_at(int node) {
    if (node < 0 || node >= static_cast<int>(added_.size())) throw nb::value_error("no such node");
    return *engine_->nodes[static_cast<size_t>(node)];
  }

  // What admit_many and admission share: a key's messages from its batch (admission.h), checked by the run's rule.
  int64_t build_admission(int64_t key, bool train, nb::dict inputs, nb::dict fields, int64_t rows,
                          std::vector<Message>* out) const {
    if (!inputs_set_) throw nb::value_error("admit_many: set_inputs was never called");
    if (key < 0) throw nb::value_error("admit_many: a key id is >= 0");
    return admission_.build(key, train, inputs, fields, rows, engine_->config.numerics != 0, run_dtype_, *codec_, out);
  }

  // A forward message's input port by name; a node with no named input ports takes port 0 whatever it is called.
  int32_t port_index(int node, const std::string& port) const {
    const auto& names = in_ports_[static_cast<size_t>(node)];
    auto it = std::find(names.begin(), names.end(), port);
    if (it == names.end() && !names.empty()) throw nb::value_error(("inject: no input port '" + port + "'").c_str());
    return static_cast<int32_t>(it - names.begin()) % std::max<int32_t>(1, static_cast<int32_t>(names.size()));
  }

  std::unique_ptr<OptimizerState> optimizer_from_python(nb::dict spec, const NodeCtx& ctx) {
    return optimizer_state(spec, ctx, &keep_);
  }

  nb::object codec_obj_;
  const StateCodec* codec_;
  std::unique_ptr<Engine> engine_;
  std::vector<bool> added_;
  std::vector<std::vector<std::string>> in_ports_;
  std::vector<int> n_out_;
  std::vector<nb::object> keep_;  // numpy arrays the engine borrows, trace buffers
  nb::object python_update_, cost_;
  std::unique_ptr<Simulation> sim_;
  bool needs_python_ = false;
  Admission admission_;  // the Input nodes a key's admission feeds (set_inputs)
  DType run_dtype_ = DType::f64;
  bool inputs_set_ = false;
};

}  // namespace

namespace {

int engine_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));  // a heap type
  if (!nb::inst_ready(self)) return 0;
  return nb::inst_ptr<EngineHandle>(self)->traverse(visit, arg);
}

int engine_clear(PyObject* self) {
  if (nb::inst_ready(self)) nb::inst_ptr<EngineHandle>(self)->clear();
  return 0;
}

PyType_Slot engine_slots[] = {
    {Py_tp_traverse, reinterpret_cast<void*>(engine_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(engine_clear)},
    {0, nullptr},
};

}  // namespace

void bind_engine(nb::module_& m) {
  // One native optimizer step on arrays Python owns (written in place): tests hold it to optim.py.
  m.def("optimizer_step", [](nb::dict spec, nb::list params, nb::list grads, double scale) {
    NodeCtx ctx;
    std::vector<nb::object> keep;
    for (nb::handle p : params) ctx.params.push_back(borrow_array(p, "parameter"));
    for (nb::handle g : grads) ctx.grads.push_back(borrow_array(g, "gradient accumulator"));
    if (ctx.params.size() != ctx.grads.size()) throw nb::value_error("one accumulator per parameter");
    for (size_t i = 0; i < ctx.params.size(); ++i)
      if (!ctx.grads[i].same_shape(ctx.params[i]) || ctx.grads[i].dtype() != ctx.params[i].dtype())
        throw nb::value_error("an accumulator differs from its parameter");
    std::unique_ptr<OptimizerState> opt = optimizer_state(spec, ctx, &keep);
    optimizer_step(*opt, ctx.params, ctx.grads, scale);
    return opt->t;
  });
  nb::class_<EngineHandle>(m, "Engine", nb::type_slots(engine_slots))
      .def(nb::init<nb::object, int, int, const std::string&, const std::string&, bool, int, bool, double, double,
                    double>(),
           nb::arg("codec"), nb::arg("n_nodes"), nb::arg("workers"), nb::arg("priority"), nb::arg("order"),
           nb::arg("local_updates"), nb::arg("numerics"), nb::arg("tracing"), nb::arg("spin_min_us"), nb::arg("spin_max_us"),
           nb::arg("bundle_budget_s"))
      .def("add_node", &EngineHandle::add_node, nb::arg("index"), nb::arg("owner"), nb::arg("spec"), nb::arg("params"),
           nb::arg("grads"), nb::arg("grad_inputs"), nb::arg("grad_outputs"), nb::arg("fwd"), nb::arg("bwd"),
           nb::arg("parameterized"), nb::arg("receives_backward"), nb::arg("bridge").none(),
           nb::arg("optimizer").none(), nb::arg("python_update"), nb::arg("version"), nb::arg("n_grads"),
           nb::arg("grad_keys"), nb::arg("min_update_frequency"), nb::arg("max_bundle"))
      .def("set_trace", &EngineHandle::set_trace)
      .def("set_python_update", &EngineHandle::set_python_update)
      .def("start", &EngineHandle::start)
      .def("simulate", &EngineHandle::simulate, nb::arg("latency"), nb::arg("seconds_per_bit"), nb::arg("update_s"),
           nb::arg("receive"), nb::arg("cost"))
      .def("sim_run", &EngineHandle::sim_run)
      .def("sim_now", &EngineHandle::sim_now)
      .def("sim_stats", &EngineHandle::sim_stats)
      .def("admit_key", [](EngineHandle& h, int64_t key, int64_t n) { h.engine().ledger.inject_key(key, n); })
      .def("admit_flush", [](EngineHandle& h, int64_t id, int64_t n) { h.engine().ledger.inject_flush(id, n); })
      .def("set_inputs", &EngineHandle::set_inputs, nb::arg("dtype"), nb::arg("inputs"))
      .def("admit_many", &EngineHandle::admit_many, nb::arg("keys"))
      .def("admission", &EngineHandle::admission, nb::arg("key"), nb::arg("train"), nb::arg("inputs"),
           nb::arg("fields"), nb::arg("rows"))
      .def("inject", &EngineHandle::inject, nb::arg("msgs"), nb::arg("post") = true)
      .def("wait", &EngineHandle::wait, nb::arg("timeout"), nb::arg("wake_batch") = 1)
      .def("notify", [](EngineHandle& h) { h.engine().notify(); })
      .def("take_reports", &EngineHandle::take_reports)
      .def("admit_messages", &EngineHandle::admit_messages, nb::arg("key"), nb::arg("msgs"))
      .def("set_key_limit", &EngineHandle::set_key_limit, nb::arg("limit"), nb::arg("batch") = 1)
      .def("held_keys", [](EngineHandle& h) { return h.engine().held_keys(); })
      .def("keys_held", [](EngineHandle& h) { return h.engine().keys_held(); })
      .def("peak_keys", [](EngineHandle& h) { return h.engine().ledger.peak_keys(); })
      .def("fold_reports", &EngineHandle::fold_reports, nb::arg("decay"), nb::arg("totals"))
      .def("forget_python_failure", [](EngineHandle& h) { h.engine().forget_python_failure(); })
      .def("take_skipped", &EngineHandle::take_skipped)
      .def("failure", &EngineHandle::failure)
      .def("set_knob", &EngineHandle::set_knob)
      .def("set_lr", &EngineHandle::set_lr)
      .def("handled", [](EngineHandle& h) {
        int64_t total = 0;
        for (auto& w : h.engine().workers) total += w->handled.load();
        return total;
      })
      .def("queued", [](EngineHandle& h) {
        std::vector<int64_t> out;
        for (auto& w : h.engine().workers) out.push_back(w->depth());
        return out;
      })
      .def("activity", &EngineHandle::activity)
      .def("worker_times", [](EngineHandle& h) {
        // per worker: (loop_s, ops_s, waiting_s, asleep_s, sleeps, bundles, messages, cpu_s), Worker::Times
        std::vector<std::tuple<double, double, double, double, int64_t, int64_t, int64_t, double>> out;
        for (auto& w : h.engine().workers) {
          const Worker::Times t = w->times();
          out.emplace_back(t.loop_s, t.ops_s, t.waiting_s, t.asleep_s, t.sleeps, t.bundles, w->handled.load(),
                           t.cpu_s);
        }
        return out;
      })
      .def("in_flight", [](EngineHandle& h) {
        return std::make_pair(h.engine().ledger.outstanding(), h.engine().ledger.outstanding_flushes());
      })
      .def("busy", [](EngineHandle& h) { return h.engine().busy(); })
      .def("held", &EngineHandle::held)
      .def("node_state", &EngineHandle::node_state)
      .def("stop", [](EngineHandle& h) { h.engine().stop(); })
      .def("join", [](EngineHandle& h) { h.engine().join(); }, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace amp
