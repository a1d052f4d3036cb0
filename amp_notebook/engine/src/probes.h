// Bindings of the worker's parts (inbox, ledger, trace buffer) for their tests against the Python ones.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "inbox.h"

namespace amp {
void bind_probes(nanobind::module_& m);
// runtime/inbox.py's names of the inbox orders (a ValueError for others)
Inbox::Priority priority_of(const std::string& p);
Inbox::Order order_of(const std::string& o);
}

namespace amp {
// The engine's Python face (engine_module.cc): a run's Engine, built node by node by engine/backend.py.
void bind_engine(nanobind::module_& m);
}
