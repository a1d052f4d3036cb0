// Tensor allocation, views and copies (see tensor.h). Allocation is 64-byte aligned so BLAS and vector
// loops see aligned rows; nothing here knows about messages or Python.
//
// A new tensor's Storage record and items share one block (blocks.h), the record first.
#include "tensor.h"

#include <cstdlib>
#include <new>
#include <utility>

#include "blocks.h"

namespace amp {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i64: return "int64";
    case DType::b8: return "bool";
  }
  return "?";
}

namespace {

static_assert(sizeof(Storage) <= kBlockHeader, "the Storage record fits before the items");

void release_owned(Storage* s) {
  const size_t bytes = s->bytes;
  s->~Storage();
  give_back_block(s, bytes);  // the record is at the block's start
}

void set_contiguous_strides(int64_t* strides, const int64_t* shape, int rank) {
  int64_t step = 1;
  for (int i = rank - 1; i >= 0; --i) {
    strides[i] = step;
    step *= shape[i];
  }
}
}  // namespace

Tensor Tensor::empty(DType dtype, const int64_t* shape, int rank) {
  Tensor t;
  t.dtype_ = dtype;
  t.rank_ = static_cast<int8_t>(rank);
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    t.shape_[i] = shape[i];
    n *= shape[i];
  }
  set_contiguous_strides(t.strides_, t.shape_, rank);
  const size_t bytes = static_cast<size_t>(n) * itemsize(dtype);
  void* block = take_block(bytes);
  void* data = static_cast<char*>(block) + kBlockHeader;
  auto* st = new (block) Storage();
  st->data = data;
  st->bytes = bytes;
  st->release = release_owned;
  t.st_ = st;
  t.data_ = data;
  return t;
}

Tensor Tensor::zeros(DType dtype, const int64_t* shape, int rank) {
  Tensor t = empty(dtype, shape, rank);
  std::memset(t.data_, 0, t.st_->bytes);
  return t;
}

Tensor Tensor::scalar(double value) {
  Tensor t = empty(DType::f64, nullptr, 0);
  *t.data<double>() = value;
  return t;
}

Tensor Tensor::view_of(Storage* storage, void* data, DType dtype, const int64_t* shape, const int64_t* strides,
                       int rank) {
  Tensor t;
  t.st_ = storage;  // the caller hands over one reference
  t.data_ = data;
  t.dtype_ = dtype;
  t.rank_ = static_cast<int8_t>(rank);
  for (int i = 0; i < rank; ++i) {
    t.shape_[i] = shape[i];
    t.strides_[i] = strides[i];
  }
  return t;
}

int64_t Tensor::size() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[i];
  return n;
}

bool Tensor::contiguous() const {
  int64_t step = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != step) return false;
    step *= shape_[i];
  }
  return true;
}

bool Tensor::same_shape(const Tensor& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (shape_[i] != o.shape_[i]) return false;
  return true;
}

Tensor Tensor::rows(int64_t a, int64_t b) const {
  Tensor t(*this);
  t.shape_[0] = b - a;
  t.data_ = static_cast<char*>(data_) + a * strides_[0] * static_cast<int64_t>(itemsize(dtype_));
  return t;
}

Tensor Tensor::last_axis(int64_t a, int64_t b) const {
  Tensor t(*this);
  int last = rank_ - 1;
  t.shape_[last] = b - a;
  t.data_ = static_cast<char*>(data_) + a * strides_[last] * static_cast<int64_t>(itemsize(dtype_));
  return t;
}

// Copy the items in logical (row-major) order to `dst`, whatever the strides: an odometer over the outer
// axes picks each innermost row; a row whose items are adjacent (stride 1: a slice of columns, the views
// that concat and split make) is one memcpy, any other is copied item by item.
void Tensor::copy_to(void* dst) const {
  const size_t item = itemsize(dtype_);
  const int64_t n = size();
  if (n == 0) return;
  if (contiguous()) {
    std::memcpy(dst, data_, static_cast<size_t>(n) * item);
    return;
  }
  // not contiguous, so rank >= 1 (a 0-d tensor is) and every axis has at least one item (n > 0)
  const int last = rank_ - 1;
  const int64_t inner = shape_[last];
  const int64_t step = strides_[last] * static_cast<int64_t>(item);
  const size_t row_bytes = static_cast<size_t>(inner) * item;
  int64_t index[kMaxRank] = {0, 0, 0, 0};
  char* out = static_cast<char*>(dst);
  for (int64_t done = 0; done < n; done += inner) {
    int64_t offset = 0;
    for (int i = 0; i < last; ++i) offset += index[i] * strides_[i];
    const char* row = static_cast<const char*>(data_) + offset * static_cast<int64_t>(item);
    if (strides_[last] == 1) {
      std::memcpy(out, row, row_bytes);
    } else {
      for (int64_t j = 0; j < inner; ++j) std::memcpy(out + j * static_cast<int64_t>(item), row + j * step, item);
    }
    out += row_bytes;
    for (int i = last - 1; i >= 0; --i) {
      if (++index[i] < shape_[i]) break;
      index[i] = 0;
    }
  }
}

Tensor Tensor::contiguous_copy(bool always) const {
  if (!always && contiguous()) return *this;
  Tensor out = empty(dtype_, shape_, rank_);
  copy_to(out.data_);
  return out;
}

double Tensor::at(int64_t flat) const {
  int64_t offset = 0;
  for (int i = rank_ - 1; i >= 0; --i) {
    offset += (flat % shape_[i]) * strides_[i];
    flat /= shape_[i];
  }
  switch (dtype_) {
    case DType::f32: return static_cast<const float*>(data_)[offset];
    case DType::f64: return static_cast<const double*>(data_)[offset];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(data_)[offset]);
    case DType::b8: return static_cast<const uint8_t*>(data_)[offset];
  }
  return 0.0;
}

// Concatenate along axis 0: each input is copied row block by row block (contiguous inputs in one memcpy).
// The inputs must agree in rank and trailing shape (np.concatenate raises otherwise; here an OpError) and
// are cast to their common dtype first, as numpy promotes (floats of both widths: float64).
Tensor stack_rows(Span<const Tensor> xs, int64_t* offsets) {
  offsets[0] = 0;
  int64_t total = 0;
  const Tensor& first = xs[0];
  bool mixed = false;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    if (x.rank() == 0)
      throw OpError("a payload of shape () cannot be split into rows; payloads of a row-wise op are (rows, ...)");
    bool same = x.rank() == first.rank();
    for (int k = 1; same && k < x.rank(); ++k) same = x.dim(k) == first.dim(k);
    if (!same)
      throw OpError("the payloads of one bundle differ in shape beyond their rows (" + std::to_string(x.rank()) +
                    " vs " + std::to_string(first.rank()) + " axes, or another width): they cannot be stacked");
    mixed = mixed || x.dtype() != first.dtype();
    total += x.rows();
    offsets[i + 1] = total;
  }
  if (xs.size() == 1) return xs[0];
  DType dtype = first.dtype();
  if (mixed) {
    bool any_f64 = false, any_f32 = false;
    for (const Tensor& x : xs) {
      any_f64 = any_f64 || x.dtype() != DType::f32;
      any_f32 = any_f32 || x.dtype() == DType::f32;
    }
    dtype = any_f32 && !any_f64 ? DType::f32 : DType::f64;
  }
  int64_t shape[kMaxRank];
  for (int i = 0; i < first.rank(); ++i) shape[i] = first.dim(i);
  shape[0] = total;
  Tensor out = Tensor::empty(dtype, shape, first.rank());
  const size_t item = itemsize(dtype);
  char* dst = out.data<char>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& part = xs[i];
    if (part.dtype() == dtype) {
      part.copy_to(dst);
    } else {  // numpy's promotion to the common type, value by value
      for (int64_t k = 0, n = part.size(); k < n; ++k) {
        if (dtype == DType::f64) reinterpret_cast<double*>(dst)[k] = part.at(k);
        else reinterpret_cast<float*>(dst)[k] = static_cast<float>(part.at(k));
      }
    }
    dst += static_cast<size_t>(part.size()) * item;
  }
  return out;
}

}  // namespace amp
