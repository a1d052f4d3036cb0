// Bindings of the worker's parts for their tests against the Python ones (runtime/inbox.py,
// runtime/credits.py, trace/buffers.py; StateMap against a dict), and for the Python trace reader
// (engine/trace.py).
#include "probes.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unordered_map.h>
#include <nanobind/stl/vector.h>

#include <nanobind/stl/tuple.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "blocks.h"
#include "convert.h"
#include "credits.h"
#include "expr.h"
#include "state.h"
#include "inbox.h"
#include "optim.h"
#include "spec.h"
#include "trace.h"

namespace nb = nanobind;

namespace amp {

namespace {

// The columns of a chunk as numpy arrays over its memory (first `rows` rows); each keeps the chunk alive.
nb::dict chunk_columns(const std::shared_ptr<Chunk>& chunk, const std::vector<Column>& columns, int64_t rows) {
  nb::dict out;
  for (size_t i = 0; i < columns.size(); ++i) {
    auto* owner = new std::shared_ptr<Chunk>(chunk);
    nb::capsule keep(owner, [](void* p) noexcept { delete static_cast<std::shared_ptr<Chunk>*>(p); });
    size_t shape[1] = {static_cast<size_t>(rows)};
    nb::dlpack::dtype dt;
    switch (columns[i].code) {
      case 'b': dt = nb::dtype<int8_t>(); break;
      case 'i': dt = nb::dtype<int32_t>(); break;
      case 'q': dt = nb::dtype<int64_t>(); break;
      default: dt = nb::dtype<double>(); break;
    }
    nb::ndarray<nb::numpy, nb::ro> a(chunk->raw(static_cast<int>(i)), 1, shape, keep, nullptr, dt);
    out[columns[i].name.c_str()] = nb::cast(a);
  }
  return out;
}

RowTable& table_of(TraceBuffer& t, const std::string& kind) {
  if (kind == "events") return t.events;
  if (kind == "members") return t.members;
  if (kind == "staleness") return t.staleness;
  throw nb::value_error(("kind: expected 'events', 'members' or 'staleness', got '" + kind + "'").c_str());
}

nb::list table_chunks(RowTable& t) {
  nb::list out;
  for (const auto& c : t.chunks()) {
    int64_t rows = c->rows();  // acquire: every column of these rows is written
    out.append(nb::make_tuple(c->first(), rows, chunk_columns(c, t.columns(), rows)));
  }
  return out;
}

}  // namespace

Inbox::Priority priority_of(const std::string& p) {
  if (p == "backward_first") return Inbox::Priority::kBackwardFirst;
  if (p == "fifo") return Inbox::Priority::kFifo;
  if (p == "light_first") return Inbox::Priority::kLightFirst;
  throw nb::value_error(("priority: expected 'backward_first', 'fifo' or 'light_first', got '" + p + "'").c_str());
}

Inbox::Order order_of(const std::string& o) {
  if (o == "oldest_key") return Inbox::Order::kOldestKey;
  if (o == "arrival") return Inbox::Order::kArrival;
  if (o == "largest_bundle") return Inbox::Order::kLargestBundle;
  throw nb::value_error(("order: expected 'oldest_key', 'arrival' or 'largest_bundle', got '" + o + "'").c_str());
}


// Native costs of the parts, timed inside the engine (no binding call per operation): nanoseconds per
// message for `n` messages over 4 nodes, pushed and taken in waves of `wave` (1: the lone-message path).
double inbox_cost(int64_t n, int64_t wave, int64_t max_bundle) {
  Inbox inbox(Inbox::Priority::kBackwardFirst, Inbox::Order::kOldestKey);
  std::vector<int64_t> caps(4, max_bundle);
  std::vector<uint64_t> out;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; i += wave) {
    for (int64_t j = i; j < i + wave; ++j) inbox.push(static_cast<uint64_t>(j), static_cast<int>(j % 4), kForward, 0, j / 4);
    while (inbox.take(true, caps, nullptr, &out)) {
    }
  }
  std::chrono::duration<double, std::nano> dt = std::chrono::steady_clock::now() - t0;
  return dt.count() / static_cast<double>(n);
}

// A cache round trip per message: insert under a state, then take it (what a kernel does per message).
double cache_cost(int64_t n, int64_t in_flight) {
  StateMap<int64_t> cache;
  State s;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    s.set(0, i);
    s.set(2, i % 7);
    cache.emplace(s) = i;
    if (i >= in_flight) {
      State old;
      old.set(0, i - in_flight);
      old.set(2, (i - in_flight) % 7);
      cache.take(old);
    }
  }
  std::chrono::duration<double, std::nano> dt = std::chrono::steady_clock::now() - t0;
  return dt.count() / static_cast<double>(n);
}

// One ledger release (a message gives up its credit and gives one to its output) per message.
double ledger_cost(int64_t n) {
  Ledger ledger;
  ledger.inject_key(1, 1);
  Credit c{1, false, -1};
  int64_t out = 1;
  std::vector<int64_t> done, flushed;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) ledger.release(Span<const Credit>(&c, 1), Span<const int64_t>(&out, 1), &done, &flushed);
  std::chrono::duration<double, std::nano> dt = std::chrono::steady_clock::now() - t0;
  return dt.count() / static_cast<double>(n);
}

// One native thread writes `n` event rows (row i: key i, start i, end i + 0.5) while the calling thread
// keeps reading every chunk up to its published count: the rows a reader sees must be complete. Returns
// (reads, rows checked, inconsistent rows).
std::tuple<int64_t, int64_t, int64_t> trace_publish_check(int64_t n, int64_t chunk_rows) {
  TraceBuffer buffer(chunk_rows);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int64_t i = 0; i < n; ++i) buffer.record(1, 0, i, static_cast<double>(i), i + 0.5, 0);
    done.store(true, std::memory_order_release);
  });
  int64_t reads = 0, checked = 0, bad = 0;
  bool last = false;
  while (!last) {
    last = done.load(std::memory_order_acquire);
    for (const auto& chunk : buffer.events.chunks()) {
      int64_t rows = chunk->rows();
      for (int64_t r = 0; r < rows; ++r) {
        int64_t key = chunk->column<int64_t>(2)[r];
        bool ok = key == chunk->first() + r && chunk->column<double>(5)[r] == static_cast<double>(key) &&
                  chunk->column<double>(6)[r] == key + 0.5;
        bad += !ok;
        ++checked;
      }
    }
    ++reads;
  }
  writer.join();
  return {reads, checked, bad};
}

// Tensors handed between threads in waves, as payloads travel between workers (blocks.cc): each of
// `threads` threads makes `wave` tensors per round (sizes cycling over every class and beyond the largest),
// fills each with a pattern of (thread, round, index), and hands the wave to the next thread, which checks
// every item and drops them; waves larger than a thread's stack of a class make it spill to the shared
// stacks and refill from them. Returns the items checked and those found wrong.
std::pair<int64_t, int64_t> blocks_exchange_check(int64_t threads, int64_t rounds, int64_t wave) {
  if (threads < 1 || rounds < 0 || wave < 0) throw nb::value_error("blocks_exchange_check: counts >= 0, threads >= 1");
  std::vector<std::vector<std::vector<Tensor>>> inbox(static_cast<size_t>(threads));  // per thread, waves
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int64_t> checked{0}, bad{0};
  auto pattern = [](int64_t t, int64_t r, int64_t i, int64_t j) { return double(((t * 131 + r) * 137 + i) * 139 + j); };
  auto body = [&](int64_t t) {
    int64_t local_checked = 0, local_bad = 0;
    for (int64_t r = 0; r < rounds; ++r) {
      std::vector<Tensor> made;
      for (int64_t i = 0; i < wave; ++i) {
        const int64_t items = (int64_t{1} << (i % 17)) + i % 5;  // 1 item to past the largest class (256 KiB)
        Tensor x = Tensor::empty(DType::f64, {items});
        for (int64_t j = 0; j < items; ++j) x.data<double>()[j] = pattern(t, r, i, j);
        made.push_back(std::move(x));
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        inbox[static_cast<size_t>((t + 1) % threads)].push_back(std::move(made));
      }
      cv.notify_all();
      std::vector<Tensor> got;
      {
        std::unique_lock<std::mutex> lock(mu);
        auto& mine = inbox[static_cast<size_t>(t)];
        cv.wait(lock, [&] { return !mine.empty(); });
        got = std::move(mine.front());
        mine.erase(mine.begin());
      }
      const int64_t from = (t + threads - 1) % threads;
      for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i)
        for (int64_t j = 0; j < got[static_cast<size_t>(i)].size(); ++j) {
          local_bad += got[static_cast<size_t>(i)].data<double>()[j] != pattern(from, r, i, j);
          ++local_checked;
        }
    }
    checked += local_checked;
    bad += local_bad;
  };
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) pool.emplace_back(body, t);
  for (auto& th : pool) th.join();
  return {checked.load(), bad.load()};
}

// fork() while threads pass tensors around (blocks_exchange_check's ring): each child takes and gives back
// more blocks of every class than a thread's stack holds, so it spills to and refills from the shared stacks,
// then exits; a child that has not exited within `timeout_s` is killed and counted as hung (a lock held across
// the fork). Returns (forks, children that exited cleanly).
std::pair<int64_t, int64_t> blocks_fork_check(int64_t threads, int64_t forks, double timeout_s) {
  if (threads < 1 || forks < 0 || !(timeout_s > 0.0))
    throw nb::value_error("blocks_fork_check: threads >= 1, forks >= 0, timeout_s > 0");
  std::atomic<bool> done{false};
  std::thread ring([&] {
    while (!done.load()) blocks_exchange_check(threads, 1, 150);
  });
  int64_t clean = 0;
  for (int64_t f = 0; f < forks; ++f) {
    const pid_t pid = fork();
    if (pid == 0) {  // the child: C++ only, no Python, then _exit
      for (int c = 0; c < 13; ++c) {
        std::vector<Tensor> held;
        for (int i = 0; i < 200; ++i) held.push_back(Tensor::empty(DType::f64, {int64_t{8} << c}));
      }
      _exit(0);
    }
    if (pid < 0) break;
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    pid_t got = 0;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (got == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      continue;
    }
    clean += got == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  done.store(true);
  ring.join();
  return {forks, clean};
}

// Views as the kernels make them (rows [r0, r1) of axis 0, then items [c0, c1) of the last axis) of each
// array, stacked along axis 0 as a bundle is (one view comes back as a contiguous copy of itself): the
// strided copy against numpy's slicing and concatenation.
nb::object stacked_views(nb::list parts) {
  std::vector<Tensor> views;
  for (nb::handle h : parts) {
    nb::tuple t = nb::cast<nb::tuple>(h);
    Tensor x = tensor_from_python(t[0], "a probe's array");
    const int64_t r0 = nb::cast<int64_t>(t[1]), r1 = nb::cast<int64_t>(t[2]);
    const int64_t c0 = nb::cast<int64_t>(t[3]), c1 = nb::cast<int64_t>(t[4]);
    if (x.rank() < 1 || r0 < 0 || r1 < r0 || r1 > x.dim(0)) throw nb::value_error("stacked_views: rows outside");
    Tensor rows = x.rows(r0, r1);
    if (c0 < 0 || c1 < c0 || c1 > rows.dim(rows.rank() - 1)) throw nb::value_error("stacked_views: items outside");
    views.push_back(rows.last_axis(c0, c1));
  }
  if (views.empty()) throw nb::value_error("stacked_views: no views");
  std::vector<int64_t> offsets(views.size() + 1);
  Tensor out = stack_rows(Span<const Tensor>(views.data(), views.size()), offsets.data()).contiguous_copy();
  return tensor_to_python(out);
}

// all_finite (optim.h), the check before a node's update, on float arrays.
bool arrays_finite(nb::list arrays) {
  std::vector<Tensor> grads;
  for (nb::handle h : arrays) {
    Tensor x = tensor_from_python(h, "a probe's array");
    if (x.dtype() != DType::f32 && x.dtype() != DType::f64) throw nb::value_error("arrays_finite: float arrays only");
    grads.push_back(x.contiguous_copy());
  }
  return all_finite(grads);
}

// A state of the probe's maps: slot i holds values[i] (at most kMaxSlots values, all present).
State probe_state(const std::vector<int64_t>& values) {
  if (values.size() > static_cast<size_t>(kMaxSlots)) throw nb::value_error("a state has at most 16 slots");
  State s;
  for (size_t i = 0; i < values.size(); ++i) s.set(static_cast<int>(i), values[i]);
  return s;
}

std::vector<int64_t> probe_values(const State& s) {
  std::vector<int64_t> out;
  for (int i = 0; i < kMaxSlots && s.has(i); ++i) out.push_back(s.get(i));
  return out;
}

// Loss reports given as columns folded as a run's driver folds them (reports.h), for the test against
// Session.add_reports.
nb::tuple fold_report_columns(const std::vector<bool>& trains, const std::vector<double>& losses,
                              const std::vector<int64_t>& ns, const std::vector<int64_t>& corrects, double decay,
                              nb::tuple totals) {
  const size_t n = trains.size();
  if (losses.size() != n || ns.size() != n || corrects.size() != n)
    throw nb::value_error("fold_report_columns: columns of equal length");
  ReportTotals t = totals_from_python(decay, totals);
  std::vector<Report> reports(n);
  for (size_t i = 0; i < n; ++i) reports[i] = Report{static_cast<int64_t>(i), losses[i], ns[i], corrects[i], trains[i]};
  fold_reports_into(reports, decay, &t);
  return totals_to_python(t);
}

void bind_probes(nb::module_& m) {
  m.def("fold_report_columns", &fold_report_columns, nb::arg("trains"), nb::arg("losses"), nb::arg("ns"),
        nb::arg("corrects"), nb::arg("decay"), nb::arg("totals"));
  m.def("stacked_views", &stacked_views, nb::arg("parts"));
  m.def("arrays_finite", &arrays_finite, nb::arg("arrays"));
  m.def("trace_publish_check", &trace_publish_check, nb::arg("n"), nb::arg("chunk_rows"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("blocks_exchange_check", &blocks_exchange_check, nb::arg("threads"), nb::arg("rounds"), nb::arg("wave"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("blocks_kept", &blocks_kept);
  m.def("blocks_fork_check", &blocks_fork_check, nb::arg("threads"), nb::arg("forks"), nb::arg("timeout_s"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("inbox_cost", &inbox_cost, nb::arg("n"), nb::arg("wave"), nb::arg("max_bundle"));
  m.def("cache_cost", &cache_cost, nb::arg("n"), nb::arg("in_flight"));
  m.def("ledger_cost", &ledger_cost, nb::arg("n"));
  nb::class_<Inbox>(m, "Inbox")
      .def("__init__", [](Inbox* p, const std::string& priority, const std::string& order,
                          std::vector<bool> parameterized) {
        new (p) Inbox(priority_of(priority), order_of(order));
        for (size_t i = 0; i < parameterized.size(); ++i) p->set_parameterized(static_cast<int>(i), parameterized[i]);
      }, nb::arg("priority") = "backward_first", nb::arg("order") = "oldest_key",
         nb::arg("parameterized") = std::vector<bool>())
      .def("push", [](Inbox& in, uint64_t handle, int node, int direction, int port, int64_t key) {
        if (node < 0 || direction < 0 || direction > 2 || port < 0) throw nb::value_error("bad message address");
        in.push(handle, node, direction, port, key);
      })
      .def("take", [](Inbox& in, bool allow_forward, std::vector<int64_t> max_bundle, nb::object limit) {
        if (static_cast<int64_t>(max_bundle.size()) <= in.max_node())
          throw nb::value_error("max_bundle: expected one entry per node pushed");
        Inbox::Limit lim;
        if (!limit.is_none()) lim = [&](int node, int direction) { return nb::cast<int64_t>(limit(node, direction)); };
        std::vector<uint64_t> out;
        if (!in.take(allow_forward, max_bundle, lim, &out)) return nb::object(nb::none());
        return nb::cast(out);
      }, nb::arg("allow_forward"), nb::arg("max_bundle"), nb::arg("limit").none())
      .def("has_work", &Inbox::has_work)
      .def("__len__", &Inbox::size);

  // StateMap (state.h) over int64 values, for its test against a dict.
  using ProbeMap = StateMap<int64_t>;
  nb::class_<ProbeMap>(m, "StateMap")
      .def(nb::init<size_t>(), nb::arg("capacity") = 16)
      .def("put", [](ProbeMap& map, const std::vector<int64_t>& state, int64_t value) {
        bool inserted = false;
        map.emplace(probe_state(state), &inserted) = value;
        return inserted;
      })
      .def("get", [](ProbeMap& map, const std::vector<int64_t>& state) -> nb::object {
        const int64_t* v = map.find(probe_state(state));
        return v ? nb::cast(*v) : nb::none();
      })
      .def("take", [](ProbeMap& map, const std::vector<int64_t>& state) -> nb::object {
        bool found = false;
        int64_t v = map.take(probe_state(state), &found);
        return found ? nb::cast(v) : nb::none();
      })
      .def("items", [](const ProbeMap& map) {
        std::vector<std::pair<std::vector<int64_t>, int64_t>> out;
        map.for_each([&](const State& s, const int64_t& v) { out.emplace_back(probe_values(s), v); });
        return out;
      })
      .def("clear", &ProbeMap::clear)
      .def("__len__", &ProbeMap::size);

  nb::class_<Ledger>(m, "Ledger")
      .def(nb::init<>())
      .def("inject_key", &Ledger::inject_key)
      .def("inject_flush", &Ledger::inject_flush)
      .def("add", [](Ledger& l, std::vector<int64_t> keys) { l.add(Span<const int64_t>(keys.data(), keys.size())); })
      .def("release", [](Ledger& l, std::vector<std::pair<int64_t, int64_t>> bundle, std::vector<int64_t> outs) {
        // bundle: (key, flush id or -1 for a key's message)
        std::vector<Credit> credits;
        for (auto& [key, flush] : bundle) credits.push_back(Credit{key, flush >= 0, flush});
        std::vector<int64_t> done, flushed;
        try {
          l.release(Span<const Credit>(credits.data(), credits.size()), Span<const int64_t>(outs.data(), outs.size()),
                    &done, &flushed);
        } catch (const std::logic_error& e) {
          throw nb::key_error(e.what());
        }
        return std::make_pair(done, flushed);
      })
      .def("drain", [](Ledger& l) {
        std::vector<int64_t> done, flushed;
        l.drain(&done, &flushed);
        return std::make_pair(done, flushed);
      })
      .def("set_wake_batch", &Ledger::set_wake_batch, nb::arg("n"))
      .def("outstanding", &Ledger::outstanding);

  nb::class_<TraceBuffer>(m, "TraceBuffer")
      .def(nb::init<int64_t>(), nb::arg("chunk_rows"))
      .def("record", &TraceBuffer::record, nb::arg("node"), nb::arg("phase"), nb::arg("key"), nb::arg("start"),
           nb::arg("end"), nb::arg("depth"), nb::arg("messages") = 1)
      .def("record_bundle", [](TraceBuffer& t, int32_t node, int8_t phase, std::vector<int64_t> keys, double start,
                               double end, int32_t depth) {
        if (keys.empty()) throw nb::value_error("a bundle has at least one key");
        t.record_bundle(node, phase, Span<const int64_t>(keys.data(), keys.size()), start, end, depth);
      })
      .def("record_staleness", &TraceBuffer::record_staleness)
      .def("chunks", [](TraceBuffer& t, const std::string& kind) { return table_chunks(table_of(t, kind)); })
      .def("forget_before", [](TraceBuffer& t, const std::string& kind, int64_t before) {
        table_of(t, kind).forget_before(before);
      })
      .def("chunks_made", [](TraceBuffer& t, const std::string& kind) {
        RowTable& table = table_of(t, kind);
        return nb::make_tuple(table.chunks_made(), table.chunks_reused());
      });
}

}  // namespace amp
