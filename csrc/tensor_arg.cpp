// TensorArg: a torch.Tensor's pointer, dtype, sizes, strides and device, read through its Python
// attributes with the CPython API (about 0.2 us a tensor), and the layout checks of the bindings.
#include "tensor_arg.h"

#include <utility>

namespace py = pybind11;

namespace specops {

namespace {

struct Names {
  PyObject* data_ptr;
  PyObject* shape;
  PyObject* stride;
  PyObject* dtype;
  PyObject* is_cuda;
};
Names g_names;
std::pair<PyObject*, DType> g_dtypes[10];
int g_num_dtypes = 0;

DType dtype_of(PyObject* dt) {
  for (int i = 0; i < g_num_dtypes; ++i)
    if (g_dtypes[i].first == dt) return g_dtypes[i].second;
  return DType::other;
}

// A tuple of Python ints into out[0..n); false when it is not one or has too many entries.
bool read_ints(PyObject* tup, int64_t* out, int& n) {
  if (!tup || !PyTuple_Check(tup)) return false;
  const Py_ssize_t len = PyTuple_GET_SIZE(tup);
  if (len > TensorArg::kMaxDims) return false;
  for (Py_ssize_t i = 0; i < len; ++i) {
    out[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(tup, i));
    if (out[i] == -1 && PyErr_Occurred()) return false;
  }
  n = static_cast<int>(len);
  return true;
}

struct Ref {  // owns one new reference
  PyObject* p;
  explicit Ref(PyObject* q) : p(q) {}
  ~Ref() { Py_XDECREF(p); }
};

}  // namespace

const char* dtype_name(DType d) {
  switch (d) {
    case DType::none:
      return "None";
    case DType::f32:
      return "float32";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
    case DType::f64:
      return "float64";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::i16:
      return "int16";
    case DType::i8:
      return "int8";
    case DType::u8:
      return "uint8";
    case DType::b1:
      return "bool";
    default:
      return "another dtype";
  }
}

void init_tensor_arg(py::module_& m) {
  g_names = {PyUnicode_InternFromString("data_ptr"), PyUnicode_InternFromString("shape"),
             PyUnicode_InternFromString("stride"), PyUnicode_InternFromString("dtype"),
             PyUnicode_InternFromString("is_cuda")};
  py::module_ torch = py::module_::import("torch");
  const std::pair<const char*, DType> table[] = {{"float32", DType::f32},   {"float16", DType::f16},
                                                 {"bfloat16", DType::bf16}, {"float64", DType::f64},
                                                 {"int32", DType::i32},     {"int64", DType::i64},
                                                 {"int16", DType::i16},     {"int8", DType::i8},
                                                 {"uint8", DType::u8},      {"bool", DType::b1}};
  for (const auto& [name, d] : table) {
    py::object obj = torch.attr(name);
    g_dtypes[g_num_dtypes++] = {obj.release().ptr(), d};  // torch's dtypes live forever
  }
  m.def("tensor_arg", [](TensorArg t) {  // what a binding sees of a tensor (tests, debugging)
    py::list sizes, strides;
    for (int i = 0; i < t.ndim; ++i) {
      sizes.append(t.size[i]);
      strides.append(t.stride[i]);
    }
    return py::make_tuple(reinterpret_cast<intptr_t>(t.data), dtype_name(t.dtype), t.cuda,
                          py::tuple(sizes), py::tuple(strides));
  });
}

bool load_tensor_arg(PyObject* obj, TensorArg& out) {
  out = TensorArg{};
  if (obj == Py_None) return true;
  Ref dt(PyObject_GetAttr(obj, g_names.dtype));
  if (!dt.p) {
    PyErr_Clear();
    return false;  // not a tensor: pybind11 raises TypeError with the signature
  }
  out.dtype = dtype_of(dt.p);
  Ref ptr(PyObject_CallMethodNoArgs(obj, g_names.data_ptr));
  Ref shape(PyObject_GetAttr(obj, g_names.shape));
  Ref stride(PyObject_CallMethodNoArgs(obj, g_names.stride));
  Ref cuda(PyObject_GetAttr(obj, g_names.is_cuda));
  int n_size = 0, n_stride = 0;
  const bool ok = ptr.p && cuda.p && read_ints(shape.p, out.size, n_size) &&
                  read_ints(stride.p, out.stride, n_stride) && n_size == n_stride;
  if (ok) {
    out.data = PyLong_AsVoidPtr(ptr.p);
    out.cuda = cuda.p == Py_True;
    out.ndim = n_size;
  }
  if (!ok || PyErr_Occurred()) {
    PyErr_Clear();
    out = TensorArg{};
    return false;
  }
  return true;
}

void ArgCheck::fail(const char* name, const std::string& what) const {
  throw std::invalid_argument(std::string("specops.") + op + ": " + name + " " + what);
}

namespace {
thread_local int g_sim_args = 0;
}
SimArgs::SimArgs() { ++g_sim_args; }
SimArgs::~SimArgs() { --g_sim_args; }
bool SimArgs::active() { return g_sim_args > 0; }

static std::string shape_str(const TensorArg& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.size[i]);
  return s + "]";
}

const TensorArg& ArgCheck::need(const TensorArg& t, const char* name, DType dtype, int ndim,
                                std::initializer_list<int64_t> sizes) const {
  if (!t.defined()) fail(name, "is required, got None");
  const bool want_cuda = cuda && !SimArgs::active();
  if (t.cuda != want_cuda)
    fail(name,
         std::string("must be a ") + (want_cuda ? "CUDA" : "CPU") + " tensor for this backend");
  if (t.dtype != dtype)
    fail(name, std::string("must be ") + dtype_name(dtype) + " here, got " + dtype_name(t.dtype));
  if (t.ndim != ndim)
    fail(name, "must have " + std::to_string(ndim) + " dims here, got shape " + shape_str(t));
  int i = 0;
  for (int64_t s : sizes) {
    if (s >= 0 && t.size[i] != s)
      fail(name, "has shape " + shape_str(t) + ": dim " + std::to_string(i) + " must be " +
                     std::to_string(s));
    ++i;
  }
  for (i = 0; i < t.ndim; ++i)
    if (t.size[i] < 0 || (t.size[i] > 1 && t.stride[i] < 0))
      fail(name, "has a negative size or stride");
  return t;
}

const TensorArg& ArgCheck::maybe(const TensorArg& t, const char* name, DType dtype, int ndim,
                                 std::initializer_list<int64_t> sizes) const {
  return t.defined() ? need(t, name, dtype, ndim, sizes) : t;
}

const TensorArg& ArgCheck::inner_contiguous(const TensorArg& t, const char* name) const {
  if (t.defined() && t.numel() > 0 && t.ndim > 0 && t.size[t.ndim - 1] > 1 &&
      t.stride[t.ndim - 1] != 1)
    fail(name, "must have a contiguous last dim (stride 1), got strides that are not");
  return t;
}

const TensorArg& ArgCheck::contiguous(const TensorArg& t, const char* name) const {
  if (!t.defined() || t.numel() == 0) return t;  // nothing is read or written
  int64_t expect = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.size[i] != 1 && t.stride[i] != expect) fail(name, "must be contiguous here");
    expect *= t.size[i];
  }
  return t;
}

const TensorArg& ArgCheck::distinct(const TensorArg& t, const char* name) const {
  if (!t.defined() || t.numel() == 0) return t;
  for (int i = 0; i < t.ndim; ++i)
    if (t.size[i] > 1 && t.stride[i] == 0)
      fail(name, "has overlapping elements (an expanded, stride-0 dim) and is written");
  return t;
}

}  // namespace specops
