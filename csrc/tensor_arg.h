// The typed boundary between Python and the kernels.  A binding takes each tensor as a
// TensorArg: pointer, dtype, sizes, strides and device read from the torch.Tensor object itself
// (through its Python attributes: no libtorch), so no caller can hand a kernel a pointer without
// its layout.  Each binding then states what its kernel reads (dtype, rank, sizes, and which
// dims it walks with strides) through the checks below; an argument the Python layer forgot to
// normalise raises a ValueError naming it instead of being read out of bounds.
#pragma once
#include <pybind11/pybind11.h>
#include <stdint.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace specops {

enum class DType : int8_t { none, f32, f16, bf16, f64, i32, i64, i16, i8, u8, b1, other };

const char* dtype_name(DType d);
int64_t dtype_size(DType d);

struct TensorArg {
  static constexpr int kMaxDims = 8;
  void* data = nullptr;
  DType dtype = DType::none;  // none: the argument was None
  bool cuda = false;
  bool other_device = false;   // neither the CPU nor CUDA (meta, mps, xpu, ...)
  int device = 0;              // the CUDA device index (0 on the CPU)
  PyObject* object = nullptr;  // the torch.Tensor itself (borrowed for the call)
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

// A new contiguous torch.Tensor of `dtype` and `sizes` on the device of `like`, from torch's own
// allocator (through its DLPack exchange table when torch has one, else torch.empty); `view`
// describes it.  Returns a new reference.
pybind11::object new_tensor(DType dtype, std::initializer_list<int64_t> sizes,
                            const TensorArg& like, TensorArg& view);

// torch's current CUDA stream on `device` (through the exchange table, else torch.cuda), as a
// cudaStream_t: what the CUDA bindings launch on, so Python never passes a stream.
void* current_stream(int device);

// The outputs of one binding call, in the order the binding declares them (ArgCheck::output):
// the caller's buffers or new ones.  While one lives (the bindings' wrappers in bind.h open one
// around the argument builder), outputs are recorded into it; result() is what the binding
// returns: a tuple of the output tensors.
struct Outputs {
  Outputs();
  ~Outputs();
  Outputs(const Outputs&) = delete;
  Outputs& operator=(const Outputs&) = delete;
  pybind11::tuple result() const;
  static Outputs* active();
  pybind11::list list;     // the outputs, returned
  pybind11::list scratch;  // device workspaces made for the call (alive until it returns)
  std::vector<std::unique_ptr<char[]>> host_scratch;  // host ones (plain memory, no tensor)
  int device = -1;  // the CUDA device of the call's tensors (ArgCheck::need sets it)
  struct Span {     // the bytes a checked tensor spans, [lo, hi), on one device
    uintptr_t lo, hi;
    int device;  // -1: the CPU
    const char* name;
  };
  std::vector<Span> spans;  // every tensor ArgCheck::need has seen or made in this call, in order
  void record(const TensorArg& t, const char* name);  // appends t's span (if it has elements)
  Outputs* prev;
};

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
  bool cuda;                // the device every tensor must be on (the binding's backend)
  mutable int device = -1;  // the CUDA device index of the first CUDA tensor checked

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
  // A tensor `w` written in place shares no byte with a tensor `r` the kernel reads (their byte
  // spans on one device do not meet).
  void disjoint(const TensorArg& w, const char* wn, const TensorArg& r, const char* rn) const;
  // Every dim in row-major order with no gaps or overlaps (outputs and written tensors).
  const TensorArg& contiguous(const TensorArg& t, const char* name) const;
  // An output: the caller's buffer `t` (this dtype and these sizes, contiguous), or, when it is
  // None, a new tensor on the device of `like`; recorded in the active Outputs.
  TensorArg output(const TensorArg& t, const char* name, DType dtype,
                   std::initializer_list<int64_t> sizes, const TensorArg& like) const;
  // A workspace: the caller's buffer `t` (checked like an output), or, when it is None, a new one
  // kept alive by the active Outputs until the binding returns: plain host memory when `like` is
  // a CPU tensor, else a tensor from torch's allocator (which orders its reuse on the stream).
  // Not returned.
  TensorArg scratch(const TensorArg& t, const char* name, DType dtype,
                    std::initializer_list<int64_t> sizes, const TensorArg& like) const;
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
