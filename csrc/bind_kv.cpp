// Binding of commit_kv (CPU twin and CUDA).  The cache arrives as a TensorArg: the stacked tensor
// [layers, 2, B or P, S or page, Hkv, D], or (list of per-layer tensors) the first slab
// [B or P, S or page, Hkv, D] plus `bases`, int64 [2 * layers] of every slab's address (all
// slabs share the first one's shape, dtype and strides: checked by specops/ops/kv.py).  The
// geometry the kernels use (byte strides, row size, capacity) is derived here from the sizes
// and strides.
#include <numeric>

#include "bind.h"
#include "launchers.h"
#include "specops/kv.h"

namespace py = pybind11;
using T = const specops::TensorArg&;

namespace specops {

namespace {

struct CommitBinding {
  CommitKVArgs a;
  int64_t align;      // gcd of the byte geometry and the slab addresses (CUDA vector width)
  int32_t* counters;  // CUDA: per-request completion counters, zero before the launch
};

int64_t element_size(const ArgCheck& c, T t) {
  switch (t.dtype) {
    case DType::f32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    default:
      c.fail("caches",
             std::string("must be float32, float16 or bfloat16, got ") + dtype_name(t.dtype));
  }
}

CommitBinding commit_args(bool cuda, T caches, T seqlens, T slots, T block_table, T bases,
                          int64_t bases_align, T counters) {
  const ArgCheck c{"commit_kv", cuda};
  CommitBinding r;
  CommitKVArgs& a = r.a;
  const bool list = bases.defined();
  if (!caches.defined()) c.fail("caches", "is required");
  c.distinct(c.need(caches, "caches", caches.dtype, list ? 4 : 6), "caches");
  const int64_t es = element_size(c, caches);
  const int o = list ? 0 : 2;  // first slab dim
  if (!list && caches.size[1] != 2) c.fail("caches", "must have dim 1 of size 2 (K, V)");
  const int64_t hkv = caches.size[o + 2], d = caches.size[o + 3];
  // as specops/ops/kv.py _check_rows: stride(-1) == 1 and (Hkv == 1 or stride(-2) == D)
  if (caches.numel() > 0 && (caches.stride[o + 3] != 1 || (hkv != 1 && caches.stride[o + 2] != d)))
    c.fail("caches", "must have contiguous [Hkv, D] rows");
  if (list) {
    c.contiguous(c.need(bases, "bases", DType::i64, 1), "bases");
    if (bases.size[0] % 2 != 0) c.fail("bases", "must hold 2 addresses per layer");
    a.layers = bases.size[0] / 2;
    a.base = nullptr;
    a.bases = bases.as<const int64_t>();
    a.stride_layer = a.stride_kv = 0;
  } else {
    a.layers = caches.size[0];
    a.base = caches.as<char>();
    a.bases = nullptr;
    a.stride_layer = caches.stride[0] * es;
    a.stride_kv = caches.stride[1] * es;
  }
  a.stride_page = caches.stride[o] * es;
  a.stride_pos = caches.stride[o + 1] * es;
  a.row_bytes = hkv * d * es;
  c.contiguous(c.need(seqlens, "cache_seqlens", DType::i32, 1), "cache_seqlens");
  a.batch = seqlens.size[0];
  a.seqlens = seqlens.as<int32_t>();
  c.inner_contiguous(c.need(slots, "accepted_slots", DType::i32, 2, {a.batch}), "accepted_slots");
  a.slots = slots.as<const int32_t>();
  a.slots_stride = slots.stride[0];
  a.max_moves = slots.size[1];
  a.num_pages = caches.size[o];
  if (block_table.defined()) {
    c.inner_contiguous(c.need(block_table, "block_table", DType::i32, 2, {a.batch}), "block_table");
    a.page_size = caches.size[o + 1];
    a.capacity = block_table.size[1] * a.page_size;
    a.block_table = block_table.as<const int32_t>();
    a.bt_stride = block_table.stride[0];
  } else {
    if (caches.size[o] != a.batch)
      c.fail("caches", "must have batch dim " + std::to_string(a.batch) +
                           " (from cache_seqlens); paged caches need block_table");
    a.page_size = 0;
    a.capacity = caches.size[o + 1];
    a.block_table = nullptr;
    a.bt_stride = 0;
  }
  int64_t g = list ? bases_align : reinterpret_cast<intptr_t>(a.base);
  for (int64_t x : {a.row_bytes, a.stride_layer, a.stride_kv, a.stride_page, a.stride_pos})
    g = std::gcd(g, x);
  r.align = g;
  r.counters = nullptr;
  if (cuda) {  // the CUDA kernel's last-block-done counters (the CPU twin takes none)
    c.contiguous(c.need(counters, "counters", DType::i32, 1), "counters");
    if (counters.size[0] < a.batch) c.fail("counters", "must have one entry per request");
    r.counters = counters.as<int32_t>();
  }
  return r;
}

void run_host(const CommitBinding& r) { commit_kv_host(r.a); }

#if defined(SPECOPS_WITH_CUDA) || defined(SPECOPS_WITH_CUDA_SIM)
// Vector width: the largest of 16, 8, 4, 2, 1 bytes dividing the geometry and the addresses.
int vec_bytes(int64_t align) {
  for (int w : {16, 8, 4, 2})
    if (align % w == 0) return w;
  return 1;
}

template <std::string (*Launch)(const CommitKVArgs&, int, int32_t*, void*)>
std::string run_cuda(const CommitBinding& r, void* stream) {
  return Launch(r.a, vec_bytes(r.align), r.counters, stream);
}
#endif

}  // namespace

void bind_kv(py::module_& m) {
  using py::arg;
  // the declared order (specops/ops/kv.py), then the list form's slab addresses and their
  // alignment, and the CUDA kernel's completion counters
  bind_op(m, "commit_kv", commit_args, run_host, SPECOPS_IF_CUDA(run_cuda<gpu::launch_commit_kv>),
          SPECOPS_IF_CUDA_SIM(run_cuda<sim::launch_commit_kv>), arg("caches"), arg("cache_seqlens"),
          arg("accepted_slots"), arg("block_table"), arg("bases") = py::none(),
          arg("bases_align") = 0, arg("counters") = py::none());
}

}  // namespace specops
