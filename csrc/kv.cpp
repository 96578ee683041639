#include "specops/kv.h"

#include <string.h>

#include <vector>

namespace specops {

void commit_kv_host(const CommitKVArgs& a) {
  std::vector<int64_t> src(a.max_moves), dst(a.max_moves);
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t cs = a.seqlens[b];
    int64_t m = 0;
    while (m < a.max_moves && commit_entry(a, b, cs, m, &src[m], &dst[m])) ++m;
    for (int64_t layer = 0; layer < a.layers; ++layer) {
      for (int kv = 0; kv < 2; ++kv) {
        char* slab = commit_slab(a, layer, kv);
        // increasing i: move i writes cs + i, later moves read cs + s_j > cs + i (kv.h)
        for (int64_t i = 0; i < m; ++i) {
          if (src[i] != dst[i]) memmove(slab + dst[i], slab + src[i], a.row_bytes);
        }
      }
    }
    a.seqlens[b] = static_cast<int32_t>(cs + m);
  }
}

}  // namespace specops
