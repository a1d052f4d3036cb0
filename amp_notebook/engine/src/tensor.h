// Tensor: a refcounted n-d array (float32, float64, int64 or bool) with at most kMaxRank axes, and
// zero-copy views (rows, last-axis slices). Payloads of messages are Tensors.
// Never touches Python: conversion to and from numpy lives in convert.cc.
//
// Storage is shared by every view of it and freed when the last one goes (an atomic count, since a
// payload may travel between worker threads). A Storage may also wrap memory owned by someone else
// (a numpy array that Python keeps alive, such as a node's parameters): then `release` is null and the
// engine never frees it.
#pragma once

#include <atomic>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "common.h"

namespace amp {

enum class DType : uint8_t { f32 = 0, f64 = 1, i64 = 2, b8 = 3 };

inline size_t itemsize(DType d) {
  switch (d) {
    case DType::f32: return 4;
    case DType::b8: return 1;
    default: return 8;
  }
}
const char* dtype_name(DType d);

struct Storage {
  std::atomic<int64_t> refs{1};
  void* data = nullptr;
  size_t bytes = 0;
  void (*release)(Storage*) = nullptr;  // frees data (and this); null: borrowed memory, never freed here
  void* owner = nullptr;                // for a release function that needs it
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(const Tensor& o) : st_(o.st_), data_(o.data_), dtype_(o.dtype_), rank_(o.rank_) {
    copy_dims(o);
    if (st_) st_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  Tensor(Tensor&& o) noexcept : st_(o.st_), data_(o.data_), dtype_(o.dtype_), rank_(o.rank_) {
    copy_dims(o);
    o.st_ = nullptr;
    o.data_ = nullptr;
  }
  Tensor& operator=(const Tensor& o) {
    if (this != &o) {
      Tensor tmp(o);
      swap(tmp);
    }
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    swap(o);
    return *this;
  }
  ~Tensor() { drop(); }

  // A new contiguous array (uninitialised, or zeroed).
  static Tensor empty(DType dtype, const int64_t* shape, int rank);
  static Tensor empty(DType dtype, std::initializer_list<int64_t> shape) {
    return empty(dtype, shape.begin(), static_cast<int>(shape.size()));
  }
  static Tensor zeros(DType dtype, const int64_t* shape, int rank);
  static Tensor scalar(double value);  // rank 0, float64 (a loss value)
  // A view of memory owned elsewhere (strides in items); `storage` keeps it alive or is borrowed.
  static Tensor view_of(Storage* storage, void* data, DType dtype, const int64_t* shape, const int64_t* strides,
                        int rank);

  bool defined() const { return data_ != nullptr || (st_ != nullptr); }
  DType dtype() const { return dtype_; }
  int rank() const { return rank_; }
  int64_t dim(int i) const { return shape_[i]; }
  const int64_t* shape() const { return shape_; }
  const int64_t* strides() const { return strides_; }
  int64_t stride(int i) const { return strides_[i]; }
  int64_t rows() const { return rank_ ? shape_[0] : 1; }
  int64_t size() const;
  bool contiguous() const;
  bool same_shape(const Tensor& o) const;
  template <class T>
  T* data() const { return static_cast<T*>(data_); }
  void* raw() const { return data_; }
  Storage* storage() const { return st_; }

  // Views (no copy): rows [a, b) of axis 0; items [a, b) of the last axis.
  Tensor rows(int64_t a, int64_t b) const;
  Tensor last_axis(int64_t a, int64_t b) const;
  // A contiguous copy (or this tensor itself when it already is contiguous and `always` is false).
  Tensor contiguous_copy(bool always = false) const;
  // Write the items in logical (row-major) order to `dst`, which holds size() items of this dtype.
  void copy_to(void* dst) const;
  // Element (flat index over the logical shape, row-major) as double, for tests and error messages.
  double at(int64_t flat) const;

 private:
  void copy_dims(const Tensor& o) {
    std::memcpy(shape_, o.shape_, sizeof shape_);
    std::memcpy(strides_, o.strides_, sizeof strides_);
  }
  void swap(Tensor& o) noexcept {  // inline: every move of a message moves its payload through here
    std::swap(st_, o.st_);
    std::swap(data_, o.data_);
    std::swap(dtype_, o.dtype_);
    std::swap(rank_, o.rank_);
    for (int i = 0; i < kMaxRank; ++i) {
      std::swap(shape_[i], o.shape_[i]);
      std::swap(strides_[i], o.strides_[i]);
    }
  }
  void drop() {
    if (st_ && st_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1 && st_->release) st_->release(st_);
    st_ = nullptr;
  }

  Storage* st_ = nullptr;
  void* data_ = nullptr;
  DType dtype_ = DType::f64;
  int8_t rank_ = 0;
  int64_t shape_[kMaxRank] = {0, 0, 0, 0};
  int64_t strides_[kMaxRank] = {0, 0, 0, 0};  // in items, not bytes
};

// Rows of several tensors (same dtype, same trailing shape) stacked into one contiguous tensor, and the
// row offsets where each starts (plus the end): the "rows" bundling of ir/ops/base.py `stack`. One
// tensor comes back as itself (no copy), as in Python. Throws OpError for payloads that cannot stack.
Tensor stack_rows(Span<const Tensor> xs, int64_t* offsets);

}  // namespace amp
