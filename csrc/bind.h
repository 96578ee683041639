// Shared helpers of the binding files.  Each op family registers its functions from its own
// csrc/bind_<family>.cpp (bind_<family>(m)), so families never edit each other's files.
// Tensors arrive as TensorArg (pointer + dtype + sizes + strides + device, tensor_arg.h); each
// binding checks what its kernel reads (ArgCheck) and passes strides where the kernel walks them.
#pragma once
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "specops/block_table.h"
#include "specops/common.h"
#include "tensor_arg.h"

namespace specops {

// Token / index ids: int32 or int64 of the given rank (and sizes), last dim contiguous.
inline const TensorArg& need_ids(const ArgCheck& c, const TensorArg& t, const char* name, int ndim,
                                 std::initializer_list<int64_t> sizes = {}) {
  c.need(t, name, t.dtype == DType::i64 ? DType::i64 : DType::i32, ndim, sizes);
  return c.inner_contiguous(t, name);
}

// The random stream as the Python layer hands it over: one tuple (seed, seed_value, offset,
// offset_value), specops.ops ``Rng`` (a NamedTuple) or the generated fast path's plain tuple.
struct RngStream {
  TensorArg seed;  // None or int64 [S]
  int64_t seed_value = 0;
  TensorArg offset;  // None or one int64
  int64_t offset_value = 0;
};

// The random stream of `rows` rows of `draws` draws each.  seed: None or int64 [S] with S = 1
// (shared) or S dividing rows (rows r * S / rows .. belong to seed r / (rows / S)), read with
// its stride; offset: None or one int64; uniforms: None or float32 [rows, draws], read with its
// strides.
inline RngArgs make_rng(const ArgCheck& c, const RngStream& s, const TensorArg& uniforms,
                        int64_t rows, int64_t draws) {
  const TensorArg &seed = s.seed, &offset = s.offset;
  RngArgs rng;
  rng.seed_ptr = c.maybe(seed, "seed", DType::i64, 1).as<const int64_t>();
  rng.seed_value = s.seed_value;
  rng.seed_stride = 0;
  rng.rows_per_seed = rows > 0 ? rows : 1;
  if (seed.defined()) {
    const int64_t n = seed.size[0];
    if ((n < 1 && rows > 0) || (n > 1 && rows % n != 0))
      c.fail("seed", "must have 1 entry or one per request (" + std::to_string(n) +
                         " does not divide the " + std::to_string(rows) + " rows)");
    if (n > 1) {
      rng.seed_stride = seed.stride[0];
      rng.rows_per_seed = rows / n;
    }
  }
  if (offset.defined()) {
    c.need(offset, "offset", DType::i64, offset.ndim);
    if (offset.ndim > 1 || offset.numel() != 1)
      c.fail("offset", "must have exactly one element (shape [] or [1])");
  }
  rng.offset_ptr = offset.as<const int64_t>();
  rng.offset_value = s.offset_value;
  c.maybe(uniforms, "uniforms", DType::f32, 2, {rows, draws});
  rng.uniforms = uniforms.as<const float>();
  rng.uniforms_s0 = uniforms.defined() ? stride_of(uniforms, 0) : 0;
  rng.uniforms_s1 = uniforms.defined() ? stride_of(uniforms, 1) : 0;
  rng.draws_per_row = draws;
  return rng;
}

// The probability rows and token ids of a verification struct: target float32 [B, R, V], draft
// None or float32 [B, Rd, V], tokens int32/int64 [B, Rt], each last dim contiguous; `target_s1` /
// `draft_s1` name the struct's member for the stride of dim 1.  Sets target/draft/tokens,
// batch and vocab.
template <typename A>
void set_rows(const ArgCheck& c, A& a, int64_t A::* target_s1, int64_t A::* draft_s1,
              const TensorArg& target, const TensorArg& draft, const TensorArg& tokens,
              int64_t draft_rows, int64_t token_rows) {
  c.inner_contiguous(c.need(target, "target_probs", DType::f32, 3), "target_probs");
  const int64_t b = target.size[0], v = target.size[2];
  if (target.size[1] < 1 || v < 1)
    c.fail("target_probs", "must have at least one row and a non-empty vocab");
  c.inner_contiguous(c.maybe(draft, "draft_probs", DType::f32, 3, {b, draft_rows, v}),
                     "draft_probs");
  need_ids(c, tokens, "draft_tokens", 2, {b, token_rows});
  a.target = target.as<const float>();
  a.target_sb = target.stride[0];
  a.*target_s1 = target.stride[1];
  a.draft = draft.as<const float>();
  a.draft_sb = draft.defined() ? draft.stride[0] : 0;
  a.*draft_s1 = draft.defined() ? draft.stride[1] : 0;
  a.tokens = {tokens.data, tokens.dtype == DType::i64};
  a.tokens_sb = tokens.stride[0];
  a.batch = b;
  a.vocab = v;
}

// A tree array (first_child, next_sibling, parents): int32 [1 or B, N], rows contiguous;
// returns the row stride the kernels use (0: one tree shared by the batch).
inline int64_t tree_array(const ArgCheck& c, const TensorArg& t, const char* name, int64_t b,
                          int64_t n) {
  c.inner_contiguous(c.need(t, name, DType::i32, 2, {-1, n}), name);
  if (t.size[0] != 1 && t.size[0] != b)
    c.fail(name, "must have 1 or " + std::to_string(b) + " rows");
  return t.size[0] == 1 ? 0 : t.stride[0];
}

// LANTERN relaxation: neighbours None or int32 [V, k] contiguous (ids are clamped by the caller).
// GSD grouping: codebook None or float32 [V_img, C] contiguous, the codes of the image ids
// [image_start, image_start + V_img) within [0, V); window in [1, 16], group_p in (0, 1],
// group_d finite > 0.  At most one of the two.
inline RelaxArgs relax_args(const ArgCheck& c, const TensorArg& nb, double delta,
                            const TensorArg& codebook, int64_t window, double group_p,
                            double group_d, int64_t image_start, int64_t v) {
  c.contiguous(c.maybe(nb, "relax.neighbors", DType::i32, 2, {v, -1}), "relax.neighbors");
  RelaxArgs r{nb.as<const int32_t>(), nb.defined() ? nb.size[1] : 0, delta};
  c.contiguous(c.maybe(codebook, "relax.codebook", DType::f32, 2, {-1, -1}), "relax.codebook");
  if (!codebook.defined()) return r;
  if (nb.defined()) c.fail("relax", "cannot be both LANTERN's and GSD's");
  if (window < 1 || window > kMaxGroupWindow) c.fail("relax.window", "must be in [1, 16]");
  if (!(group_p > 0.0 && group_p <= 1.0)) c.fail("relax.p_threshold", "must be in (0, 1]");
  if (!(group_d > 0.0 && group_d < 1e308)) c.fail("relax.d_threshold", "must be finite and > 0");
  if (image_start < 0 || image_start + codebook.size[0] > v)
    c.fail("relax.image_range", "must lie within [0, V)");
  r.codebook = codebook.as<const float>();
  r.code_rows = codebook.size[0];
  r.code_dim = codebook.size[1];
  r.window = static_cast<int>(window);
  r.p_thr = static_cast<float>(group_p);
  r.d_thr = group_d;
  r.image_start = image_start;
  return r;
}

// A KV cache's layout (specops/block_table.h): block_table None (cache [B, S, ...]: its dim 0
// must be the batch, taken from `batch_from`) or int32/int64 [B, pages] (cache [P, page, ...],
// P >= 1).  `cache` is the K cache, named `cache_name` in messages.
inline BlockTable block_table_arg(const ArgCheck& c, const TensorArg& block_table,
                                  const TensorArg& cache, const char* cache_name, int64_t batch,
                                  const char* batch_from) {
  BlockTable t{};
  if (!block_table.defined()) {
    if (cache.size[0] != batch)
      c.fail(cache_name, "must have batch dim " + std::to_string(batch) + " (from " + batch_from +
                             "); paged caches need block_table");
    t.capacity = cache.size[1];
    return t;
  }
  const bool is64 = block_table.dtype == DType::i64;
  c.need(block_table, "block_table", is64 ? DType::i64 : DType::i32, 2, {batch});
  if (cache.size[0] == 0) c.fail(cache_name, "must have at least one page");
  const int64_t page = cache.size[1];
  return BlockTable{
      block_table.data,
      is64,
      block_table.stride[0],       // stride_b
      block_table.stride[1],       // stride_p
      page,                        // page_size
      cache.size[0],               // num_pages
      block_table.size[1] * page,  // capacity
  };
}

// The CUDA kernels' split of a row's draw at small batch (RowSplit, specops/common.h), with its
// float64 workspace [rows, chunks] when it splits.
inline RowSplit split_arg(const ArgCheck& c, int64_t rows, int64_t vocab, const TensorArg& like) {
  RowSplit s = row_split(rows, vocab);
  if (s.chunks > 1)
    s.sums = c.scratch(TensorArg(), "split_sums", DType::f64, {rows, s.chunks}, like).as<double>();
  return s;
}

// Greedy verification's split over `rows` probability rows (the argmaxes of their chunks, then a
// walk): the geometry, and into *best its pass 1's [rows * chunks, 2] (max, first id) workspace
// (nullptr without a split).
inline RowSplit greedy_split_arg(const ArgCheck& c, int64_t rows, int64_t vocab,
                                 const TensorArg& like, float** best) {
  RowSplit s = row_split(rows, vocab);
  *best = s.chunks > 1
              ? c.scratch(TensorArg(), "greedy_best", DType::f32, {rows * s.chunks, 2}, like)
                    .as<float>()
              : nullptr;
  return s;
}

inline void check_cuda_error(const std::string& err, const char* op) {
  if (!err.empty()) throw std::runtime_error(std::string("specops.") + op + ": " + err);
}

// A binding from an argument builder `make(cuda, p...)`: the CPU twin `run` (GIL released while
// it runs), or the CUDA launcher `launch` (returns the CUDA error text) on torch's current stream
// of the inputs' device.
// Each returns the tuple of its outputs (ArgCheck::output: the caller's buffers, or new ones
// where the caller passed None).
template <typename Args, typename... P>
auto host(Args (*make)(bool, P...), void (*run)(const Args&)) {
  return [make, run](P... p) {
    Outputs outs;
    Args a = make(false, p...);
    {
      pybind11::gil_scoped_release release;
      run(a);
    }
    return outs.result();
  };
}

template <typename Args, typename... P>
auto cuda(Args (*make)(bool, P...), std::string (*launch)(const Args&, void*), const char* op) {
  return [make, launch, op](P... p) {
    Outputs outs;
    const Args a = make(true, p...);
    check_cuda_error(launch(a, current_stream(outs.device)), op);
    return outs.result();
  };
}

// The same launcher built over the SIMT emulation (backend "cuda_sim", csrc/sim): the CUDA
// kernel's arguments and workspaces, on CPU tensors; no stream.  The GIL is released while it
// runs.
template <typename Args, typename... P>
auto cuda_sim(Args (*make)(bool, P...), std::string (*launch)(const Args&, void*), const char* op) {
  return [make, launch, op](P... p) {
    Outputs outs;
    Args a = [&] {
      SimArgs sim;
      return make(true, p...);
    }();
    std::string err;
    {
      pybind11::gil_scoped_release release;
      err = launch(a, nullptr);
    }
    check_cuda_error(err, op);
    return outs.result();
  };
}

// The CUDA launcher `f` where this module builds CUDA kernels (cuda_sim: their emulation),
// else nullptr.
#ifdef SPECOPS_WITH_CUDA
#define SPECOPS_IF_CUDA(f) f
#else
#define SPECOPS_IF_CUDA(f) nullptr
#endif
#ifdef SPECOPS_WITH_CUDA_SIM
#define SPECOPS_IF_CUDA_SIM(f) f
#else
#define SPECOPS_IF_CUDA_SIM(f) nullptr
#endif

// Names of the kernels compiled into the module, for specops.build_info().
std::vector<std::string>& host_kernel_names();
std::vector<std::string>& cuda_kernel_names();
std::vector<std::string>& cuda_sim_kernel_names();

// Binds `<op>_cpu` (the twin `run`), `<op>_cuda` (the launcher `gpu`) and `<op>_cuda_sim` (the
// emulated launcher `sim`), those this module builds and not nullptr (a twin without a CUDA
// kernel passes nullptr for both), with the argument names `names`: for a declared op the
// flat arguments of the op's declaration (specops/ops/_decl.py OpDecl) in its order, then its
// outputs `out_<name>`, then workspaces with defaults; tests/test_declarations.py holds each
// binding to its declaration, and pybind11 checks the count against `make`'s parameters.
template <typename Args>
using LaunchFn = typename std::common_type<std::string (*)(const Args&, void*)>::type;

template <typename Args, typename... P, typename... Names>
void bind_op(pybind11::module_& m, const char* op, Args (*make)(bool, P...),
             void (*run)(const Args&), LaunchFn<Args> gpu, LaunchFn<Args> sim,
             const Names&... names) {
  host_kernel_names().push_back(op);
  m.def((std::string(op) + "_cpu").c_str(), host(make, run), names...);
  (void)gpu;
  (void)sim;
#ifdef SPECOPS_WITH_CUDA
  if (gpu != nullptr) {
    cuda_kernel_names().push_back(op);
    m.def((std::string(op) + "_cuda").c_str(), cuda(make, gpu, op), names...);
  }
#endif
#ifdef SPECOPS_WITH_CUDA_SIM
  if (sim != nullptr) {
    cuda_sim_kernel_names().push_back(op);
    m.def((std::string(op) + "_cuda_sim").c_str(), cuda_sim(make, sim, op), names...);
  }
#endif
}

void bind_sample(pybind11::module_& m);
void bind_verify(pybind11::module_& m);
void bind_kv(pybind11::module_& m);
void bind_features(pybind11::module_& m);
void bind_jacobi(pybind11::module_& m);
void bind_probs(pybind11::module_& m);
void bind_tree_attention(pybind11::module_& m);
void bind_append_kv(pybind11::module_& m);
void bind_sim_checks(pybind11::module_& m);  // csrc/sim/planted.cpp

}  // namespace specops

namespace pybind11 {
namespace detail {
// An Rng: a tuple of four, the tensors as TensorArg, the values Python ints within int64 (else
// the call fails over to the next overload, i.e. pybind11's TypeError: the fast path then falls
// back to the checked one, which names the argument).
template <>
struct type_caster<specops::RngStream> {
  PYBIND11_TYPE_CASTER(specops::RngStream, const_name("Rng"));
  bool load(handle src, bool) {
    PyObject* o = src.ptr();
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 4) return false;
    return specops::load_tensor_arg(PyTuple_GET_ITEM(o, 0), value.seed) &&
           int64_of(PyTuple_GET_ITEM(o, 1), value.seed_value) &&
           specops::load_tensor_arg(PyTuple_GET_ITEM(o, 2), value.offset) &&
           int64_of(PyTuple_GET_ITEM(o, 3), value.offset_value);
  }

 private:
  static bool int64_of(PyObject* v, int64_t& out) {
    if (!PyLong_Check(v)) return false;
    int overflow = 0;
    out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow != 0 || (out == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    return true;
  }
};
}  // namespace detail
}  // namespace pybind11
