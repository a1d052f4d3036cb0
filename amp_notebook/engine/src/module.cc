// The Python face of the engine (`amp_notebook.engine._native`): a handful of calls, each converting at
// the boundary (convert.h) and checking what enters once. The rest of the engine never sees Python.
//
//   status(), load_blas(path), unload_blas()        which BLAS the products use
//   matmul(a, b, ...), matmul_in_threads(pairs)     numpy-equal products (tests: bit equality, thread safety)
//   StateCodec(names, State)                        a graph's slot layout: encode/decode/equality/hash
//   Program(code, n_slots), evaluate(...)           compiled expressions
//   KernelProbe(...)                                one node's kernel (native or bridged), driven message by
//                                                   message or in bundles: the kernel test harness; cost(...)
//                                                   times it natively (benchmarks)
//   Inbox, Ledger, TraceBuffer                      (probes.cc) the worker's parts, for their tests
//   core_round_trip_ns(...)                         (cores.h) how far apart two of the process's CPUs are
//   Engine(...)                                     (engine_module.cc) a run: nodes, worker threads, ledger
//
// Errors: a kernel's OpError becomes KernelError(message, port), an expression failure
// ExpressionFailure(program, code); engine/probe.py turns both into the Python op's own exceptions.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <memory>
#include <thread>

#include "blas.h"
#include "bridge.h"
#include "convert.h"
#include "cores.h"
#include "kernels/kernel.h"
#include "probes.h"
#include "spec.h"

namespace amp {

namespace {

PyObject* kernel_error_type = nullptr;
PyObject* expression_failure_type = nullptr;

// One node's kernel with its NodeCtx, driven from Python (tests; later the worker does the same).
class KernelProbe {
 public:
  KernelProbe(const StateCodec* codec, nb::dict spec, nb::list params, nb::list grads, uint32_t grad_inputs,
              uint32_t grad_outputs, nb::object bridge)
      : codec_(codec) {
    for (nb::handle p : params) keep_.push_back(nb::borrow(p));
    for (nb::handle g : grads) keep_.push_back(nb::borrow(g));
    KernelSpec ks = spec_from_python(*codec, spec, params, grads, &ctx_);
    ctx_.grad_inputs = grad_inputs;
    ctx_.grad_outputs = grad_outputs;
    kernel_ = kernel_for(ks, *codec, bridge);
    n_in_ = static_cast<int>(ks.in_names.size());
    n_out_ = static_cast<int>(ks.out_names.size());
  }

  // One bundle through the kernel. After a backward the kernel's held-back gradients are written into the
  // accumulators (Kernel::settle) unless `hold`: a test that reads them only at the end, as an update does.
  nb::list run(bool forward, int port, nb::list payloads, nb::list states, bool train, int64_t n_grads,
               bool hold = false) {
    if (forward ? (port < 0 || port >= n_in_) : (port != kLossPort && (port < 0 || port >= n_out_)))
      throw nb::value_error("port out of range");
    if (nb::len(payloads) != nb::len(states) || nb::len(payloads) == 0)
      throw nb::value_error("a bundle needs as many states as payloads, at least one");
    std::vector<Tensor> xs;
    std::vector<State> ss;
    for (nb::handle p : payloads) xs.push_back(tensor_from_python(p, "payload"));
    for (nb::handle s : states) ss.push_back(codec_->encode(s));
    ctx_.train = train;
    ctx_.n_grads = n_grads;
    Outputs out;
    Span<const Tensor> xspan(xs.data(), xs.size());
    Span<const State> sspan(ss.data(), ss.size());
    if (forward) kernel_->forward(ctx_, port, xspan, sspan, out);
    else kernel_->backward(ctx_, port, xspan, sspan, out);
    if (!forward && !hold) kernel_->settle(ctx_);
    nb::list result;
    for (const Output& o : out.items)
      result.append(nb::make_tuple(o.port, tensor_to_python(o.payload), codec_->decode(o.state)));
    return result;
  }

  size_t held() const { return kernel_->held(); }
  void settle() { kernel_->settle(ctx_); }

  // Seconds per round, over `rounds` rounds (after one more to warm up), of every call in `forwards`
  // (training) then every call in `backwards`, each (port, payloads, states), converted once: what the
  // kernel costs per bundle without the Python boundary (benchmarks; a backward must find its forward's cache).
  double cost(nb::list forwards, nb::list backwards, int64_t rounds) {
    struct Call {
      int port;
      std::vector<Tensor> xs;
      std::vector<State> ss;
    };
    auto convert = [&](nb::list calls) {
      std::vector<Call> out;
      for (nb::handle c : calls) {
        nb::tuple t = nb::borrow<nb::tuple>(c);
        Call call{nb::cast<int>(t[0]), {}, {}};
        for (nb::handle p : nb::borrow<nb::list>(t[1])) call.xs.push_back(tensor_from_python(p, "payload"));
        for (nb::handle s : nb::borrow<nb::list>(t[2])) call.ss.push_back(codec_->encode(s));
        out.push_back(std::move(call));
      }
      return out;
    };
    const std::vector<Call> fw = convert(forwards), bw = convert(backwards);
    ctx_.train = true;
    ctx_.n_grads = 0;
    auto start = std::chrono::steady_clock::now();
    for (int64_t r = 0; r <= rounds; ++r) {
      if (r == 1) start = std::chrono::steady_clock::now();
      for (const Call& c : fw) {
        Outputs out;
        kernel_->forward(ctx_, c.port, Span<const Tensor>(c.xs.data(), c.xs.size()),
                         Span<const State>(c.ss.data(), c.ss.size()), out);
      }
      for (const Call& c : bw) {
        Outputs out;
        kernel_->backward(ctx_, c.port, Span<const Tensor>(c.xs.data(), c.xs.size()),
                          Span<const State>(c.ss.data(), c.ss.size()), out);
        // held-back gradients are part of the cost: every call starts the accumulator over (n_grads 0),
        // which would drop the rows the call before queued, so each call's rows are added before the next
        kernel_->settle(ctx_);
      }
    }
    const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start;
    return rounds > 0 ? spent.count() / static_cast<double>(rounds) : 0.0;
  }

  nb::list take_reports() {
    nb::list out;
    for (const Report& r : ctx_.reports) out.append(report_to_python(r));
    ctx_.reports.clear();
    return out;
  }

 private:
  const StateCodec* codec_;
  NodeCtx ctx_;
  std::unique_ptr<Kernel> kernel_;
  std::vector<nb::object> keep_;  // the numpy arrays the parameter views borrow stay alive with the probe
  int n_in_ = 0, n_out_ = 0;
};

Tensor float_matrix(nb::handle a, bool transpose) {
  Tensor t = tensor_from_python(a, "matrix");
  if (t.rank() != 2 || (t.dtype() != DType::f32 && t.dtype() != DType::f64))
    throw nb::value_error("matmul takes 2-d float32 or float64 arrays");
  return transpose ? transposed(t) : t;
}

nb::object product(const Tensor& a, const Tensor& b) {
  if (a.dim(1) != b.dim(0) || a.dtype() != b.dtype()) throw nb::value_error("matmul: shapes or dtypes differ");
  Tensor out = Tensor::empty(a.dtype(), {a.dim(0), b.dim(1)});
  matmul(a, b, out);
  return tensor_to_python(out);
}

}  // namespace

}  // namespace amp

NB_MODULE(_native, m) {
  using namespace amp;
  // nanobind reports every instance of this module still alive when the interpreter exits as a leak. An
  // engine that lives to the exit is not one: ipywidgets keeps each open widget (a GraphBuilder or a
  // Dashboard, with the run it shows, its engine and trace buffers) in its registry until the widget is
  // closed, so a script that trains from a builder would end in a page of false alarms. The sanitizer build
  // keeps the report, where the engine's tests run without widgets and LeakSanitizer checks the heap too.
#if !defined(__SANITIZE_ADDRESS__)
  nb::set_leak_warnings(false);
#endif
  // both are AmpErrors (and ValueErrors), as every exception the package raises; engine/errors.py turns
  // them into the Python op's own exceptions
  nb::object amp_error = nb::module_::import_("amp_notebook.errors").attr("AmpError");
  nb::tuple bases = nb::make_tuple(amp_error, nb::handle(PyExc_ValueError));
  kernel_error_type = PyErr_NewException("amp_notebook.engine._native.KernelError", bases.ptr(), nullptr);
  expression_failure_type = PyErr_NewException("amp_notebook.engine._native.ExpressionFailure", bases.ptr(), nullptr);
  m.attr("KernelError") = nb::handle(kernel_error_type);
  m.attr("ExpressionFailure") = nb::handle(expression_failure_type);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const OpError& e) {
      PyErr_SetObject(kernel_error_type, nb::make_tuple(e.what(), e.port).ptr());
    } catch (const ExpressionFailure& e) {
      PyErr_SetObject(expression_failure_type, nb::make_tuple(e.program, e.code).ptr());
    } catch (const PythonFailure& e) {  // a bridged op's own exception, raised unchanged
      PyObject* exc = static_cast<PyObject*>(e.exception.get());
      PyErr_Restore(Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(exc))), Py_NewRef(exc),
                    PyException_GetTraceback(exc));
    }
  });

  m.def(
      "core_round_trip_ns",
      [](int64_t round_trips, int batches, double deadline_s) {
        if (round_trips < 1 || round_trips > 10'000'000 || batches < 1 || batches > 1000 ||
            !(deadline_s > 0.0 && deadline_s <= 60.0))
          throw nb::value_error("core_round_trip_ns: expected 1 <= round_trips <= 10000000, 1 <= batches <= 1000 "
                                "and 0 < deadline_s <= 60");
        nb::gil_scoped_release unlocked;  // two threads spin for a few milliseconds; Python goes on
        return core_round_trip_ns(round_trips, batches, deadline_s);
      },
      nb::arg("round_trips") = 2000, nb::arg("batches") = 9, nb::arg("deadline_s") = 0.05);

  m.def("status", []() {
    nb::dict d;
    d["blas"] = blas_status();
    d["blas_loaded"] = blas_loaded();
    d["kernels"] = kernel_kinds();
    d["max_slots"] = kMaxSlots;
    d["inline_slots"] = kInlineSlots;
    d["max_rank"] = kMaxRank;
    return d;
  });
  m.def("load_blas", &blas_load, nb::arg("path"));
  m.def("unload_blas", &blas_unload);
  m.def("matmul", [](nb::handle a, nb::handle b, bool ta, bool tb) { return product(float_matrix(a, ta), float_matrix(b, tb)); },
        nb::arg("a"), nb::arg("b"), nb::arg("transpose_a") = false, nb::arg("transpose_b") = false);
  m.def("matmul_in_threads", [](nb::list pairs, int repeats) {
    // every pair on its own native thread, without the GIL, `repeats` times; the last results come back
    std::vector<std::pair<Tensor, Tensor>> in;
    for (nb::handle p : pairs) {
      nb::tuple t = nb::borrow<nb::tuple>(p);
      in.emplace_back(float_matrix(t[0], false), float_matrix(t[1], false));
      if (in.back().first.dim(1) != in.back().second.dim(0)) throw nb::value_error("matmul: shapes differ");
    }
    std::vector<Tensor> out(in.size());
    for (size_t i = 0; i < in.size(); ++i) out[i] = Tensor::empty(in[i].first.dtype(), {in[i].first.dim(0), in[i].second.dim(1)});
    {
      nb::gil_scoped_release release;
      std::vector<std::thread> threads;
      for (size_t i = 0; i < in.size(); ++i)
        threads.emplace_back([&, i] {
          for (int r = 0; r < repeats; ++r) matmul(in[i].first, in[i].second, out[i]);
        });
      for (auto& t : threads) t.join();
    }
    nb::list result;
    for (const Tensor& t : out) result.append(tensor_to_python(t));
    return result;
  }, nb::arg("pairs"), nb::arg("repeats") = 1);

  nb::class_<StateCodec>(m, "StateCodec")
      .def(nb::init<const std::vector<std::string>&, nb::handle>(), nb::arg("names"), nb::arg("state_class"))
      .def("roundtrip", [](const StateCodec& c, nb::handle s) { return c.decode(c.encode(s)); })
      .def("same", [](const StateCodec& c, nb::handle a, nb::handle b) { return c.encode(a) == c.encode(b); })
      .def("hash", [](const StateCodec& c, nb::handle s) { return c.encode(s).hash(); })
      .def("describe", [](const StateCodec& c, nb::handle s) { return c.layout().describe(c.encode(s)); });

  nb::class_<Program>(m, "Program")
      .def("__init__", [](Program* p, nb::handle code, int n_slots) { new (p) Program(program_from_python(code, n_slots)); },
           nb::arg("code"), nb::arg("n_slots"))
      .def_ro("max_stack", &Program::max_stack)
      .def("evaluate", [](const Program& p, const StateCodec& c, nb::handle state) {
        Value v;
        int status = evaluate(p, c.encode(state), &v);
        return nb::make_tuple(status, v.v, v.is_bool);
      });

  nb::class_<KernelProbe>(m, "KernelProbe")
      .def(nb::init<const StateCodec*, nb::dict, nb::list, nb::list, uint32_t, uint32_t, nb::object>(),
           nb::arg("codec"), nb::arg("spec"), nb::arg("params"), nb::arg("grads"), nb::arg("grad_inputs"),
           nb::arg("grad_outputs"), nb::arg("bridge").none(), nb::keep_alive<1, 2>())
      .def("forward", [](KernelProbe& k, int port, nb::list xs, nb::list ss, bool train, int64_t n_grads) {
        return k.run(true, port, xs, ss, train, n_grads);
      })
      .def("backward", [](KernelProbe& k, int port, nb::list gs, nb::list ss, int64_t n_grads, bool hold) {
        return k.run(false, port, gs, ss, true, n_grads, hold);
      }, nb::arg("port"), nb::arg("gs"), nb::arg("ss"), nb::arg("n_grads"), nb::arg("hold") = false)
      .def("held", &KernelProbe::held)
      .def("settle", &KernelProbe::settle)
      .def("cost", &KernelProbe::cost, nb::arg("forwards"), nb::arg("backwards"), nb::arg("rounds"))
      .def("take_reports", &KernelProbe::take_reports);

  bind_probes(m);
  bind_engine(m);
}
