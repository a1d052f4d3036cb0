// Native optimizer steps: SGD, momentum and Adam with clip_norm, the twins of amp_notebook/optim.py, applied
// to a node's parameters, gradient accumulators and optimizer memory (all numpy arrays that Python owns,
// seen as borrowed Tensors, written in place). The arithmetic is optim.py's operation for operation, in the
// parameters' dtype, with numpy's scalar rules: a Python float meets a float32 array as a float32 (NEP 50),
// Adam's bias-corrected rate is a numpy float64 and so is applied in float64 and rounded to the array's
// dtype; the clip norm sums numpy's vdot of each accumulator (numpy's BLAS dot, summed in a double) in the
// order Python's dict holds them. A step uses the accumulators as scratch, as optim.py does: the caller
// forgets them afterwards. The learning rate is read per step (Python lowers it at an epoch end, lr_decay).
// Never touches Python, threads or messages.
#pragma once

#include <atomic>
#include <vector>

#include "tensor.h"

namespace amp {

enum class OptimizerKind : int { kSgd = 0, kMomentum = 1, kAdam = 2 };

struct OptimizerState {
  OptimizerKind kind = OptimizerKind::kSgd;
  std::atomic<double> lr{0.1};
  double momentum = 0.9, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clip_norm = 0.0;  // 0: none
  int64_t t = 0;           // Adam's step count (state["t"])
  // per parameter, in the kernel's parameter order: momentum's velocity, or Adam's m, v and scratch
  std::vector<Tensor> velocity, m, v, scratch;
  std::vector<int> norm_order;  // parameter indices in the order Python's grads dict lists them
};

// One step: params -= f(grads * scale) per optim.py. `params` and `grads` in the kernel's parameter order.
void optimizer_step(OptimizerState& opt, std::vector<Tensor>& params, std::vector<Tensor>& grads, double scale);
// Whether every value of every accumulator is finite (runtime/numerics.py all_finite).
bool all_finite(const std::vector<Tensor>& grads);

}  // namespace amp
