// See bridge.h.
#include "bridge.h"

namespace amp {

PythonKernel::PythonKernel(nb::object op, nb::object py_ctx, const StateCodec* codec,
                           std::vector<std::string> in_names, std::vector<std::string> out_names)
    : op_(std::move(op)), py_ctx_(std::move(py_ctx)), codec_(codec) {
  for (size_t i = 0; i < in_names.size(); ++i) {
    in_names_.push_back(nb::str(in_names[i].c_str()));
    in_index_[in_names_.back()] = nb::int_(static_cast<int>(i));
  }
  for (size_t i = 0; i < out_names.size(); ++i) {
    out_names_.push_back(nb::str(out_names[i].c_str()));
    out_index_[out_names_.back()] = nb::int_(static_cast<int>(i));
  }
  out_index_["loss"] = nb::int_(kLossPort);
}

PythonKernel::~PythonKernel() {
  nb::gil_scoped_acquire gil;  // the Python references go with the GIL held
  op_.reset();
  py_ctx_.reset();
  in_names_.clear();
  out_names_.clear();
  in_index_.reset();
  out_index_.reset();
}

void PythonKernel::forward(NodeCtx& ctx, int port, Span<const Tensor> xs, Span<const State> states, Outputs& out) {
  nb::gil_scoped_acquire gil;
  try {
    // one message: the op's `forward`, as the Python engine calls it (an op may override only that)
    call(ctx, xs.size() == 1 ? "forward" : "forward_bundle", in_names_.at(port), xs, states, true, out);
  } catch (...) {
    rethrow_as_python_failure();
  }
}

void PythonKernel::backward(NodeCtx& ctx, int port, Span<const Tensor> gs, Span<const State> states, Outputs& out) {
  nb::gil_scoped_acquire gil;
  try {
    nb::object name = port == kLossPort ? nb::str("loss") : out_names_.at(port);
    call(ctx, gs.size() == 1 ? "backward" : "backward_bundle", name, gs, states, false, out);
  } catch (...) {
    rethrow_as_python_failure();
  }
}

std::shared_ptr<void> hold_python(nb::object exc) {
  return std::shared_ptr<void>(exc.release().ptr(), [](void* p) {
    nb::gil_scoped_acquire gil;
    Py_DECREF(static_cast<PyObject*>(p));
  });
}

void rethrow_as_python_failure() {
  try {
    throw;
  } catch (nb::python_error& e) {
    throw PythonFailure(hold_python(nb::borrow(e.value())));
  } catch (const nb::builtin_exception& e) {
    PyObject* type = PyExc_RuntimeError;
    switch (e.type()) {
      case nb::exception_type::value_error: type = PyExc_ValueError; break;
      case nb::exception_type::type_error: type = PyExc_TypeError; break;
      case nb::exception_type::key_error: type = PyExc_KeyError; break;
      case nb::exception_type::index_error: type = PyExc_IndexError; break;
      default: break;
    }
    throw PythonFailure(hold_python(nb::handle(type)(nb::str(e.what()))));
  }
}

void* attach_python_thread() {
  PyGILState_STATE* state = new PyGILState_STATE(PyGILState_Ensure());
  PyEval_SaveThread();  // keep the thread state, give the GIL back
  return state;
}

void detach_python_thread(void* token) {
  auto* state = static_cast<PyGILState_STATE*>(token);
  PyEval_RestoreThread(PyGILState_GetThisThreadState());
  PyGILState_Release(*state);
  delete state;
}

void PythonKernel::call(NodeCtx& ctx, const char* method, nb::handle port_name, Span<const Tensor> xs,
                        Span<const State> states, bool forward, Outputs& out) {
  py_ctx_.attr("train") = nb::bool_(ctx.train);
  py_ctx_.attr("n_grads") = nb::int_(ctx.n_grads);
  nb::list payloads, py_states;
  for (size_t i = 0; i < xs.size(); ++i) {
    payloads.append(tensor_to_python(xs[i]));
    py_states.append(codec_->decode(states[i]));
  }
  nb::object emitted = xs.size() == 1 ? op_.attr(method)(py_ctx_, port_name, payloads[0], py_states[0])
                                      : op_.attr(method)(py_ctx_, port_name, payloads, py_states);
  nb::dict& index = forward ? out_index_ : in_index_;
  for (nb::handle item : emitted) {
    nb::tuple t = nb::borrow<nb::tuple>(item);
    nb::object name = t[0];
    if (!index.contains(name))
      throw nb::value_error(("the Python op emitted on port " + nb::cast<std::string>(nb::repr(name)) +
                             ", which the compile step does not know").c_str());
    int p = nb::cast<int>(index[name]);
    out.push(p, tensor_from_python(t[1], "payload from the Python op"), codec_->encode(t[2]));
  }
  nb::list reports = nb::borrow<nb::list>(py_ctx_.attr("reports"));
  for (nb::handle r : reports) {
    nb::dict d = nb::borrow<nb::dict>(r);
    Report rep;
    rep.key = nb::cast<int64_t>(d["key"]);
    rep.loss = nb::cast<double>(d["loss"]);
    rep.n = d.contains("n") ? nb::cast<int64_t>(d["n"]) : 0;
    rep.correct = d.contains("correct") ? nb::cast<int64_t>(d["correct"]) : -1;
    ctx.reports.push_back(rep);
  }
  reports.clear();
}

size_t PythonKernel::held() const {
  nb::gil_scoped_acquire gil;
  nb::object cache = py_ctx_.attr("cache"), joins = py_ctx_.attr("joins");
  return nb::len(cache) + nb::len(joins);
}

}  // namespace amp
