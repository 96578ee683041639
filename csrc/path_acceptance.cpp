// C++ CPU twin of path_acceptance: one request at a time, nodes in index order (a parent always
// precedes its children), float64 products and sums in the reference's order.
#include "specops/path_acceptance.h"

#include <algorithm>
#include <vector>

namespace specops {

void path_acceptance_host(const PathAcceptanceArgs& a) {
  const int64_t n_nodes = a.nodes, P = a.num_paths;
  std::vector<double> s(n_nodes), e(n_nodes);
  std::vector<char> has_child(n_nodes);
  for (int64_t b = 0; b < a.batch; ++b) {
    s[0] = 1.0;
    e[0] = 0.0;
    std::fill(has_child.begin(), has_child.end(), 0);
    for (int64_t n = 1; n < n_nodes; ++n) {
      const int64_t par = path_parent(a, b, n);
      s[n] = s[par] * path_alpha(a, b, n, par);  // S_n = S_par * alpha_n
      e[n] = e[par] + s[n];                      // E_n = E_par + S_n
      has_child[par] = 1;
    }
    float* kappa = a.out_kappa + b * P;
    float* exp_len = a.out_expected_len + b * P;
    int64_t leaf = 0;
    for (int64_t n = 0; n < n_nodes && leaf < P; ++n) {
      if (has_child[n]) continue;
      kappa[leaf] = static_cast<float>(s[n]);
      exp_len[leaf] = static_cast<float>(e[n]);
      ++leaf;
    }
    for (; leaf < P; ++leaf) kappa[leaf] = exp_len[leaf] = 0.f;  // rows with fewer leaves
  }
}

}  // namespace specops
