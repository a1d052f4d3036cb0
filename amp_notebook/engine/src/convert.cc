// See convert.h.
#include "convert.h"

#include <cstring>

namespace amp {

namespace {

void release_tensor_capsule(void* p) noexcept { delete static_cast<Tensor*>(p); }

// One integer item of `size` bytes at `p` as int64, by value (each type cast on its own: a conditional
// between a signed and an unsigned operand would convert both to the unsigned type first). 8-byte items are
// copied bit for bit, as uint64's widening has always wrapped them.
template <class T>
int64_t load_as_int64(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return static_cast<int64_t>(v);
}

template <class T1, class T2, class T4>
int64_t read_int(const char* p, Py_ssize_t size) {
  switch (size) {
    case 1: return load_as_int64<T1>(p);
    case 2: return load_as_int64<T2>(p);
    case 4: return load_as_int64<T4>(p);
    default: return load_as_int64<uint64_t>(p);
  }
}

// Integer items (`size` bytes each, signed or not) at `base`, through byte strides, widened to int64 into the
// contiguous `dst` in row-major order: both import paths below widen narrow and unsigned integers here.
void widen_to_int64(const char* base, const int64_t* shape, const int64_t* byte_strides, int rank, int64_t size,
                    bool is_signed, int64_t n, int64_t* dst) {
  int64_t index[kMaxRank] = {0, 0, 0, 0};
  for (int64_t k = 0; k < n; ++k) {
    const char* p = base;
    for (int i = 0; i < rank; ++i) p += index[i] * byte_strides[i];
    dst[k] = is_signed ? read_int<int8_t, int16_t, int32_t>(p, size) : read_int<uint8_t, uint16_t, uint32_t>(p, size);
    for (int i = rank - 1; i >= 0; --i) {
      if (++index[i] < shape[i]) break;
      index[i] = 0;
    }
  }
}

// The common case, read through the buffer protocol (a numpy array exports its memory, shape, strides and a
// struct-module format code without allocating): an array of 1 to kMaxRank axes of float64, float32, bool or
// integers of any width in native byte order, copied into a fresh contiguous tensor as the general path
// below copies it. Returns false, having read nothing, for anything else (another format or byte order, 0
// axes, strides that are not whole items, an object without the protocol): the general path then takes it,
// with its errors. Items are read with memcpy (copy_to, read_int): a view may start off its items' alignment.
bool copy_from_buffer(PyObject* obj, Tensor* out) {
  if (!PyObject_CheckBuffer(obj)) return false;
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) != 0) {
    PyErr_Clear();
    return false;
  }
  struct Release {  // the buffer goes back however this ends
    Py_buffer* v;
    ~Release() { PyBuffer_Release(v); }
  } release{&view};
  const char* f = view.format ? view.format : "B";
  if (*f == '@' || *f == '=' || (*f == '<' && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)) ++f;
  if (f[0] == '\0' || f[1] != '\0' || view.ndim < 1 || view.ndim > kMaxRank || view.itemsize <= 0) return false;
  DType dtype;
  bool is_signed = false;
  switch (f[0]) {
    case 'd': dtype = DType::f64; if (view.itemsize != 8) return false; break;
    case 'f': dtype = DType::f32; if (view.itemsize != 4) return false; break;
    case '?': dtype = DType::b8; if (view.itemsize != 1) return false; break;
    case 'b': case 'h': case 'i': case 'l': case 'q': dtype = DType::i64; is_signed = true; break;
    case 'B': case 'H': case 'I': case 'L': case 'Q': dtype = DType::i64; break;
    default: return false;
  }
  if (dtype == DType::i64 && view.itemsize != 1 && view.itemsize != 2 && view.itemsize != 4 && view.itemsize != 8)
    return false;
  const int rank = view.ndim;
  int64_t shape[kMaxRank], strides[kMaxRank];
  for (int i = 0; i < rank; ++i) {
    if (view.strides[i] % view.itemsize != 0) return false;
    shape[i] = static_cast<int64_t>(view.shape[i]);
    strides[i] = static_cast<int64_t>(view.strides[i] / view.itemsize);
  }
  if (dtype != DType::i64 || (view.itemsize == 8 && is_signed)) {
    // The memory is Python's and read here only: a record on the stack, without a release, outlives the view
    // (a temporary of this statement) and frees nothing.
    Storage borrowed;
    *out = Tensor::view_of(&borrowed, view.buf, dtype, shape, strides, rank).contiguous_copy(true);
    return true;
  }
  // narrower or unsigned integers widen to int64 item by item
  *out = Tensor::empty(DType::i64, shape, rank);
  int64_t byte_strides[kMaxRank];
  for (int i = 0; i < rank; ++i) byte_strides[i] = static_cast<int64_t>(view.strides[i]);
  widen_to_int64(static_cast<const char*>(view.buf), shape, byte_strides, rank, view.itemsize, is_signed, out->size(),
                 out->data<int64_t>());
  return true;
}

}  // namespace

Tensor tensor_from_python(nb::handle obj, const char* what) {
  if (PyFloat_Check(obj.ptr()) || PyLong_Check(obj.ptr())) {  // a loss gradient or a scalar payload
    if (PyBool_Check(obj.ptr())) throw nb::value_error((std::string(what) + ": a bool is not a payload").c_str());
    return Tensor::scalar(nb::cast<double>(obj));
  }
  Tensor fast;
  if (copy_from_buffer(obj.ptr(), &fast)) return fast;
  nb::ndarray<nb::ro> a;
  if (!nb::try_cast(obj, a)) {
    std::string found = nb::cast<std::string>(nb::str(obj.type().attr("__name__")));
    if (nb::hasattr(obj, "dtype")) found += " of dtype " + nb::cast<std::string>(obj.attr("dtype").attr("__str__")());
    throw nb::type_error((std::string(what) + ": expected a numpy array of float32, float64, integers or bools, "
                          "got " + found).c_str());
  }
  if (a.ndim() > static_cast<size_t>(kMaxRank))
    throw nb::value_error((std::string(what) + ": at most " + std::to_string(kMaxRank) + " axes, got " +
                           std::to_string(a.ndim())).c_str());
  int rank = static_cast<int>(a.ndim());
  int64_t shape[kMaxRank], strides[kMaxRank];
  for (int i = 0; i < rank; ++i) {
    shape[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = a.stride(i);
  }
  nb::dlpack::dtype dt = a.dtype();
  DType dtype;
  if (dt == nb::dtype<double>()) dtype = DType::f64;
  else if (dt == nb::dtype<float>()) dtype = DType::f32;
  else if (dt == nb::dtype<bool>()) dtype = DType::b8;
  else if (dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int) ||
           dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::UInt)) dtype = DType::i64;
  else
    throw nb::type_error((std::string(what) + ": the native engine takes float32, float64, integer and bool "
                          "payloads").c_str());
  // Items of the source through its strides, into a fresh contiguous tensor.
  Storage* borrowed = new Storage();
  borrowed->refs.store(1);
  borrowed->release = [](Storage* s) { delete s; };
  Tensor view = Tensor::view_of(borrowed, const_cast<void*>(a.data()), dtype == DType::i64 ? DType::i64 : dtype,
                                shape, strides, rank);
  const int64_t n = view.size();
  if (dtype == DType::i64 && dt != nb::dtype<int64_t>()) {
    Tensor out = Tensor::empty(DType::i64, shape, rank);
    int64_t byte_strides[kMaxRank];
    for (int i = 0; i < rank; ++i) byte_strides[i] = strides[i] * static_cast<int64_t>(dt.bits / 8);
    widen_to_int64(static_cast<const char*>(a.data()), shape, byte_strides, rank, dt.bits / 8,
                   dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int), n, out.data<int64_t>());
    return out;
  }
  return view.contiguous_copy(true);
}

nb::object tensor_to_python(const Tensor& t) {
  if (t.rank() == 0) return nb::float_(t.at(0));
  auto* owner = new Tensor(t);
  nb::capsule keep(owner, release_tensor_capsule);
  size_t shape[kMaxRank];
  int64_t strides[kMaxRank];
  for (int i = 0; i < t.rank(); ++i) {
    shape[i] = static_cast<size_t>(t.dim(i));
    strides[i] = t.stride(i);
  }
  nb::dlpack::dtype dt;
  switch (t.dtype()) {
    case DType::f32: dt = nb::dtype<float>(); break;
    case DType::f64: dt = nb::dtype<double>(); break;
    case DType::i64: dt = nb::dtype<int64_t>(); break;
    default: dt = nb::dtype<bool>(); break;
  }
  nb::ndarray<nb::numpy, nb::ro> array(t.raw(), static_cast<size_t>(t.rank()), shape, keep, strides, dt);
  return nb::cast(array, nb::rv_policy::reference);
}

Tensor borrow_array(nb::handle obj, const char* what) {
  nb::ndarray<nb::c_contig> a;
  // no conversion: a converted copy would die with `a`, and the engine would write into freed memory
  if (!nb::try_cast(obj, a, /*convert=*/false))
    throw nb::type_error((std::string(what) + ": expected a writeable C-contiguous numpy array").c_str());
  DType dtype;
  if (a.dtype() == nb::dtype<double>()) dtype = DType::f64;
  else if (a.dtype() == nb::dtype<float>()) dtype = DType::f32;
  else throw nb::type_error((std::string(what) + ": expected float32 or float64").c_str());
  if (a.ndim() > static_cast<size_t>(kMaxRank) || a.ndim() == 0)
    throw nb::value_error((std::string(what) + ": expected 1 to 4 axes").c_str());
  int64_t shape[kMaxRank], strides[kMaxRank];
  for (size_t i = 0; i < a.ndim(); ++i) {
    shape[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = a.stride(i);
  }
  Storage* borrowed = new Storage();  // release frees only this record: the memory is Python's
  borrowed->release = [](Storage* s) { delete s; };
  return Tensor::view_of(borrowed, a.data(), dtype, shape, strides, static_cast<int>(a.ndim()));
}

StateCodec::StateCodec(const std::vector<std::string>& names, nb::handle state_class)
    : state_class_(nb::borrow(state_class)) {
  if (names.size() > static_cast<size_t>(kMaxSlots))
    throw nb::value_error(("a state layout holds at most " + std::to_string(kMaxSlots) + " fields, got " +
                           std::to_string(names.size())).c_str());
  layout_.names = names;
  for (size_t i = 0; i < names.size(); ++i) {
    slot_of_[names[i]] = static_cast<int>(i);
    names_.push_back(nb::str(names[i].c_str()));
    if (names[i] == "key") layout_.key_slot = static_cast<int>(i);
    if (names[i] == "flush") layout_.flush_slot = static_cast<int>(i);
  }
}

State StateCodec::encode(nb::handle state) const {
  return encode_fields(nb::borrow<nb::dict>(state.attr("_fields")));
}

State StateCodec::encode_fields(nb::dict fields) const {
  State s;
  for (auto item : fields) {
    std::string name = nb::cast<std::string>(item.first);
    auto it = slot_of_.find(name);
    if (it == slot_of_.end())
      throw nb::value_error(("state field '" + name + "' is not in this graph's state layout " +
                             "(an op the compile step does not know added it); the native engine cannot hold it")
                                .c_str());
    PyObject* v = item.second.ptr();
    if (PyBool_Check(v)) {
      s.set(it->second, v == Py_True, true);
      continue;
    }
    if (!PyLong_Check(v))
      throw nb::value_error(("state field '" + name + "' holds a " +
                             nb::cast<std::string>(nb::str(item.second.type().attr("__name__"))) +
                             "; the native engine holds int and bool fields only").c_str());
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow)
      throw nb::value_error(("state field '" + name + "' holds an int beyond int64").c_str());
    s.set(it->second, static_cast<int64_t>(value));
  }
  return s;
}

nb::object StateCodec::decode(const State& s) const {
  nb::dict fields;
  for (size_t i = 0; i < names_.size(); ++i) {
    if (!s.has(static_cast<int>(i))) continue;
    if ((s.bools >> i) & 1u) fields[names_[i]] = nb::bool_(s.get(static_cast<int>(i)) != 0);
    else fields[names_[i]] = nb::int_(s.get(static_cast<int>(i)));
  }
  return state_class_.attr("_of_checked")(fields);
}

}  // namespace amp
