// Binding of the tree_attention CPU twin.  q, k_cache, v_cache, cache_seqlens, mask_bits and
// block_table arrive as TensorArg and are read with their own strides (sliced, transposed and
// expanded views need no copy); out (float32 [B, N, Hq, D]) and lse (float32 [B, N, Hq]) are
// written contiguously and checked to be.  User-facing checks: specops/ops/attention.py.
#include "bind.h"
#include "specops/features.h"  // FloatKind
#include "specops/tree_attention.h"

namespace py = pybind11;
using T = const specops::TensorArg&;

namespace specops {

namespace {

TreeAttnArgs attn_args(bool cuda, T q, T k, T v, T seqlens, T mask, T block_table, double scale,
                       T out, T lse) {
  const ArgCheck c{"tree_attention", cuda};
  TreeAttnArgs a{};
  if (!q.defined()) c.fail("q", "is required");
  c.need(q, "q", q.dtype, 4);
  int64_t es = 4;
  if (q.dtype == DType::f32) {
    a.kind = kF32;
  } else if (q.dtype == DType::f16 || q.dtype == DType::bf16) {
    a.kind = q.dtype == DType::f16 ? kF16 : kBF16;
    es = 2;
  } else {
    c.fail("q", std::string("must be float32, float16 or bfloat16, got ") + dtype_name(q.dtype));
  }
  a.batch = q.size[0];
  a.n = q.size[1];
  a.hq = q.size[2];
  a.d = q.size[3];
  c.need(k, "k_cache", q.dtype, 4, {-1, -1, -1, a.d});
  c.need(v, "v_cache", q.dtype, 4, {k.size[0], k.size[1], k.size[2], a.d});
  a.hkv = k.size[2];
  if (a.hkv == 0 || a.hq % a.hkv != 0)
    c.fail("k_cache", "must have a number of KV heads dividing q's " + std::to_string(a.hq));
  a.q = q.as<const char>();
  a.q_sb = q.stride[0] * es;
  a.q_sn = q.stride[1] * es;
  a.q_sh = q.stride[2] * es;
  a.q_sd = q.stride[3] * es;
  a.k = k.as<const char>();
  a.k_s0 = k.stride[0] * es;
  a.k_s1 = k.stride[1] * es;
  a.k_sh = k.stride[2] * es;
  a.k_sd = k.stride[3] * es;
  a.v = v.as<const char>();
  a.v_s0 = v.stride[0] * es;
  a.v_s1 = v.stride[1] * es;
  a.v_sh = v.stride[2] * es;
  a.v_sd = v.stride[3] * es;
  c.need(seqlens, "cache_seqlens", seqlens.dtype == DType::i64 ? DType::i64 : DType::i32, 1,
         {a.batch});
  a.seqlens = seqlens.data;
  a.seqlens64 = seqlens.dtype == DType::i64;
  a.seqlens_s = seqlens.stride[0];
  c.need(mask, "mask_bits", DType::i32, 3, {-1, a.n});
  if ((mask.size[0] != 1 && mask.size[0] != a.batch) || mask.size[2] < (a.n + 31) / 32)
    c.fail("mask_bits", "must have shape [1 or B, N, >= ceil(N/32)]");
  a.mask = mask.as<const int32_t>();
  a.mask_sb = mask.size[0] == 1 ? 0 : mask.stride[0];
  a.mask_sn = mask.stride[1];
  a.mask_sw = mask.stride[2];
  a.bt = block_table_arg(c, block_table, k, "k_cache", a.batch, "q");
  a.scale = static_cast<float>(scale);
  a.out = c.output(out, "out", DType::f32, {a.batch, a.n, a.hq, a.d}, q).as<float>();
  a.lse = c.output(lse, "lse", DType::f32, {a.batch, a.n, a.hq}, q).as<float>();
  return a;
}

}  // namespace

void bind_tree_attention(py::module_& m) {
  using py::arg;
  bind_op(m, "tree_attention", attn_args, tree_attention_host, nullptr, nullptr, arg("q"),
          arg("k_cache"), arg("v_cache"), arg("cache_seqlens"), arg("mask_bits"),
          arg("block_table"), arg("sm_scale"), arg("out_out"), arg("out_lse"));
}

}  // namespace specops
