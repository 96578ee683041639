// VSD path acceptance (VSD Eqs. 2, 9-11): the per-node core shared by the C++ CPU twin and the
// CUDA kernel.  Semantics of specops/reference/verify.py path_acceptance:
//   node n >= 1 carries token x_n drafted from q = draft row par(n), verified against
//   p = target row par(n):  alpha_n = min(1, p(x_n) / q(x_n))    (float64 of the float32 entries)
//                           alpha_n = 1 if q(x_n) = 0 < p(x_n),  0 if p(x_n) = 0
//                           alpha_n = min(1, p(x_n))             without q (one-hot drafts)
//   ids outside [0, V) (and -1 padding) read p = q = 0, so alpha = 0.
//   S_n = S_par(n) * alpha_n, S_0 = 1   (the path root..n is accepted whole, Eq. 9)
//   E_n = E_par(n) + S_n,     E_0 = 0   (expected accepted length along root..n, Eq. 10)
//   per leaf (a node no node names as parent), in index order: kappa = S, expected_len = E.
// par(n) is parents[n] when 0 <= parents[n] < n, else 0 (the root): a valid Tree never has
// another value, and whatever the array holds no index leaves [0, n).
#pragma once
#include <stdint.h>

#include "specops/common.h"
#include "specops/prob_math.h"

namespace specops {

struct PathAcceptanceArgs {
  const float* target;  // [B, N, V], last dim contiguous
  int64_t target_sb, target_sn;
  const float* draft;  // [B, N, V] or nullptr (deterministic drafts: q = one-hot)
  int64_t draft_sb, draft_sn;
  TokenView tokens;  // [B, N] (entry 0 ignored)
  int64_t tokens_sb;
  const int32_t* parents;  // [B or 1, N]
  int64_t parents_sb;      // N, or 0 for one tree shared by the batch
  int64_t batch, nodes, vocab, num_paths;
  void* workspace;          // CUDA only: [B] x path_workspace_bytes(N) when N > kPathSmemNodes
  float* out_kappa;         // [B, P]
  float* out_expected_len;  // [B, P]
};

// The effective parent of node n >= 1 (see above); -1 for the root.
SPECOPS_HD int64_t path_parent(const PathAcceptanceArgs& a, int64_t b, int64_t n) {
  if (n == 0) return -1;
  const int64_t m = a.parents[b * a.parents_sb + n];
  return (m >= 0 && m < n) ? m : 0;
}

// alpha_n of node n >= 1 with effective parent par.
SPECOPS_HD double path_alpha(const PathAcceptanceArgs& a, int64_t b, int64_t n, int64_t par) {
  const int64_t x = a.tokens[b * a.tokens_sb + n];
  const double px =
      static_cast<double>(prob_at(a.target + b * a.target_sb + par * a.target_sn, a.vocab, x));
  if (a.draft == nullptr) return px < 1.0 ? px : 1.0;
  const double qx =
      static_cast<double>(prob_at(a.draft + b * a.draft_sb + par * a.draft_sn, a.vocab, x));
  if (qx > 0.0) {
    const double r = px / qx;
    return r < 1.0 ? r : 1.0;
  }
  return px > 0.0 ? 1.0 : 0.0;
}

// CUDA: trees of up to this many nodes keep their per-node state in shared memory, larger ones
// in the global workspace.  Per node: S, two ping-pong values (float64), two ping-pong ancestor
// links and a has-child flag (int32); rows padded to 16 bytes so every row's doubles are aligned.
constexpr int64_t kPathSmemNodes = 1024;
SPECOPS_HD int64_t path_workspace_bytes(int64_t nodes) {
  return (nodes * (3 * 8 + 3 * 4) + 15) / 16 * 16;
}

void path_acceptance_host(const PathAcceptanceArgs& args);

}  // namespace specops
