// How far apart two of the process's CPUs are: the time a cache line takes to go from one to the other and
// back (cores.cc). On a virtual machine the host decides where the guest's CPUs run, and that can change
// within seconds: on this project's 2-CPU VM the round trip moved between about 80 ns and 400 ns, and two
// workers' throughput with it, by up to 30% on the GG-NN. Benchmarks record it beside each timed run.
// Never touches Python.
#pragma once

#include <cstdint>

namespace amp {

// The median over `batches` batches of `round_trips` round trips each, in nanoseconds per round trip, of one
// cache line passed between two threads pinned to the first two CPUs the calling thread may run on. NaN when
// there are fewer than two such CPUs, a thread cannot be pinned, or the measurement takes longer than
// `deadline_s` (a CPU busy with other threads: the figure would measure the scheduler, not the link).
double core_round_trip_ns(int64_t round_trips, int batches, double deadline_s);

}  // namespace amp
