// Python-like text of a state for error messages (what `repr(State)` prints: fields sorted by name).
#include <algorithm>

#include "state.h"

namespace amp {

std::string Layout::describe(const State& s) const {
  std::vector<int> slots;
  for (int i = 0; i < static_cast<int>(names.size()); ++i)
    if (s.has(i)) slots.push_back(i);
  std::sort(slots.begin(), slots.end(), [&](int a, int b) { return names[a] < names[b]; });
  std::string out = "State(";
  for (size_t k = 0; k < slots.size(); ++k) {
    int i = slots[k];
    if (k) out += ", ";
    out += names[i] + "=";
    if ((s.bools >> i) & 1u)
      out += s.get(i) ? "True" : "False";
    else
      out += std::to_string(s.get(i));
  }
  return out + ")";
}

}  // namespace amp
