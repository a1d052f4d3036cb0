// Memory for tensors (tensor.cc): blocks with room for a Storage record before 64-byte aligned items,
// reused instead of going back to the C library each time (see blocks.cc for why and how).
// Never touches Python.
#pragma once

#include <cstddef>

namespace amp {

constexpr size_t kBlockHeader = 64;  // a block's bytes before its items (the Storage record; keeps items aligned)

// A block whose items may hold `bytes`; throws std::bad_alloc when memory is out.
void* take_block(size_t bytes);
// Give back a block that take_block(bytes) returned, from any thread. Never throws or allocates.
void give_back_block(void* block, size_t bytes) noexcept;
// Whether given-back blocks are kept for reuse: not under AddressSanitizer, where each goes straight back to the
// C library (ASan's allocator), so that a use after release is still caught.
bool blocks_kept() noexcept;

}  // namespace amp
