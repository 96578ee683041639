// Binding of the probs_from_logits CPU twin: logits (and uncond) float32 [R, V] with the last dim
// contiguous, per-request parameters None or [B] (float32; top_k int32) read with their stride,
// out float32 [R, V] contiguous.  specops/ops/probs.py flattens the rows and converts the dtype.
#include "bind.h"
#include "specops/probs.h"

namespace py = pybind11;
using T = const specops::TensorArg&;

namespace specops {

namespace {

ProbsArgs probs_args(bool cuda, T cond, T temperature, double temperature_v, T top_k,
                     int64_t top_k_v, T top_p, double top_p_v, T cfg, double cfg_v, T uncond, T out,
                     int64_t rows_per_req) {
  const ArgCheck c{"probs_from_logits", cuda};
  c.inner_contiguous(c.need(cond, "logits", DType::f32, 2), "logits");
  ProbsArgs a;
  a.rows = cond.size[0];
  a.vocab = cond.size[1];
  if (a.vocab < 1) c.fail("logits", "must have a non-empty last dim");
  a.cond = cond.as<const float>();
  a.cond_s0 = stride_of(cond, 0);
  c.inner_contiguous(c.maybe(uncond, "uncond_logits", DType::f32, 2, {a.rows, a.vocab}),
                     "uncond_logits");
  a.uncond = uncond.as<const float>();
  a.uncond_s0 = uncond.defined() ? stride_of(uncond, 0) : 0;
  if (rows_per_req < 1 || a.rows % rows_per_req != 0) c.fail("rows_per_req", "must divide rows");
  a.rows_per_req = rows_per_req;
  const int64_t nb = a.rows / rows_per_req;
  c.maybe(temperature, "temperature", DType::f32, 1, {nb});
  c.maybe(top_k, "top_k", DType::i32, 1, {nb});
  c.maybe(top_p, "top_p", DType::f32, 1, {nb});
  c.maybe(cfg, "cfg_scale", DType::f32, 1, {nb});
  a.temperature = temperature.as<const float>();
  a.temperature_s = temperature.defined() ? stride_of(temperature, 0) : 0;
  a.temperature_v = static_cast<float>(temperature_v);
  a.top_k = top_k.as<const int32_t>();
  a.top_k_s = top_k.defined() ? stride_of(top_k, 0) : 0;
  a.top_k_v = top_k_v;
  a.top_p = top_p.as<const float>();
  a.top_p_s = top_p.defined() ? stride_of(top_p, 0) : 0;
  a.top_p_v = static_cast<float>(top_p_v);
  a.cfg = cfg.as<const float>();
  a.cfg_s = cfg.defined() ? stride_of(cfg, 0) : 0;
  a.cfg_v = static_cast<float>(cfg_v);
  a.out = c.output(out, "out", DType::f32, {a.rows, a.vocab}, cond).as<float>();
  return a;
}

}  // namespace

void bind_probs(py::module_& m) {
  using py::arg;
  // rows_per_request: parameter tensor [B] entry b serves rows [b * rows_per_request, ...)
  bind_op(m, "probs_from_logits", probs_args, probs_from_logits_host, nullptr, nullptr,
          arg("logits"), arg("temperature"), arg("temperature_value"), arg("top_k"),
          arg("top_k_value"), arg("top_p"), arg("top_p_value"), arg("cfg_scale"),
          arg("cfg_scale_value"), arg("uncond_logits"), arg("out_probs"),
          arg("rows_per_request") = 1);
}

}  // namespace specops
