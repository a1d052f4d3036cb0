// Linear probing's deletion by backward shift, shared by the engine's open-addressing tables (state.h
// StateMap, counts.h CountMap): after a removal leaves a hole, each later member of the probe run moves back
// into the hole if that keeps it at or after its home slot (counting cyclically), so a lookup may stop at the
// first empty slot and the tables need no tombstones. Never touches Python, threads or memory.
#pragma once

#include <cstddef>

namespace amp {

// Whether the member at slot `i`, whose home slot is `home`, may move into the hole at `hole` (`i` follows
// `hole` in the probe run, possibly past the end of the table).
inline bool moves_into_hole(size_t hole, size_t i, size_t home) {
  return (hole <= i) ? (home <= hole || home > i) : (home <= hole && home > i);
}

}  // namespace amp
