// See cores.h. The algorithm: two threads, each pinned to its own CPU, share one atomic counter on a cache
// line of its own. The first writes an odd value and spins until it reads the next even one; the second
// waits for each odd value and answers with the next even one. Every step moves the line to the other
// CPU, so a round trip is two transfers. The first batch warms both threads up and is not counted; the
// median of the rest is robust to the odd batch that an interrupt or the host stretched. Each side checks
// the clock every 1024 spins and gives up at the deadline (setting a flag the other reads), so neither can
// wait forever for a partner that never gets a CPU.
#include "cores.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

namespace amp {

namespace {

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

struct alignas(64) Line {
  std::atomic<int64_t> value{0};
};

struct Shared {
  Line line;
  alignas(64) std::atomic<bool> gave_up{false};
  double deadline = 0.0;
};

// Spin until `line` holds `want`; false if the deadline passed or the other side gave up.
bool await(Shared& s, int64_t want) {
  for (uint32_t i = 1; s.line.value.load(std::memory_order_acquire) != want; ++i) {
    if ((i & 1023) == 0 && (s.gave_up.load(std::memory_order_relaxed) || now_s() > s.deadline)) {
      s.gave_up.store(true, std::memory_order_relaxed);
      return false;
    }
  }
  return true;
}

}  // namespace

double core_round_trip_ns(int64_t round_trips, int batches, double deadline_s) {
  const double nan = std::nan("");
  if (round_trips < 1 || batches < 1 || !(deadline_s > 0.0)) return nan;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (pthread_getaffinity_np(pthread_self(), sizeof allowed, &allowed) != 0) return nan;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (cpus.size() < 2) return nan;

  Shared s;
  s.deadline = now_s() + deadline_s;
  const int64_t total = round_trips * (batches + 1);  // the first batch warms up
  std::atomic<bool> pinned{true};
  std::thread partner([&] {
    if (!pin_to(cpus[1])) {
      pinned.store(false);
      s.gave_up.store(true);
      return;
    }
    for (int64_t i = 0; i < total; ++i) {
      if (!await(s, 2 * i + 1)) return;
      s.line.value.store(2 * i + 2, std::memory_order_release);
    }
  });
  std::vector<double> per_batch;
  std::thread leader([&] {
    if (!pin_to(cpus[0])) {
      pinned.store(false);
      s.gave_up.store(true);
      return;
    }
    for (int b = 0; b <= batches; ++b) {
      const double t0 = now_s();
      for (int64_t j = 0; j < round_trips; ++j) {
        const int64_t i = b * round_trips + j;
        s.line.value.store(2 * i + 1, std::memory_order_release);
        if (!await(s, 2 * i + 2)) return;
      }
      if (b > 0) per_batch.push_back((now_s() - t0) * 1e9 / static_cast<double>(round_trips));
    }
  });
  leader.join();
  partner.join();
  if (!pinned.load() || s.gave_up.load() || per_batch.empty()) return nan;
  std::sort(per_batch.begin(), per_batch.end());
  return per_batch[per_batch.size() / 2];
}

}  // namespace amp
