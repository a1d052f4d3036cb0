// The boundary for one node: its KernelSpec (engine/specs.py's dict), parameters and gradient accumulators
// from Python, checked once here, and the node's kernel (native from the registry, or the bridge to its
// Python op). Used by the kernel test harness (KernelProbe) and by a run (the engine's nodes). Needs the GIL.
#pragma once

#include <memory>

#include "bridge.h"
#include "convert.h"
#include "kernels/kernel.h"
#include "reports.h"

namespace amp {

// `spec` decoded and checked against the layout; `params` / `grads` become ctx.params / ctx.grads (views of
// the numpy arrays: the caller keeps them alive) after checking them against spec["param_shapes"].
KernelSpec spec_from_python(const StateCodec& codec, nb::dict spec, nb::list params, nb::list grads, NodeCtx* ctx);
// The kernel of a node: `bridge` is None (the registry's kernel for spec.kind) or (op, context) for the
// Python op.
std::unique_ptr<Kernel> kernel_for(const KernelSpec& spec, const StateCodec& codec, nb::handle bridge);
// A loss report as the dict a Python loss reports: key, loss, n and (where counted) correct.
nb::dict report_to_python(const Report& r);
// The session's running sums of loss reports (reports.h) from Python: `totals` is (train, val, recent_loss,
// recent_accuracy), a side (n, loss sum, correct sum or None), a moving average None until set. Refuses a
// malformed `totals` or a decay outside [0, 1] (before any report is taken).
ReportTotals totals_from_python(double decay, nb::tuple totals);
// Back to Python in the same shape, None for a side no report touched.
nb::tuple totals_to_python(const ReportTotals& t);
// An expression program from its (n, 3) int64 array, validated against `n_slots`.
Program program_from_python(nb::handle code, int n_slots);

}  // namespace amp
