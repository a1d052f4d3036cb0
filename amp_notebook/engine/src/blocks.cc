// See blocks.h. Why: a worker makes and drops a few tensors per message, and payloads made on one worker
// are dropped on another. With glibc, each tensor cost an aligned allocation and a separate record, and a
// free into the other worker's arena (its lock, chunk splitting and consolidation): a sixth of a GG-NN
// worker's time on 2 workers went to malloc, free and their consolidation.
//
// The algorithm, two levels of free lists per size class (powers of two from 64 bytes to 256 KiB; larger
// blocks go straight to and from the C library):
//   - each thread keeps its own stack of free blocks per class (thread_local: taking and putting back never
//     lock), at most cap(class) of them: 64 small blocks, fewer large ones (256 KiB of a class, 2 at least);
//   - a release onto a full stack first moves half of it to the shared stack of that class (one lock per
//     half stack, not per block); a take from an empty stack first refills half of it from there. So
//     blocks that one worker makes and another drops flow back to the maker in batches;
//   - the shared stacks hold at most 4 caps per class; what does not fit goes back to the C library, and
//     an ending thread hands its blocks over the same way.
// The shared level is never destroyed (a thread may give a block back while the process exits). Under
// AddressSanitizer nothing is kept, so a use after release is still caught.
//
// fork(): the child has only the forking thread, and a lock another thread held at that moment would stay
// locked in the child forever (its next spill or refill would hang). A fork handler holds the shared lock
// across fork() (taken in `prepare`, released in the parent and in the child, where the forking thread
// owns it), so the child's copy of the shared level is consistent and unlocked. The blocks in other
// threads' stacks are the child's to leak: those threads do not exist there.
#include "blocks.h"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>

namespace amp {

namespace {

constexpr int kClasses = 13;  // room 64 B << class
constexpr size_t kLargest = size_t{64} << (kClasses - 1);
constexpr size_t kMaxCap = 64;
constexpr size_t kClassBytes = size_t{256} << 10;  // a thread's stack of one class holds at most this much
constexpr size_t kSharedCaps = 4;                  // the shared stack of a class: this many caps
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kKeep = false;
#else
constexpr bool kKeep = true;
#endif

// The items' room for `bytes` (a multiple of 64), and its class (-1: larger than every class).
size_t room_for(size_t bytes, int* size_class) {
  const size_t padded = ((bytes ? bytes : 1) + 63) / 64 * 64;
  *size_class = -1;
  if (padded > kLargest) return padded;
  int c = 0;
  while ((size_t{64} << c) < padded) ++c;
  *size_class = c;
  return size_t{64} << c;
}

constexpr size_t cap(int size_class) {
  return std::max<size_t>(2, std::min(kMaxCap, kClassBytes / (size_t{64} << size_class)));
}

// A fixed-room stack of blocks per class: pushing never allocates.
template <size_t kRoom>
struct Stacks {
  void* blocks[kClasses][kRoom];
  size_t count[kClasses] = {};
};

struct Shared {
  std::mutex mu;
  Stacks<kMaxCap * kSharedCaps> stacks;
};
Shared* shared_level = nullptr;  // set once, before the fork handler that reads it is registered
void lock_shared_level() { shared_level->mu.lock(); }
void unlock_shared_level() { shared_level->mu.unlock(); }
Shared& shared() {
  static Shared* s = [] {
    shared_level = new Shared();  // never destroyed (file comment)
    pthread_atfork(lock_shared_level, unlock_shared_level, unlock_shared_level);
    return shared_level;
  }();
  return *s;
}

// Move up to `n` blocks of class c from `from` to `to` (whose room for class c is `to_cap`); returns how
// many moved.
template <size_t kA, size_t kB>
size_t move_blocks(Stacks<kA>& from, Stacks<kB>& to, int c, size_t n, size_t to_cap) {
  const size_t k = std::min({n, from.count[c], to_cap - to.count[c]});
  for (size_t i = 0; i < k; ++i) to.blocks[c][to.count[c]++] = from.blocks[c][--from.count[c]];
  return k;
}

struct Local : Stacks<kMaxCap> {
  ~Local();
};
thread_local bool local_gone = false;  // set once this thread's stacks are handed over (trivially destructible)
thread_local Local local;

Local::~Local() {
  local_gone = true;
  Shared& s = shared();
  std::lock_guard<std::mutex> lock(s.mu);
  for (int c = 0; c < kClasses; ++c) {
    move_blocks(*this, s.stacks, c, count[c], cap(c) * kSharedCaps);
    while (count[c] > 0) std::free(blocks[c][--count[c]]);
  }
}

}  // namespace

bool blocks_kept() noexcept { return kKeep; }

void* take_block(size_t bytes) {
  int c;
  const size_t room = room_for(bytes, &c);
  if (kKeep && c >= 0 && !local_gone) {
    Local& l = local;
    if (l.count[c] == 0) {
      Shared& s = shared();
      std::lock_guard<std::mutex> lock(s.mu);
      move_blocks(s.stacks, l, c, cap(c) / 2, cap(c));
    }
    if (l.count[c] > 0) return l.blocks[c][--l.count[c]];
  }
  void* block = std::aligned_alloc(64, kBlockHeader + room);
  if (!block) throw std::bad_alloc();
  return block;
}

void give_back_block(void* block, size_t bytes) noexcept {
  int c;
  room_for(bytes, &c);
  if (kKeep && c >= 0 && !local_gone) {
    Local& l = local;
    if (l.count[c] == cap(c)) {  // full: half of it to the shared stack, what does not fit there to the C library
      void* spill[kMaxCap];
      size_t n = 0;
      {
        Shared& s = shared();
        std::lock_guard<std::mutex> lock(s.mu);
        const size_t half = cap(c) / 2;
        const size_t moved = move_blocks(l, s.stacks, c, half, cap(c) * kSharedCaps);
        for (; n < half - moved; ++n) spill[n] = l.blocks[c][--l.count[c]];
      }
      for (size_t i = 0; i < n; ++i) std::free(spill[i]);
    }
    l.blocks[c][l.count[c]++] = block;
    return;
  }
  std::free(block);
}

}  // namespace amp
