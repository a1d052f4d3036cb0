// See admission.h.
#include "admission.h"

#include <cmath>
#include <string>

namespace amp {

namespace {

// A contiguous float tensor as another float dtype, value by value (a C cast rounds to nearest, as numpy's).
template <class Src, class Dst>
void cast_values(const Tensor& from, Tensor* to) {
  const Src* src = from.data<Src>();
  Dst* dst = to->data<Dst>();
  for (int64_t i = 0, n = from.size(); i < n; ++i) dst[i] = static_cast<Dst>(src[i]);
}

template <class T>
bool finite_values(const Tensor& t) {
  const T* p = t.data<T>();
  for (int64_t i = 0, n = t.size(); i < n; ++i)
    if (!std::isfinite(p[i])) return false;
  return true;
}

// numpy.ndarray, looked up once (with the GIL, as build() runs) and kept for the process's life: a payload of
// exactly that type needs no attribute lookup to be known for an array.
PyTypeObject* ndarray_type() {
  static PyTypeObject* type = [] {
    nb::object t = nb::module_::import_("numpy").attr("ndarray");
    return reinterpret_cast<PyTypeObject*>(t.release().ptr());  // a reference kept on purpose
  }();
  return type;
}

}  // namespace

bool all_finite(const Tensor& t) {
  // tensor_from_python's copies are contiguous; anything else is read item by item through its strides
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64) return true;
  if (!t.contiguous()) return all_finite(t.contiguous_copy(true));
  return t.dtype() == DType::f32 ? finite_values<float>(t) : finite_values<double>(t);
}

void Admission::add(nb::str name, int node, int port, int64_t fill_width, bool cast_float) {
  if (fill_width < -1) throw nb::value_error("an Input's fill width is -1 (payload from the batch) or >= 0");
  slots_.push_back(Slot{std::move(name), node, port, fill_width, cast_float});
}

int64_t Admission::build(int64_t key, bool train, nb::dict inputs, nb::dict fields, int64_t rows, bool check,
                         DType dtype, const StateCodec& codec, std::vector<Message>* out) const {
  const Layout& layout = codec.layout();
  if (fields.contains("key")) throw nb::value_error("a batch field named 'key' clashes with the state's key");
  if (layout.key_slot < 0) throw nb::value_error("the state layout has no key slot");
  if (rows < 0) throw nb::value_error("a batch of negative size");
  State state = codec.encode_fields(fields);
  state.set(layout.key_slot, key);
  out->clear();
  out->reserve(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    Message m;
    m.node = slot.node;
    m.port = slot.port;
    m.direction = kForward;
    m.train = train;
    m.key = key;
    m.state = state;
    if (slot.fill_width >= 0) {
      const int64_t shape[2] = {rows, slot.fill_width};
      m.payload = Tensor::zeros(dtype, shape, 2);
    } else {
      PyObject* item = PyDict_GetItemWithError(inputs.ptr(), slot.name.ptr());  // borrowed
      if (item == nullptr) {
        if (PyErr_Occurred()) throw nb::python_error();
        throw nb::value_error("the batch has no payload for an Input node");
      }
      nb::handle obj(item);
      if (Py_TYPE(item) != ndarray_type() && !nb::hasattr(obj, "dtype"))
        throw nb::type_error("an Input's payload is not a numpy array");
      Tensor t = tensor_from_python(obj, "payload of an admitted key");
      if (check && !all_finite(t)) {
        out->clear();
        return static_cast<int64_t>(i);
      }
      if (slot.cast_float && t.dtype() != dtype) {
        if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
          throw nb::type_error("a float Input fed integers or bools: the Python path casts it");
        Tensor cast = Tensor::empty(dtype, t.shape(), t.rank());
        if (dtype == DType::f32) cast_values<double, float>(t, &cast);
        else cast_values<float, double>(t, &cast);
        t = std::move(cast);
      }
      m.payload = std::move(t);
    }
    out->push_back(std::move(m));
  }
  return -1;
}

}  // namespace amp
