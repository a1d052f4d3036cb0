// The bridge: a Kernel that runs a node's Python op, for ops with no native kernel (a user's own op, or
// a kind nobody has written a kernel for yet). It takes the GIL for the whole bundle, converts payloads
// (numpy views of the native tensors, read-only) and states (through the graph's StateCodec) into Python,
// calls op.forward_bundle / op.backward_bundle (op.forward / op.backward for a bundle of one message, as
// the Python engine does) with the node's Python NodeContext, and converts the
// outputs back (payloads copied into native tensors, states encoded; a state field outside the layout is
// an error naming the field). The Python NodeContext holds everything the op keeps between calls: its
// caches, joins and (for a parameterized op) its gradient accumulators, so a bridged node's update also
// runs in Python. Reports move from ctx.reports to the native NodeCtx.
// A Python exception (or a nanobind error such as a state field outside the layout) leaves the kernel as a
// PythonFailure holding the exception object: a worker thread records it without the GIL, and the driver
// (or, for the kernel tests, the module's exception translator) raises it unchanged.
#pragma once

#include "convert.h"
#include "kernels/kernel.h"

namespace amp {

// The exception object `exc` kept alive (the deleter takes the GIL to drop it).
std::shared_ptr<void> hold_python(nb::object exc);
// The C++ exception in flight inside a call into Python (python_error, or a nanobind builtin_exception
// turned into its Python exception) as a PythonFailure; call in a catch block, with the GIL held.
[[noreturn]] void rethrow_as_python_failure();

// A Python thread state for a native worker thread, for a whole run: attach on the thread (takes the GIL
// once to create it, then releases the GIL), detach with its token when the thread ends. Then taking the
// GIL for a bridged op costs a lock, not a thread state each time.
void* attach_python_thread();
void detach_python_thread(void* token);

class PythonKernel : public Kernel {
 public:
  PythonKernel(nb::object op, nb::object py_ctx, const StateCodec* codec, std::vector<std::string> in_names,
               std::vector<std::string> out_names);
  ~PythonKernel() override;
  void forward(NodeCtx& ctx, int port, Span<const Tensor> xs, Span<const State> states, Outputs& out) override;
  void backward(NodeCtx& ctx, int port, Span<const Tensor> gs, Span<const State> states, Outputs& out) override;
  size_t held() const override;

 private:
  void call(NodeCtx& ctx, const char* method, nb::handle port_name, Span<const Tensor> xs, Span<const State> states,
            bool forward, Outputs& out);
  nb::object op_, py_ctx_;
  const StateCodec* codec_;
  std::vector<nb::object> in_names_, out_names_;
  nb::dict in_index_, out_index_;
};

}  // namespace amp
