// Bindings of the features CPU kernels (gather_rows, drafter_inputs, feature cache write,
// path_similarity).  Tensors arrive as TensorArg (csrc/tensor_arg.h): every input is read with
// its own strides (float strides in bytes, index strides in elements, as features.h wants);
// outputs and the cache store are written contiguously and checked to be.  User-facing checks
// live in specops/ops/features.py.
#include <cmath>

#include "bind.h"
#include "specops/features.h"

namespace py = pybind11;
using T = const specops::TensorArg&;

namespace specops {

namespace {

// Element size of a float tensor (float32 / float16 / bfloat16), else a ValueError.
int esize_of(const ArgCheck& c, T t, const char* name) {
  if (t.dtype == DType::f32) return 4;
  if (t.dtype == DType::f16 || t.dtype == DType::bf16) return 2;
  c.fail(name, std::string("must be float32, float16 or bfloat16, got ") + dtype_name(t.dtype));
}

// A float tensor of `ndim` dims and `dtype` (the op's float dtype), on the backend's device.
const TensorArg& floats(const ArgCheck& c, T t, const char* name, DType dtype, int ndim,
                        std::initializer_list<int64_t> sizes = {}) {
  return c.need(t, name, dtype, ndim, sizes);
}

// Ids of any stride (the kernels take both index strides).
const TensorArg& ids(const ArgCheck& c, T t, const char* name, int ndim,
                     std::initializer_list<int64_t> sizes = {}) {
  return c.need(t, name, t.dtype == DType::i64 ? DType::i64 : DType::i32, ndim, sizes);
}

void gather_rows(T src, T index, T out) {
  const ArgCheck c{"gather_rows", false};
  c.need(src, "src", src.dtype, 3);
  const int es = esize_of(c, src, "src");
  const int64_t b = src.size[0], n = src.size[1], h = src.size[2];
  ids(c, index, "index", 2, {b});
  const int64_t m = index.size[1];
  c.contiguous(floats(c, out, "out", src.dtype, 3, {b, m, h}), "out");
  py::gil_scoped_release release;
  gather_rows_host(src.as<const char>(), src.stride[0] * es, src.stride[1] * es, src.stride[2] * es,
                   n, index.data, index.dtype == DType::i64, index.stride[0], index.stride[1],
                   out.as<char>(), b, m, h, es);
}

void drafter_inputs(T emb, T tokens, T feats, T step, T out) {
  const ArgCheck c{"drafter_inputs", false};
  c.need(emb, "embedding", emb.dtype, 2);
  const int es = esize_of(c, emb, "embedding");
  ids(c, tokens, "tokens", 2);
  const int64_t b = tokens.size[0], m = tokens.size[1], e = emb.size[1];
  floats(c, feats, "features", emb.dtype, 3, {b, m});
  const int64_t h = feats.size[2];
  int mode = 0;
  int64_t st_b = 0, st_m = 0, st_s = 0, s = 0;
  if (step.defined()) {
    if (step.ndim == 1) {
      floats(c, step, "step_embedding", emb.dtype, 1);
      mode = 1;
      st_s = step.stride[0] * es;
      s = step.size[0];
    } else {
      floats(c, step, "step_embedding", emb.dtype, 3, {b, m});
      mode = 2;
      st_b = step.stride[0] * es;
      st_m = step.stride[1] * es;
      st_s = step.stride[2] * es;
      s = step.size[2];
    }
  }
  c.contiguous(floats(c, out, "out", emb.dtype, 3, {b, m, e + h + s}), "out");
  py::gil_scoped_release release;
  drafter_inputs_host(emb.as<const char>(), emb.stride[0] * es, emb.stride[1] * es, emb.size[0], e,
                      tokens.data, tokens.dtype == DType::i64, tokens.stride[0], tokens.stride[1],
                      feats.as<const char>(), feats.stride[0] * es, feats.stride[1] * es,
                      feats.stride[2] * es, h, step.as<const char>(), st_b, st_m, st_s, s, mode,
                      out.as<char>(), b, m, es);
}

// step: None (then step_value) or int64 [1] / [B], read with its stride.
void feature_cache_write(T store, T stamps, T positions, T feats, T step, int64_t step_value) {
  const ArgCheck c{"FeatureCache.write", false};
  c.contiguous(c.need(store, "store", store.dtype, 3), "store");
  const int es = esize_of(c, store, "store");
  const int64_t b = store.size[0], cap = store.size[1], h = store.size[2];
  c.contiguous(c.need(stamps, "stamps", DType::i32, 2, {b, cap}), "stamps");
  ids(c, positions, "positions", 2, {b});
  const int64_t m = positions.size[1];
  floats(c, feats, "feats", store.dtype, 3, {b, m, h});
  c.maybe(step, "step", DType::i64, 1);
  if (step.defined() && step.size[0] != 1 && step.size[0] != b)
    c.fail("step", "must have 1 entry or one per request");
  const int64_t step_stride = step.defined() && step.size[0] > 1 ? step.stride[0] : 0;
  py::gil_scoped_release release;
  feature_cache_write_host(store.as<char>(), stamps.as<int32_t>(), cap, h, positions.data,
                           positions.dtype == DType::i64, positions.stride[0], positions.stride[1],
                           feats.as<const char>(), feats.stride[0] * es, feats.stride[1] * es,
                           feats.stride[2] * es, step.as<const int64_t>(), step_stride, step_value,
                           b, m, es);
}

void path_similarity(T paths, T codebook, double alpha, int64_t stride, T out) {
  const ArgCheck c{"path_similarity", false};
  ids(c, paths, "paths", 3);
  c.need(codebook, "codebook", codebook.dtype, 2);
  const int es = esize_of(c, codebook, "codebook");
  if (stride < 1) c.fail("stride", "must be >= 1");
  const int64_t b = paths.size[0];
  c.contiguous(c.need(out, "out", DType::f32, 1, {b}), "out");
  PathSimArgs a;
  a.paths = paths.data;
  a.paths64 = paths.dtype == DType::i64;
  a.s_pb = paths.stride[0];
  a.s_pp = paths.stride[1];
  a.s_pl = paths.stride[2];
  a.P = paths.size[1];
  a.L = paths.size[2];
  a.codebook = codebook.as<const char>();
  a.s_cv = codebook.stride[0] * es;
  a.s_cc = codebook.stride[1] * es;
  a.V = codebook.size[0];
  a.C = codebook.size[1];
  a.kind = codebook.dtype == DType::f32 ? 0 : codebook.dtype == DType::f16 ? 1 : 2;
  a.esize = es;
  a.alpha_stride = std::pow(alpha, static_cast<double>(stride));  // what Python's alpha**stride is
  a.stride = stride;
  py::gil_scoped_release release;
  path_similarity_host(a, b, out.as<float>());
}

}  // namespace

void bind_features(py::module_& m) {
  for (const char* name :
       {"gather_rows", "drafter_inputs", "feature_cache_write", "path_similarity"})
    host_kernel_names().push_back(name);
  // The outputs are given (these write them): the declarations' order (specops/ops/features.py)
  using py::arg;
  m.def("gather_rows_cpu", &gather_rows, arg("src"), arg("index"), arg("out_out"));
  m.def("drafter_inputs_cpu", &drafter_inputs, arg("embedding"), arg("tokens"), arg("features"),
        arg("step_embedding"), arg("out_out"));
  m.def("feature_cache_write_cpu", &feature_cache_write, arg("store"), arg("stamps"),
        arg("positions"), arg("feats"), arg("step"), arg("step_value"));
  m.def("path_similarity_cpu", &path_similarity, arg("paths"), arg("codebook"), arg("alpha"),
        arg("stride"), arg("out_out"));
}

}  // namespace specops
