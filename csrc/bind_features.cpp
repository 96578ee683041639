// Bindings of the features CPU kernels (gather_rows, drafter_inputs, feature cache write,
// path_similarity).  Arguments are validated by specops/ops/features.py; float strides are in
// bytes, index strides in elements.
#include "bind.h"
#include "specops/features.h"

namespace py = pybind11;

namespace specops {

void bind_features(py::module_& m) {
  for (const char* name :
       {"gather_rows", "drafter_inputs", "feature_cache_write", "path_similarity"})
    host_kernel_names().push_back(name);
  m.def("gather_rows_cpu", [](int64_t src, int64_t s_b, int64_t s_n, int64_t s_h, int64_t n,
                              int64_t index, bool index64, int64_t i_b, int64_t i_m, int64_t out,
                              int64_t batch, int64_t rows, int64_t h, int esize) {
    py::gil_scoped_release release;
    gather_rows_host(ptr<const char>(src), s_b, s_n, s_h, n, ptr<const void>(index), index64, i_b,
                     i_m, ptr<char>(out), batch, rows, h, esize);
  });
  m.def("drafter_inputs_cpu",
        [](int64_t emb, int64_t s_v, int64_t s_e, int64_t vocab, int64_t e, int64_t tokens,
           bool tokens64, int64_t t_b, int64_t t_m, int64_t feats, int64_t f_b, int64_t f_m,
           int64_t f_h, int64_t h, int64_t step, int64_t st_b, int64_t st_m, int64_t st_s,
           int64_t s, int step_mode, int64_t out, int64_t batch, int64_t rows, int esize) {
          py::gil_scoped_release release;
          drafter_inputs_host(ptr<const char>(emb), s_v, s_e, vocab, e, ptr<const void>(tokens),
                              tokens64, t_b, t_m, ptr<const char>(feats), f_b, f_m, f_h, h,
                              ptr<const char>(step), st_b, st_m, st_s, s, step_mode, ptr<char>(out),
                              batch, rows, esize);
        });
  m.def("feature_cache_write_cpu",
        [](int64_t store, int64_t stamps, int64_t cap, int64_t h, int64_t pos, bool pos64,
           int64_t p_b, int64_t p_m, int64_t feats, int64_t f_b, int64_t f_m, int64_t f_h,
           int64_t step_ptr, int64_t step_count, int64_t step_value, int64_t batch, int64_t rows,
           int esize) {
          py::gil_scoped_release release;
          feature_cache_write_host(ptr<char>(store), ptr<int32_t>(stamps), cap, h,
                                   ptr<const void>(pos), pos64, p_b, p_m, ptr<const char>(feats),
                                   f_b, f_m, f_h, ptr<const int64_t>(step_ptr), step_count,
                                   step_value, batch, rows, esize);
        });
  m.def("path_similarity_cpu",
        [](int64_t paths, bool paths64, int64_t s_pb, int64_t s_pp, int64_t s_pl, int64_t p,
           int64_t length, int64_t codebook, int64_t s_cv, int64_t s_cc, int64_t vocab, int64_t c,
           int kind, int esize, double alpha_stride, int64_t stride, int64_t out, int64_t batch) {
          PathSimArgs a;
          a.paths = ptr<const void>(paths);
          a.paths64 = paths64;
          a.s_pb = s_pb;
          a.s_pp = s_pp;
          a.s_pl = s_pl;
          a.P = p;
          a.L = length;
          a.codebook = ptr<const char>(codebook);
          a.s_cv = s_cv;
          a.s_cc = s_cc;
          a.V = vocab;
          a.C = c;
          a.kind = kind;
          a.esize = esize;
          a.alpha_stride = alpha_stride;
          a.stride = stride;
          py::gil_scoped_release release;
          path_similarity_host(a, batch, ptr<float>(out));
        });
}

}  // namespace specops
