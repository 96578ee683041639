// The DLPack C exchange protocol (DLPack >= 1.2, `type(t).__dlpack_c_exchange_api__`), declared
// from the DLPack specification so the bindings stay free of torch headers.  torch >= 2.10
// publishes a table of C functions on torch.Tensor; its `dltensor_from_py_object_no_sync` fills
// a DLTensor (data, device, dtype, shape, strides) straight from the C++ tensor behind a Python
// object, without calling any Python attribute (about 20 ns against about 500 ns for reading
// data_ptr / shape / stride / dtype / is_cuda), and `managed_tensor_allocator` +
// `managed_tensor_to_py_object_no_sync` make a new torch.Tensor through torch's own allocator.
// Only the layout of these C structs matters: it is fixed by the DLPack ABI (major version 1).
#pragma once
#include <stddef.h>
#include <stdint.h>

namespace specops::dlpack {

struct Version {
  uint32_t major;
  uint32_t minor;
};

enum DeviceType : int32_t { kCPU = 1, kCUDA = 2 };

struct Device {
  int32_t device_type;
  int32_t device_id;
};

enum TypeCode : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kBool = 6 };

struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL means compact row-major
  uint64_t byte_offset;
};

struct ManagedTensorVersioned {
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned* self);
  uint64_t flags;
  Tensor dl_tensor;
};

using SetErrorFn = void (*)(void* ctx, const char* kind, const char* message);

struct ExchangeAPI {
  Version version;  // header: major must be 1
  void* prev_api;
  int (*managed_tensor_allocator)(Tensor* prototype, ManagedTensorVersioned** out, void* ctx,
                                  SetErrorFn set_error);
  int (*managed_tensor_from_py_object_no_sync)(void* py_object, ManagedTensorVersioned** out);
  int (*managed_tensor_to_py_object_no_sync)(ManagedTensorVersioned* tensor, void** py_object);
  int (*dltensor_from_py_object_no_sync)(void* py_object, Tensor* out);  // may be NULL
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** stream);
};

}  // namespace specops::dlpack
