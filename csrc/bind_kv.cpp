// Bindings of the kv kernels: commit_kv (CPU twin and CUDA).  Arguments are validated by
// specops/ops/kv.py; strides and sizes of the cache are in bytes.
#include "bind.h"
#include "specops/kv.h"
#ifdef SPECOPS_WITH_CUDA
#include "kv_launch.h"
#endif

namespace py = pybind11;

namespace specops {

namespace {

CommitKVArgs make_commit_args(int64_t base, int64_t bases, int64_t stride_layer, int64_t stride_kv,
                              int64_t layers, int64_t stride_page, int64_t stride_pos,
                              int64_t row_bytes, int64_t capacity, int64_t page_size,
                              int64_t block_table, int64_t bt_stride, int64_t num_pages,
                              int64_t seqlens, int64_t slots, int64_t slots_stride, int64_t batch,
                              int64_t max_moves) {
  CommitKVArgs a;
  a.base = ptr<char>(base);
  a.bases = ptr<const int64_t>(bases);
  a.stride_layer = stride_layer;
  a.stride_kv = stride_kv;
  a.layers = layers;
  a.stride_page = stride_page;
  a.stride_pos = stride_pos;
  a.row_bytes = row_bytes;
  a.capacity = capacity;
  a.page_size = page_size;
  a.block_table = ptr<const int32_t>(block_table);
  a.bt_stride = bt_stride;
  a.num_pages = num_pages;
  a.seqlens = ptr<int32_t>(seqlens);
  a.slots = ptr<const int32_t>(slots);
  a.slots_stride = slots_stride;
  a.batch = batch;
  a.max_moves = max_moves;
  return a;
}

}  // namespace

void bind_kv(py::module_& m) {
  host_kernel_names().push_back("commit_kv");
  m.def("commit_kv_cpu",
        [](int64_t base, int64_t bases, int64_t stride_layer, int64_t stride_kv, int64_t layers,
           int64_t stride_page, int64_t stride_pos, int64_t row_bytes, int64_t capacity,
           int64_t page_size, int64_t block_table, int64_t bt_stride, int64_t num_pages,
           int64_t seqlens, int64_t slots, int64_t slots_stride, int64_t batch, int64_t max_moves) {
          CommitKVArgs a =
              make_commit_args(base, bases, stride_layer, stride_kv, layers, stride_page,
                               stride_pos, row_bytes, capacity, page_size, block_table, bt_stride,
                               num_pages, seqlens, slots, slots_stride, batch, max_moves);
          py::gil_scoped_release release;
          commit_kv_host(a);
        });
#ifdef SPECOPS_WITH_CUDA
  cuda_kernel_names().push_back("commit_kv");
  m.def("commit_kv_cuda",
        [](int64_t base, int64_t bases, int64_t stride_layer, int64_t stride_kv, int64_t layers,
           int64_t stride_page, int64_t stride_pos, int64_t row_bytes, int64_t capacity,
           int64_t page_size, int64_t block_table, int64_t bt_stride, int64_t num_pages,
           int64_t seqlens, int64_t slots, int64_t slots_stride, int64_t batch, int64_t max_moves,
           int64_t vec_bytes, int64_t counters, int64_t stream) {
          CommitKVArgs a =
              make_commit_args(base, bases, stride_layer, stride_kv, layers, stride_page,
                               stride_pos, row_bytes, capacity, page_size, block_table, bt_stride,
                               num_pages, seqlens, slots, slots_stride, batch, max_moves);
          check_cuda_error(launch_commit_kv_cuda(a, static_cast<int>(vec_bytes),
                                                 ptr<int32_t>(counters), ptr<void>(stream)),
                           "commit_kv");
        });
#endif
}

}  // namespace specops
