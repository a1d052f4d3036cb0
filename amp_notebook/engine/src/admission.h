// A key's admission from the driver (engine/backend.py NativeBackend.admit, several keys per call): the
// messages that Session.input_messages (runtime/session.py) makes for a key, built from its batch's arrays
// directly, so the driver's work per key is part of one call instead of a State, a Message per Input node and
// their conversion.
//
// The table has one slot per Input node of the graph, in the plan's order (the order the Python path injects
// them in). For a key, each slot's message gets
//   * its payload from the batch's `inputs` dict, under the node's name, copied in (tensor_from_python), or
//     zeros (rows x width) for a node that fills itself (Input(fill="zeros"));
//   * for a float Input, that payload cast to the run's dtype as numpy's astype casts it (float to float:
//     each value rounded once to nearest);
//   * with the run's NaN/inf check on, the payload as the batch holds it (before the cast, where
//     numerics.all_finite reads it) scanned for NaN and infinity;
// and the state is the batch's fields plus the key.
//
// Anything this path would not take exactly as the Python path does (a float Input fed integers or bools,
// which numpy casts in one rounding where this would take two; a field the layout lacks; a payload that is
// not a numpy array; a dtype the engine refuses) raises a Python ValueError or TypeError before anything is
// registered or posted, and the caller admits the key through Python messages, whose errors name the input.
// Needs the GIL (it reads Python objects).
#pragma once

#include <nanobind/nanobind.h>

#include <vector>

#include "convert.h"
#include "worker.h"

namespace amp {

class Admission {
 public:
  // One Input node: its name (the batch's key for its payload), index, input port, the width of the zeros it
  // fills itself with (-1: its payload comes from the batch) and whether it is a float Input (cast).
  void add(nb::str name, int node, int port, int64_t fill_width, bool cast_float);
  size_t size() const { return slots_.size(); }

  // The key's messages into `out` (one per slot, in order), payloads cast to `dtype` (f32 or f64) where the
  // slot casts. Returns -1, or, when `check` is set and a payload holds NaN/inf, the index of the first such
  // slot (then `out` is left empty).
  int64_t build(int64_t key, bool train, nb::dict inputs, nb::dict fields, int64_t rows, bool check, DType dtype,
                const StateCodec& codec, std::vector<Message>* out) const;

 private:
  struct Slot {
    nb::str name;
    int node;
    int port;
    int64_t fill_width;
    bool cast_float;
  };
  std::vector<Slot> slots_;
};

// Whether every value of a float tensor is finite (true for integer and bool tensors): numerics.all_finite.
bool all_finite(const Tensor& t);

}  // namespace amp
