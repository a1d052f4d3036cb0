// The boundary between Python and the engine: numpy arrays <-> Tensors, Python States <-> native States.
// Everything that enters the engine is checked here, once (dtype, rank, contiguity of parameters, int64
// range of state values, field names): the hot loop trusts what passed. Needs the GIL (nanobind).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <string>
#include <unordered_map>

#include "state.h"
#include "tensor.h"

namespace amp {

namespace nb = nanobind;

// A payload from Python as a native Tensor (a copy: the engine never holds Python memory it would have to
// release under the GIL). Integer arrays of any width become int64; other dtypes are refused.
Tensor tensor_from_python(nb::handle obj, const char* what);
// A native payload as a read-only numpy array sharing its memory (the array keeps the Tensor alive);
// a 0-d tensor (a loss value) becomes a Python float, as the Python engine passes it.
nb::object tensor_to_python(const Tensor& t);
// A numpy array that Python owns and keeps alive (parameters, gradient accumulators) seen without a copy:
// C-contiguous, float32 or float64, writeable (anything else is refused, never copied).
Tensor borrow_array(nb::handle array, const char* what);

// The conversion of states through a graph's slot layout.
class StateCodec {
 public:
  StateCodec(const std::vector<std::string>& names, nb::handle state_class);
  const Layout& layout() const { return layout_; }
  // Raises a Python ValueError naming the field when the state does not fit the layout.
  State encode(nb::handle state) const;
  State encode_fields(nb::dict fields) const;  // a State's fields as a dict (State._fields)
  nb::object decode(const State& s) const;

 private:
  Layout layout_;
  std::unordered_map<std::string, int> slot_of_;
  nb::object state_class_;
  std::vector<nb::object> names_;  // interned Python strings, one per slot
};

}  // namespace amp
