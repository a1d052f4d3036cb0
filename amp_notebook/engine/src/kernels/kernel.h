// The kernel interface: how a native op runs a bundle of messages of one node and one port, and the
// registry that maps an op kind ("linear", "cond", ...) to the factory of its kernel.
//
// A kernel is the native twin of one Python op (ir/ops/*.py) and must equal it: the same outputs, in
// the same order, with the same states, and the same gradients (float64 to 1e-12), one message at a
// time or bundled. One Kernel object is made per node, from the KernelSpec that the compile step
// (engine/specs.py) encodes from the op's configuration; it keeps whatever the op keeps in
// NodeContext.cache / joins (as StateMap members), and is only ever called by the worker that owns its
// node, so it needs no lock. What several kernels share (parameters, gradient accumulators, counters,
// loss reports) is in NodeCtx, which the worker owns.
//
//   forward(ctx, port, xs, states, out):  `xs[i]` arrived with `states[i]` at input port `port`;
//                                         push every output as out.push(out_port, payload, state)
//   backward(ctx, port, gs, states, out): `gs[i]` is the gradient for output `port` of the forward
//                                         message with `states[i]`; push (in_port, grad, state)
//
// Ports are indices: input ports in the order of the op's input_ports(), output ports in the order of
// output_ports(); a loss's pseudo-output is kLossPort (its forward pushes the loss value there as a
// 0-d tensor, and the worker calls backward(kLossPort, 1.0) for training keys, as runtime/worker.py
// does). Payloads are never written in place: a kernel that needs a changed copy makes one.
//
// Errors: throw OpError (common.h) with the message the Python op gives (the worker adds node, direction
// and state); an expression failure throws ExpressionFailure and the Python face re-raises Python's own
// ExpressionError. Inputs were checked at the boundary (dtype, rank); a kernel checks only what the
// Python op checks itself (shapes that must agree, class ids in range).
//
// To add a kernel: see kernels/README.md.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "expr.h"
#include "state.h"
#include "tensor.h"

namespace amp {

// A loss report (NodeContext.report in Python): key, mean loss, instance count, and correct predictions
// where the loss counts them; `train`, whether the key trains, is the worker's to set (Worker::take_reports).
struct Report {
  int64_t key = 0;
  double loss = 0.0;
  int64_t n = 0;
  int64_t correct = -1;  // -1: not reported
  bool train = true;
};

// What a node's kernel shares with the worker (NodeContext in ir/ops/base.py, minus the op's own caches).
struct NodeCtx {
  const Layout* layout = nullptr;
  std::vector<Tensor> params;  // in param_shapes() order; views of numpy arrays that Python owns
  std::vector<Tensor> grads;   // likewise: the accumulators the optimizer reads (written in place)
  uint32_t grad_inputs = 0;    // bit p: input port p wants its gradient (plan.grad_inputs)
  uint32_t grad_outputs = 0;   // bit p: output port p sends one back (plan.grad_outputs)
  bool train = true;           // set per call: cache for a backward that will come (NodeContext.train)
  int64_t n_grads = 0;         // gradients accumulated since the last update, before this call's
  std::vector<Report> reports;

  bool wants_grad(int in_port) const { return (grad_inputs >> in_port) & 1u; }
};

struct Output {
  int port;
  Tensor payload;
  State state;
};

class Outputs {
 public:
  void push(int port, Tensor payload, const State& state) { items.push_back(Output{port, std::move(payload), state}); }
  std::vector<Output> items;
};

// What the compile step knows of one node, encoded per kind by engine/specs.py.
struct KernelSpec {
  std::string kind;
  std::vector<std::string> in_names;   // input_ports(), for error messages
  std::vector<std::string> out_names;  // output_ports()
  std::vector<int64_t> ints;      // the kind's integer settings (each kernel documents its own)
  std::vector<Program> programs;  // its expressions, compiled
  std::vector<int> match_slots;   // JoinMixin.match_on as slots; empty with match_full: join on the whole state
  bool match_full = true;
  int n_slots = 0;                // the layout's size (slots in ints are checked against it)
  int n_params = 0;               // parameters in NodeCtx (checked against the op's param_shapes)
};

// A spec that does not fit its kernel: raised by a kernel's constructor (the boundary), a ValueError in Python.
struct SpecError : std::invalid_argument {
  explicit SpecError(const std::string& what) : std::invalid_argument("kernel spec: " + what) {}
};

// Each kernel starts a cache line and fills whole lines (alignas): the kernels of nodes that different workers
// own are allocated side by side as a run is assembled, and each writes its own state on every message.
class alignas(64) Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void forward(NodeCtx& ctx, int port, Span<const Tensor> xs, Span<const State> states, Outputs& out) = 0;
  virtual void backward(NodeCtx& ctx, int port, Span<const Tensor> gs, Span<const State> states, Outputs& out) = 0;
  // Entries cached or waiting at joins (0 once every backward has come back): leak checks, diagnosis.
  virtual size_t held() const { return 0; }
  // Write any gradient the kernel still holds back into ctx.grads (a Linear's queued rows: deferred_grad.h).
  // Called by the node's own worker before an update reads them, and under the worker's step lock before
  // Python reads them; a kernel that accumulates as it goes has nothing to do.
  virtual void settle(NodeCtx&) {}
};

using Factory = std::unique_ptr<Kernel> (*)(const KernelSpec&);

// The registry: one entry per op kind. Each kernel file registers its kinds with a static Registrar.
void register_kernel(const char* kind, Factory factory);
Factory find_kernel(const std::string& kind);
std::vector<std::string> kernel_kinds();

struct Registrar {
  Registrar(const char* kind, Factory factory) { register_kernel(kind, factory); }
};

template <class K>
std::unique_ptr<Kernel> make_kernel(const KernelSpec& spec) {
  return std::unique_ptr<Kernel>(new K(spec));
}

#define AMP_KERNEL_NAME_(a, b) a##b
#define AMP_KERNEL_NAME(a, b) AMP_KERNEL_NAME_(a, b)
#define AMP_REGISTER_KERNEL(kind, Class) \
  static const ::amp::Registrar AMP_KERNEL_NAME(amp_registrar_, __COUNTER__)(kind, &::amp::make_kernel<Class>)

// The join of JoinMixin (ir/ops/base.py): messages wait until every input port holds one whose state
// matches (the whole state, or key plus match_on fields); the output takes the first port's state.
struct JoinSlot {
  bool got = false;
  Tensor x;
  State state;
};
constexpr int kMaxJoinPorts = 4;
struct JoinEntry {
  JoinSlot slot[kMaxJoinPorts];
  int count = 0;
};

class Joins {
 public:
  explicit Joins(const KernelSpec& spec)
      : full_(spec.match_full), slots_(spec.match_slots), names_(spec.in_names) {}
  // Add a message; true (and `got` filled, the entry removed) when every one of `n_ports` is there.
  bool add(int port, const Tensor& x, const State& s, int n_ports, const Layout& layout, JoinEntry* got);
  size_t size() const { return waiting_.size(); }

 private:
  State match(const State& s, const Layout& layout) const;
  bool full_;
  std::vector<int> slots_;
  std::vector<std::string> names_;
  StateMap<JoinEntry> waiting_;
};

// Helpers every kernel uses.
// The dtype numpy's promotion gives two operands of arithmetic: float32 only if both are, else float64.
DType promote(DType a, DType b);
// `x` as a tensor of `dtype` (itself if it already is one; else a contiguous cast copy, as numpy casts).
Tensor as_dtype(const Tensor& x, DType dtype);
Tensor take_cached(StateMap<Tensor>& cache, const State& s, const Layout& layout);  // OpError if absent
std::string shape_text(const Tensor& t);  // "(3, 4)" as numpy prints a shape
std::string shape_text(const int64_t* shape, int rank);

}  // namespace amp
