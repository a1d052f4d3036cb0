// The native worker loop: the design the next milestone implements (nothing here is compiled yet).
// It is runtime/worker.py's Worker.step and the threaded backend's loop, in native code, without the GIL.
//
// Per run, Python hands the engine the tables of engine/plan.py (state layout, kernel specs, routes by
// port index, grad masks, owners, min_update_frequency, max_bundle) and, per node, numpy arrays for its
// parameters and gradient accumulators (NodeCtx views; Python reads them when the run is quiescent).
// Optimizer steps for SGD/momentum/Adam are kernels too (optim.py is their specification); a node whose
// optimizer has no native form updates through the bridge.
//
// Message: {node, port, direction, train, State, Tensor payload}, pooled per worker (handles index the
// pool; the inbox holds handles). A mailbox per worker (a mutex-guarded vector swapped out whole, or an
// MPSC queue) takes deliveries from other workers and the controller's injections.
//
// Each worker thread (one std::thread per worker, started and joined by the backend, never detached):
//
//   loop:
//     drain the mailbox into the Inbox (push: O(1) amortised, no allocation)
//     if stop requested: exit; if paused: take only backward/update work (allow_forward = false)
//     bundle = inbox.take(allow_forward, live max_bundle, cap = min(max_bundle, muf - n_grads) for a
//              locally updating parameterized node's gradients)                   (runtime/worker.py bundle_cap)
//     if none: wait on the worker's condition variable (woken by a delivery, pause/resume/stop)
//     t0 = now
//     kernel = kernels[node]; ctx.train = message.train && receives_backward[node]
//     forward:  kernel.forward(...)  -> for train && parameterized: fwd_version[state] = version
//               route each output along fwd_route; kLossPort outputs of training keys -> kernel.backward
//               (kLossPort, 1.0) at once; move loss reports to the per-worker report queue
//     backward: kernel.backward(...) -> parameterized: staleness row per message (version - fwd_version),
//               n_grads += n, due update if local updates and n_grads >= min_update_frequency
//     update:   apply the optimizer (flush)
//     t1 = now; trace row (record / record_bundle), depth = inbox.size()
//     if an update is due: ledger.add(outs), deliver outs, run the update(s) with their trace rows
//     ledger.release(bundle, outs) -> done keys / flushes go to the completion queue; deliver outs
//   an exception (OpError, ExpressionFailure, python_error from the bridge) stops the run: the worker
//   stores (node, port, direction, states, error) and wakes the driver, which raises the NodeError.
//
// The GIL is taken only by the bridge (a node with no native kernel), by the numerics guard's failure
// path (formatting the error), and never while holding a native lock (the GIL first, then engine locks,
// never the other order: no deadlock with Python threads calling into the engine).
//
// Python side (the next milestone's engine/backend.py): the native backend implements the runtime's
// Backend protocol: injects keys (per key), drains completions (per key), applies live knobs (atomics the
// workers read per bundle), pauses/resumes/stops (a flag + condition variables; stop returns within a
// bundle), exposes the per-worker NativeWorkerBuffer (engine/trace.py), and reports which nodes ran
// through the bridge.
#pragma once
