// Bindings of sample and sample_without_replacement: probs float32 [rows, V] (last dim
// contiguous), the random stream, out int32 [rows] (sample) or [rows, k] (without replacement)
// contiguous.  specops/ops/sample.py flattens the leading dims and normalises.
#include "bind.h"
#include "launchers.h"
#include "specops/sample.h"

namespace py = pybind11;
using T = const specops::TensorArg&;

namespace specops {

namespace {

struct SampleArgs {
  const float* probs;
  int64_t rows, vocab, row_stride;
  RngArgs rng;
  RowSplit split;  // the CUDA kernel's split at small batch (specops/common.h)
  int32_t* out;
};

// probs float32 [rows, V], V >= 1, last dim contiguous: sets a.probs, a.rows, a.vocab and
// a.row_stride.
template <typename A>
void set_probs(const ArgCheck& c, A& a, const TensorArg& probs) {
  c.inner_contiguous(c.need(probs, "probs", DType::f32, 2), "probs");
  if (probs.size[1] < 1) c.fail("probs", "must have a non-empty last dim");
  a.probs = probs.as<const float>();
  a.rows = probs.size[0];
  a.vocab = probs.size[1];
  a.row_stride = probs.stride[0];
}

SampleArgs sample_args(bool cuda, T probs, const RngStream& rng, T uniforms, T out) {
  const ArgCheck c{"sample", cuda};
  SampleArgs a;
  set_probs(c, a, probs);
  a.rng = make_rng(c, rng, uniforms, a.rows, 1);
  a.out = c.output(out, "out", DType::i32, {a.rows}, probs).as<int32_t>();
  if (cuda) a.split = split_arg(c, a.rows, a.vocab, probs);
  return a;
}

SampleWorArgs wor_args(bool cuda, T probs, int64_t k, const RngStream& rng, T uniforms, T out) {
  const ArgCheck c{"sample_without_replacement", cuda};
  SampleWorArgs a;
  set_probs(c, a, probs);
  if (k < 1) c.fail("k", "must be >= 1");
  a.k = k;
  a.rng = make_rng(c, rng, uniforms, a.rows, a.vocab);
  a.out = c.output(out, "out", DType::i32, {a.rows, k}, probs).as<int32_t>();
  return a;
}

void run_host(const SampleArgs& a) {
  sample_host(a.probs, a.rows, a.vocab, a.row_stride, a.rng, a.out);
}

template <std::string (*Launch)(const float*, int64_t, int64_t, int64_t, RngArgs, RowSplit,
                                int32_t*, void*)>
std::string run_cuda(const SampleArgs& a, void* stream) {
  return Launch(a.probs, a.rows, a.vocab, a.row_stride, a.rng, a.split, a.out, stream);
}

}  // namespace

void bind_sample(py::module_& m) {
  using py::arg;
  bind_op(m, "sample", sample_args, run_host, SPECOPS_IF_CUDA(run_cuda<gpu::launch_sample>),
          SPECOPS_IF_CUDA_SIM(run_cuda<sim::launch_sample>), arg("probs"), arg("rng"),
          arg("uniforms"), arg("out_tokens"));
  bind_op(m, "sample_without_replacement", wor_args, sample_wor_host,
          SPECOPS_IF_CUDA(gpu::launch_sample_wor), SPECOPS_IF_CUDA_SIM(sim::launch_sample_wor),
          arg("probs"), arg("k"), arg("rng"), arg("uniforms"), arg("out_tokens"));
}

}  // namespace specops
