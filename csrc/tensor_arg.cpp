// TensorArg: a torch.Tensor's pointer, dtype, sizes, strides and device, read through its Python
// attributes with the CPython API (about 0.2 us a tensor), and the layout checks of the bindings.
#include "tensor_arg.h"

#include <cstdlib>
#include <utility>

#include "dlpack_exchange.h"

namespace py = pybind11;

namespace specops {

namespace {

struct Names {
  PyObject* data_ptr;
  PyObject* shape;
  PyObject* stride;
  PyObject* dtype;
  PyObject* is_cuda;
  PyObject* is_cpu;
};
Names g_names;
std::pair<PyObject*, DType> g_dtypes[10];
int g_num_dtypes = 0;

// torch's DLPack exchange table (torch >= 2.10; else null) and the tensor types it is used for:
// torch.Tensor and torch.nn.Parameter exactly (any other subclass may wrap something else, so it
// goes through its Python attributes).
const dlpack::ExchangeAPI* g_api = nullptr;
PyObject* g_fast_types[2] = {nullptr, nullptr};

void init_exchange_api(py::module_& torch) {
  // SPECOPS_DLPACK_EXCHANGE=0: read tensors through their Python attributes, as with a torch that
  // has no exchange table (tests run that path this way)
  if (const char* e = std::getenv("SPECOPS_DLPACK_EXCHANGE"); e && std::string(e) == "0") return;
  py::object tensor = torch.attr("Tensor");
  py::object param = torch.attr("nn").attr("Parameter");
  if (!py::hasattr(tensor, "__dlpack_c_exchange_api__")) return;
  py::object cap = tensor.attr("__dlpack_c_exchange_api__");
  auto* api = static_cast<const dlpack::ExchangeAPI*>(
      PyCapsule_GetPointer(cap.ptr(), "dlpack_exchange_api"));
  if (!api) {
    PyErr_Clear();
    return;
  }
  if (api->version.major != 1 || api->version.minor < 2 || !api->dltensor_from_py_object_no_sync)
    return;
  g_api = api;
  g_fast_types[0] = tensor.release().ptr();  // torch's types live forever
  g_fast_types[1] = param.release().ptr();
  cap.release();
}

DType dtype_of(dlpack::DataType t) {
  if (t.lanes != 1) return DType::other;
  switch (t.code) {
    case dlpack::kFloat:
      return t.bits == 32   ? DType::f32
             : t.bits == 16 ? DType::f16
             : t.bits == 64 ? DType::f64
                            : DType::other;
    case dlpack::kBfloat:
      return t.bits == 16 ? DType::bf16 : DType::other;
    case dlpack::kInt:
      return t.bits == 32   ? DType::i32
             : t.bits == 64 ? DType::i64
             : t.bits == 16 ? DType::i16
             : t.bits == 8  ? DType::i8
                            : DType::other;
    case dlpack::kUInt:
      return t.bits == 8 ? DType::u8 : DType::other;
    case dlpack::kBool:
      return t.bits == 8 ? DType::b1 : DType::other;
    default:
      return DType::other;
  }
}

// The fast read through the exchange table; false (no Python error left set) when the object is
// not a plain tensor, or torch declines (a tensor DLPack cannot describe), or the device is not
// the CPU or CUDA: the caller then reads the Python attributes.
bool load_dlpack(PyObject* obj, TensorArg& out) {
  PyTypeObject* type = Py_TYPE(obj);
  if (!g_api || (reinterpret_cast<PyObject*>(type) != g_fast_types[0] &&
                 reinterpret_cast<PyObject*>(type) != g_fast_types[1]))
    return false;
  dlpack::Tensor dl;
  if (g_api->dltensor_from_py_object_no_sync(obj, &dl) != 0) {
    PyErr_Clear();
    return false;
  }
  if (dl.ndim < 0 || dl.ndim > TensorArg::kMaxDims ||
      (dl.device.device_type != dlpack::kCPU && dl.device.device_type != dlpack::kCUDA))
    return false;
  out.data = static_cast<char*>(dl.data) + dl.byte_offset;
  out.dtype = dtype_of(dl.dtype);
  out.cuda = dl.device.device_type == dlpack::kCUDA;
  out.device = out.cuda ? dl.device.device_id : 0;
  out.object = obj;
  out.ndim = dl.ndim;
  int64_t compact = 1;
  for (int i = dl.ndim - 1; i >= 0; --i) {
    out.size[i] = dl.shape[i];
    out.stride[i] = dl.strides ? dl.strides[i] : compact;
    compact *= dl.shape[i];
  }
  return true;
}

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

int64_t dtype_size(DType d) {
  switch (d) {
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
    case DType::i16:
      return 2;
    default:
      return 1;
  }
}

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
             PyUnicode_InternFromString("stride"),   PyUnicode_InternFromString("dtype"),
             PyUnicode_InternFromString("is_cuda"),  PyUnicode_InternFromString("is_cpu")};
  py::module_ torch = py::module_::import("torch");
  init_exchange_api(torch);
  m.attr("dlpack_exchange") = g_api != nullptr;  // tensors read through torch's C table
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
  if (load_dlpack(obj, out)) return true;
  out = TensorArg{};
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
  Ref cpu(PyObject_GetAttr(obj, g_names.is_cpu));
  int n_size = 0, n_stride = 0;
  const bool ok = ptr.p && cuda.p && cpu.p && read_ints(shape.p, out.size, n_size) &&
                  read_ints(stride.p, out.stride, n_stride) && n_size == n_stride;
  if (ok) {
    out.data = PyLong_AsVoidPtr(ptr.p);
    out.cuda = cuda.p == Py_True;
    out.other_device = !out.cuda && cpu.p != Py_True;  // meta, mps, xpu, ...
    out.ndim = n_size;
    out.object = obj;
    if (out.cuda) {
      Ref index(PyObject_CallMethod(obj, "get_device", nullptr));
      out.device = index.p ? static_cast<int>(PyLong_AsLong(index.p)) : 0;
    }
  }
  if (!ok || PyErr_Occurred()) {
    PyErr_Clear();
    out = TensorArg{};
    return false;
  }
  return true;
}

namespace {

dlpack::DataType dl_dtype(DType d) {
  switch (d) {
    case DType::f32:
      return {dlpack::kFloat, 32, 1};
    case DType::f16:
      return {dlpack::kFloat, 16, 1};
    case DType::bf16:
      return {dlpack::kBfloat, 16, 1};
    case DType::f64:
      return {dlpack::kFloat, 64, 1};
    case DType::i64:
      return {dlpack::kInt, 64, 1};
    case DType::u8:
      return {dlpack::kUInt, 8, 1};
    default:
      return {dlpack::kInt, 32, 1};
  }
}

void set_error(void*, const char* kind, const char* message) {
  PyErr_Format(PyExc_RuntimeError, "%s: %s", kind, message);
}

// The binding call in progress on this thread.  Per thread: the CPU twins run with the GIL
// released, so calls of two Python threads end in any order (and torch.empty, the allocator
// without the exchange table, may release the GIL inside an argument builder).
thread_local Outputs* g_outputs = nullptr;

}  // namespace

py::object new_tensor(DType dtype, std::initializer_list<int64_t> sizes, const TensorArg& like,
                      TensorArg& view) {
  view = TensorArg{};
  view.dtype = dtype;
  view.cuda = like.cuda;
  view.device = like.device;
  view.ndim = static_cast<int>(sizes.size());
  int i = 0;
  for (int64_t s : sizes) view.size[i++] = s;
  for (int64_t j = view.ndim - 1, st = 1; j >= 0; st *= view.size[j--]) view.stride[j] = st;
  py::object obj;
  if (g_api) {
    dlpack::Tensor proto{};
    proto.device = {like.cuda ? dlpack::kCUDA : dlpack::kCPU, like.cuda ? like.device : 0};
    proto.ndim = view.ndim;
    proto.dtype = dl_dtype(dtype);
    proto.shape = view.size;
    dlpack::ManagedTensorVersioned* m = nullptr;
    void* py = nullptr;
    if (g_api->managed_tensor_allocator(&proto, &m, nullptr, set_error) != 0 ||
        g_api->managed_tensor_to_py_object_no_sync(m, &py) != 0)
      throw py::error_already_set();
    obj = py::reinterpret_steal<py::object>(static_cast<PyObject*>(py));
  } else {
    py::module_ torch = py::module_::import("torch");
    py::tuple shape(view.ndim);
    for (int j = 0; j < view.ndim; ++j) shape[j] = view.size[j];
    const char* name = dtype == DType::f32   ? "float32"
                       : dtype == DType::i64 ? "int64"
                       : dtype == DType::u8  ? "uint8"
                                             : "int32";
    py::object device = like.cuda ? py::object(py::str("cuda:" + std::to_string(like.device)))
                                  : py::object(py::str("cpu"));
    obj =
        torch.attr("empty")(shape, py::arg("dtype") = torch.attr(name), py::arg("device") = device);
  }
  if (!load_tensor_arg(obj.ptr(), view)) throw std::runtime_error("specops: new tensor unreadable");
  return obj;
}

void* current_stream(int device) {
  void* stream = nullptr;
  if (g_api && device >= 0) {
    if (g_api->current_work_stream(dlpack::kCUDA, device, &stream) != 0)
      throw py::error_already_set();
    return stream;
  }
  py::object cuda = py::module_::import("torch").attr("cuda");
  py::object s = device >= 0 ? cuda.attr("current_stream")(device) : cuda.attr("current_stream")();
  return reinterpret_cast<void*>(static_cast<intptr_t>(s.attr("cuda_stream").cast<int64_t>()));
}

// The bytes [lo, hi) a tensor with data spans, and its device (-1: the CPU).
static Outputs::Span byte_span(const TensorArg& t) {
  const int64_t es = dtype_size(t.dtype);
  intptr_t lo = 0, hi = es;
  for (int i = 0; i < t.ndim; ++i) {
    const intptr_t span = static_cast<intptr_t>((t.size[i] - 1) * t.stride[i] * es);
    (span < 0 ? lo : hi) += span;
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(t.data);
  return {base + lo, base + hi, t.cuda ? t.device : -1, nullptr};
}

Outputs::Outputs() : prev(g_outputs) { g_outputs = this; }
Outputs::~Outputs() { g_outputs = prev; }
Outputs* Outputs::active() { return g_outputs; }
py::tuple Outputs::result() const { return py::tuple(list); }

TensorArg ArgCheck::output(const TensorArg& t, const char* name, DType dtype,
                           std::initializer_list<int64_t> sizes, const TensorArg& like) const {
  TensorArg r;
  py::object obj;
  if (t.defined()) {
    contiguous(distinct(need(t, name, dtype, static_cast<int>(sizes.size()), sizes), name), name);
    // a buffer the kernel writes must not share bytes with anything it reads or writes
    if (const Outputs* o = Outputs::active(); o && t.numel() > 0) {
      const Outputs::Span& me = o->spans.back();  // need() has just recorded t
      for (size_t i = 0; i + 1 < o->spans.size(); ++i) {
        const Outputs::Span& s = o->spans[i];
        if (s.device == me.device && s.lo < me.hi && me.lo < s.hi)
          fail(name, std::string("shares memory with ") + s.name +
                         " (an output must not alias the op's other tensors)");
      }
    }
    r = t;
    obj = py::reinterpret_borrow<py::object>(t.object);
  } else {
    obj = new_tensor(dtype, sizes, like, r);
    if (Outputs* o = Outputs::active()) o->record(r, name);
  }
  if (Outputs* o = Outputs::active()) o->list.append(obj);
  return r;
}

TensorArg ArgCheck::scratch(const TensorArg& t, const char* name, DType dtype,
                            std::initializer_list<int64_t> sizes, const TensorArg& like) const {
  if (t.defined())
    return contiguous(need(t, name, dtype, static_cast<int>(sizes.size()), sizes), name);
  Outputs* o = Outputs::active();
  if (!o) throw std::logic_error("specops: ArgCheck::scratch outside a binding call");
  TensorArg r;
  if (!like.cuda) {  // host memory: no tensor needed (the CPU twins and cuda_sim)
    r.dtype = dtype;
    r.ndim = static_cast<int>(sizes.size());
    int i = 0;
    for (int64_t s : sizes) r.size[i++] = s;
    for (int64_t j = r.ndim - 1, st = 1; j >= 0; st *= r.size[j--]) r.stride[j] = st;
    // 256-byte aligned, as cudaMalloc's: cuda_sim's sector counts (csrc/sim/traffic) then see
    // the layout a GPU workspace has, the same on every run
    constexpr uintptr_t kAlign = 256;
    const int64_t bytes = r.numel() * dtype_size(dtype);
    o->host_scratch.emplace_back(new char[(bytes > 0 ? bytes : 1) + kAlign]);
    const uintptr_t raw = reinterpret_cast<uintptr_t>(o->host_scratch.back().get());
    r.data = reinterpret_cast<void*>((raw + kAlign - 1) / kAlign * kAlign);
    o->record(r, name);
    return r;
  }
  o->scratch.append(new_tensor(dtype, sizes, like, r));
  o->record(r, name);
  return r;
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
  if (t.other_device) fail(name, "is on a device this backend cannot read (not the CPU or CUDA)");
  const bool want_cuda = cuda && !SimArgs::active();
  if (t.cuda != want_cuda)
    fail(name,
         std::string("must be a ") + (want_cuda ? "CUDA" : "CPU") + " tensor for this backend");
  if (t.cuda) {
    if (device < 0) device = t.device;
    if (t.device != device)
      fail(name, "is on cuda:" + std::to_string(t.device) +
                     " but the other inputs are on cuda:" + std::to_string(device));
    if (Outputs* o = Outputs::active(); o && o->device < 0) o->device = device;
  }
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
  if (!t.data && t.numel() > 0) fail(name, "has no data (a meta tensor?)");
  if (Outputs* o = Outputs::active()) o->record(t, name);
  return t;
}

void Outputs::record(const TensorArg& t, const char* name) {
  if (t.numel() == 0) return;
  const Span s = byte_span(t);
  spans.push_back({s.lo, s.hi, s.device, name});
}

void ArgCheck::disjoint(const TensorArg& w, const char* wn, const TensorArg& r,
                        const char* rn) const {
  if (!w.defined() || !r.defined() || w.numel() == 0 || r.numel() == 0) return;
  const Outputs::Span a = byte_span(w), b = byte_span(r);
  if (a.device == b.device && a.lo < b.hi && b.lo < a.hi)
    fail(wn, std::string("shares memory with ") + rn +
                 " (a tensor the op writes must not alias one it reads)");
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
