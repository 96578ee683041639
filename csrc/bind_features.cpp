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

// The arguments of each kernel, checked; the outputs are the caller's (contiguous) or new ones
// (ArgCheck::output), returned by the binding.
struct GatherArgs {
  const char* src;
  int64_t s_b, s_n, s_h, n;
  const void* index;
  bool index64;
  int64_t i_b, i_m;
  char* out;
  int64_t batch, m, h;
  int esize;
};

GatherArgs gather_args(bool cuda, T src, T index, T out) {
  const ArgCheck c{"gather_rows", cuda};
  c.need(src, "src", src.dtype, 3);
  const int es = esize_of(c, src, "src");
  const int64_t b = src.size[0], n = src.size[1], h = src.size[2];
  ids(c, index, "index", 2, {b});
  const int64_t m = index.size[1];
  return GatherArgs{src.as<const char>(),
                    src.stride[0] * es,
                    src.stride[1] * es,
                    src.stride[2] * es,
                    n,
                    index.data,
                    index.dtype == DType::i64,
                    index.stride[0],
                    index.stride[1],
                    c.output(out, "out", src.dtype, {b, m, h}, src).as<char>(),
                    b,
                    m,
                    h,
                    es};
}

void run_gather(const GatherArgs& a) {
  gather_rows_host(a.src, a.s_b, a.s_n, a.s_h, a.n, a.index, a.index64, a.i_b, a.i_m, a.out,
                   a.batch, a.m, a.h, a.esize);
}

struct DrafterArgs {
  const char* emb;
  int64_t s_v, s_e, vocab, e;
  const void* tokens;
  bool tokens64;
  int64_t t_b, t_m;
  const char* feats;
  int64_t f_b, f_m, f_h, h;
  const char* step;
  int64_t st_b, st_m, st_s, s;
  int mode;
  char* out;
  int64_t batch, m;
  int esize;
};

DrafterArgs drafter_args(bool cuda, T emb, T tokens, T feats, T step, T out) {
  const ArgCheck c{"drafter_inputs", cuda};
  c.need(emb, "embedding", emb.dtype, 2);
  const int es = esize_of(c, emb, "embedding");
  ids(c, tokens, "tokens", 2);
  const int64_t b = tokens.size[0], m = tokens.size[1], e = emb.size[1];
  floats(c, feats, "features", emb.dtype, 3, {b, m});
  DrafterArgs a{};
  a.h = feats.size[2];
  if (step.defined()) {
    if (step.ndim == 1) {
      floats(c, step, "step_embedding", emb.dtype, 1);
      a.mode = 1;
      a.st_s = step.stride[0] * es;
      a.s = step.size[0];
    } else {
      floats(c, step, "step_embedding", emb.dtype, 3, {b, m});
      a.mode = 2;
      a.st_b = step.stride[0] * es;
      a.st_m = step.stride[1] * es;
      a.st_s = step.stride[2] * es;
      a.s = step.size[2];
    }
  }
  a.emb = emb.as<const char>();
  a.s_v = emb.stride[0] * es;
  a.s_e = emb.stride[1] * es;
  a.vocab = emb.size[0];
  a.e = e;
  a.tokens = tokens.data;
  a.tokens64 = tokens.dtype == DType::i64;
  a.t_b = tokens.stride[0];
  a.t_m = tokens.stride[1];
  a.feats = feats.as<const char>();
  a.f_b = feats.stride[0] * es;
  a.f_m = feats.stride[1] * es;
  a.f_h = feats.stride[2] * es;
  a.step = step.as<const char>();
  a.out = c.output(out, "out", emb.dtype, {b, m, e + a.h + a.s}, emb).as<char>();
  a.batch = b;
  a.m = m;
  a.esize = es;
  return a;
}

void run_drafter(const DrafterArgs& a) {
  drafter_inputs_host(a.emb, a.s_v, a.s_e, a.vocab, a.e, a.tokens, a.tokens64, a.t_b, a.t_m,
                      a.feats, a.f_b, a.f_m, a.f_h, a.h, a.step, a.st_b, a.st_m, a.st_s, a.s,
                      a.mode, a.out, a.batch, a.m, a.esize);
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

struct PathSimBinding {
  PathSimArgs a;
  int64_t batch;
  float* out;
};

PathSimBinding path_similarity_args(bool cuda, T paths, T codebook, double alpha, int64_t stride,
                                    T out) {
  const ArgCheck c{"path_similarity", cuda};
  ids(c, paths, "paths", 3);
  c.need(codebook, "codebook", codebook.dtype, 2);
  const int es = esize_of(c, codebook, "codebook");
  if (stride < 1) c.fail("stride", "must be >= 1");
  PathSimBinding r;
  PathSimArgs& a = r.a;
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
  r.batch = paths.size[0];
  r.out = c.output(out, "out", DType::f32, {r.batch}, paths).as<float>();
  return r;
}

void run_path_similarity(const PathSimBinding& r) { path_similarity_host(r.a, r.batch, r.out); }

}  // namespace

void bind_features(py::module_& m) {
  // The declared features ops (specops/ops/features.py): their declarations' order, outputs
  // made when None; the feature cache write, a method of FeatureCache, writes its store.
  using py::arg;
  bind_op(m, "gather_rows", gather_args, run_gather, nullptr, nullptr, arg("src"), arg("index"),
          arg("out_out"));
  bind_op(m, "drafter_inputs", drafter_args, run_drafter, nullptr, nullptr, arg("embedding"),
          arg("tokens"), arg("features"), arg("step_embedding"), arg("out_out"));
  bind_op(m, "path_similarity", path_similarity_args, run_path_similarity, nullptr, nullptr,
          arg("paths"), arg("codebook"), arg("alpha"), arg("stride"), arg("out_out"));
  host_kernel_names().push_back("feature_cache_write");
  m.def("feature_cache_write_cpu", &feature_cache_write, arg("store"), arg("stamps"),
        arg("positions"), arg("feats"), arg("step"), arg("step_value"));
}

}  // namespace specops
