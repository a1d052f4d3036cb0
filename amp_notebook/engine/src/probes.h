// Bindings of the worker's parts (inbox, ledger, trace buffer) for their tests against the Python ones.
#pragma once

#include <nanobind/nanobind.h>

namespace amp {
void bind_probes(nanobind::module_& m);
}
