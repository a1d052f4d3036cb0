// The bridge: a Kernel that runs a node's Python op, for ops with no native kernel (a user's own op, or
// a kind nobody has written a kernel for yet). It takes the GIL for the whole bundle, converts payloads
// (numpy views of the native tensors, read-only) and states (through the graph's StateCodec) into Python,
// calls op.forward_bundle / op.backward_bundle with the node's Python NodeContext, and converts the
// outputs back (payloads copied into native tensors, states encoded; a state field outside the layout is
// an error naming the field). The Python NodeContext holds everything the op keeps between calls: its
// caches, joins and (for a parameterized op) its gradient accumulators, so a bridged node's update also
// runs in Python. Reports move from ctx.reports to the native NodeCtx.
// Python exceptions propagate as nb::python_error, unchanged.
#pragma once

#include "convert.h"
#include "kernels/kernel.h"

namespace amp {

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
