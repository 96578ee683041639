// Binding of the append_kv CPU twin.  k, v [B, N, Hkv, D], the caches [B or P, S or page, Hkv, D]
// (the new rows' dtype: float32, float16 or bfloat16), cache_seqlens [B] and block_table
// [B, pages] (int32 or int64) arrive as TensorArg and are read (the caches written) with their
// own strides.  User-facing checks: specops/ops/attention.py.
#include "bind.h"
#include "specops/append_kv.h"

namespace py = pybind11;
using T = const specops::TensorArg&;

namespace specops {

namespace {

AppendKVArgs append_args(bool cuda, T k_cache, T v_cache, T k, T v, T seqlens, T block_table) {
  const ArgCheck c{"append_kv", cuda};
  if (!k.defined()) c.fail("k", "is required, got None");
  if (k.dtype != DType::f32 && k.dtype != DType::f16 && k.dtype != DType::bf16)
    c.fail("k", std::string("must be float32, float16 or bfloat16, got ") + dtype_name(k.dtype));
  c.need(k, "k", k.dtype, 4);
  AppendKVArgs a{};
  a.batch = k.size[0];
  a.n = k.size[1];
  a.hkv = k.size[2];
  a.d = k.size[3];
  c.need(v, "v", k.dtype, 4, {a.batch, a.n, a.hkv, a.d});
  c.distinct(c.need(k_cache, "k_cache", k.dtype, 4, {-1, -1, a.hkv, a.d}), "k_cache");
  c.distinct(c.need(v_cache, "v_cache", k.dtype, 4, {k_cache.size[0], k_cache.size[1], a.hkv, a.d}),
             "v_cache");
  for (const auto& [w, wn] : {std::pair{&k_cache, "k_cache"}, std::pair{&v_cache, "v_cache"}})
    for (const auto& [r, rn] : {std::pair{&k, "k"}, std::pair{&v, "v"}}) c.disjoint(*w, wn, *r, rn);
  c.need(seqlens, "cache_seqlens", seqlens.dtype == DType::i64 ? DType::i64 : DType::i32, 1,
         {a.batch});
  a.elem_bytes = dtype_size(k.dtype);
  for (int i = 0; i < 4; ++i) {
    a.kc_stride[i] = k_cache.stride[i] * a.elem_bytes;
    a.vc_stride[i] = v_cache.stride[i] * a.elem_bytes;
    a.k_stride[i] = k.stride[i] * a.elem_bytes;
    a.v_stride[i] = v.stride[i] * a.elem_bytes;
  }
  a.k_cache = k_cache.as<char>();
  a.v_cache = v_cache.as<char>();
  a.k = k.as<const char>();
  a.v = v.as<const char>();
  a.seqlens = seqlens.data;
  a.seqlens64 = seqlens.dtype == DType::i64;
  a.seqlens_stride = seqlens.stride[0];
  a.bt = block_table_arg(c, block_table, k_cache, "k_cache", a.batch, "k");
  return a;
}

}  // namespace

void bind_append_kv(py::module_& m) {
  using py::arg;
  bind_op(m, "append_kv", append_args, append_kv_host, nullptr, nullptr, arg("k_cache"),
          arg("v_cache"), arg("k"), arg("v"), arg("cache_seqlens"), arg("block_table"));
}

}  // namespace specops
