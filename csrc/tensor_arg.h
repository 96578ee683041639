// The typed boundary between Python and the kernels.  A binding takes each tensor as a
// TensorArg: pointer, dtype, sizes, strides and device read from the torch.Tensor object itself
// (through its Python attributes: no libtorch), so no caller can hand a kernel a pointer without
// its layout.  Each binding then states what its kernel reads (dtype, rank, sizes, and which
// dims it walks with strides) through the checks below; an argument the Python layer forgot to
// normalise raises a ValueError naming it instead of being read out of bounds.
#pragma once
#include <pybind11/pybind11.h>
#include <stdint.h>

#include <stdexcept>
#include <string>

namespace specops {

enum class DType : int8_t { none, f32, f16, bf16, f64, i32, i64, i16, i8, u8, b1, other };

const char* dtype_name(DType d);

struct TensorArg {
  static constexpr int kMaxDims = 8;
  void* data = nullptr;
  DType dtype = DType::none;  // none: the argument was None
  bool cuda = false;
  int ndim = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};  // in elements, as torch reports them

  bool defined() const { return dtype != DType::none; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= size[i];
    return n;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Reads the attributes of a torch.Tensor; called once at module import (needs torch's dtypes).
void init_tensor_arg(pybind11::module_& m);
bool load_tensor_arg(PyObject* obj, TensorArg& out);

// While one lives, ArgCheck{op, cuda = true} expects CPU tensors: a cuda_sim binding builds the
// CUDA kernel's arguments (its layout and workspaces) from CPU tensors.
struct SimArgs {
  SimArgs();
  ~SimArgs();
  SimArgs(const SimArgs&) = delete;
  SimArgs& operator=(const SimArgs&) = delete;
  static bool active();
};

// Checks of what a kernel reads.  Every failure is a std::invalid_argument (Python ValueError):
// "specops.<op>: <name> ...".
struct ArgCheck {
  const char* op;
  bool cuda;  // the device every tensor must be on (the binding's backend)

  [[noreturn]] void fail(const char* name, const std::string& what) const;

  // Defined, on the backend's device, of this dtype and rank; sizes[i] >= 0 are required.
  const TensorArg& need(const TensorArg& t, const char* name, DType dtype, int ndim,
                        std::initializer_list<int64_t> sizes = {}) const;
  // The same, or None (then returns t, undefined).
  const TensorArg& maybe(const TensorArg& t, const char* name, DType dtype, int ndim,
                         std::initializer_list<int64_t> sizes = {}) const;
  // Last dim contiguous (stride 1, or a single entry): kernels walk it with a plain pointer.
  const TensorArg& inner_contiguous(const TensorArg& t, const char* name) const;
  // No two elements at one address (no stride-0 dim of size > 1): tensors that are written.
  const TensorArg& distinct(const TensorArg& t, const char* name) const;
  // Every dim in row-major order with no gaps or overlaps (outputs and written tensors).
  const TensorArg& contiguous(const TensorArg& t, const char* name) const;
};

// Stride of dim i for a kernel that walks it: 0 when the dim has one entry (any stride is fine).
inline int64_t stride_of(const TensorArg& t, int i) { return t.size[i] == 1 ? 0 : t.stride[i]; }

}  // namespace specops

namespace pybind11 {
namespace detail {
template <>
struct type_caster<specops::TensorArg> {
  PYBIND11_TYPE_CASTER(specops::TensorArg, const_name("Tensor | None"));
  bool load(handle src, bool) { return specops::load_tensor_arg(src.ptr(), value); }
};
}  // namespace detail
}  // namespace pybind11
