// What every engine file shares: the error a kernel throws, a view over contiguous items, and limits.
// Touches nothing else: no Python, no threads, no allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace amp {

// Fixed limits, checked once at the boundary (Python -> engine), never in the hot loop.
constexpr int kMaxRank = 4;    // payloads are (rows, ...) with at most 3 more axes
constexpr int kMaxSlots = 16;  // distinct state fields of one graph (the compile step refuses more)
constexpr int kInlineSlots = 8;  // of them, held inside a State itself (state.h); the rest in a block it owns
constexpr int kLossPort = -1;  // the pseudo-output of a loss: its forward starts the backward pass

// An error inside one op (the Python op raises OpError for the same input). The worker adds the node,
// direction and state; `port` is the input port concerned (-1: none).
struct OpError : std::runtime_error {
  int port;
  explicit OpError(const std::string& message, int port = -1) : std::runtime_error(message), port(port) {}
};

// A failed expression (missing field, division by zero, int64 overflow, wrong arity of min/max/abs): the
// Python face re-evaluates the expression in Python to raise the same ExpressionError the Python op would.
struct ExpressionFailure : std::runtime_error {
  int program;  // which of the node's expressions
  int code;     // expr.h EvalStatus
  ExpressionFailure(int program, int code)
      : std::runtime_error("expression failed"), program(program), code(code) {}
};

// A Python exception raised by a bridged op (or a node's Python update) on a worker thread: the exception
// object itself, held (bridge.cc makes it; its deleter takes the GIL), so the driver raises it unchanged.
struct PythonFailure : std::runtime_error {
  std::shared_ptr<void> exception;  // a PyObject*
  explicit PythonFailure(std::shared_ptr<void> exc) : std::runtime_error("Python exception"), exception(std::move(exc)) {}
};

// A read-only view over `n` contiguous items (C++17 has no std::span).
template <class T>
struct Span {
  T* ptr = nullptr;
  size_t n = 0;
  Span() = default;
  Span(T* p, size_t count) : ptr(p), n(count) {}
  template <class C>
  Span(C& c) : ptr(c.data()), n(c.size()) {}  // NOLINT: any vector-like container
  T& operator[](size_t i) const { return ptr[i]; }
  T* data() const { return ptr; }
  size_t size() const { return n; }
  bool empty() const { return n == 0; }
  T* begin() const { return ptr; }
  T* end() const { return ptr + n; }
};

}  // namespace amp
