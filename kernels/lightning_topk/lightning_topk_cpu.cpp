// Reference for lightning_topk: topk_cpu (kernels/indexer, lowest-index ties) per
// row, then the optional page-table translation. Plain loops, no tricks.
#include "kernels/indexer/indexer.h"
#include "kernels/lightning_topk/lightning_topk.h"

#include <algorithm>

namespace hart {

status lightning_topk_cpu(const lightning_topk_params& p) {
  if (p.batch < 0) return invalid_argument("lightning_topk: batch=%lld < 0", (long long)p.batch);
  if (p.k < 1 || p.k > k_lightning_topk_max_k)
    return invalid_argument("lightning_topk: k=%lld outside [1, %lld]", (long long)p.k,
                            (long long)k_lightning_topk_max_k);
  if (p.row_stride < 0 || p.row_stride >= (int64_t(1) << 31))
    return invalid_argument("lightning_topk: row_stride=%lld outside [0, 2^31)", (long long)p.row_stride);
  if (p.page_table && (p.page_bits < 0 || p.page_bits > 30))
    return invalid_argument("lightning_topk: page_bits=%d outside [0, 30]", p.page_bits);
  if (p.batch == 0) return {};
  if (!p.out || (!p.scores && p.row_stride)) return invalid_argument("lightning_topk: null scores/out");
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t len = p.lengths ? int64_t(p.lengths[b]) : p.row_stride;
    len = std::clamp<int64_t>(len, 0, p.row_stride);
    int32_t* out = p.out + b * p.k;
    topk_params tp;
    tp.values = p.scores ? p.scores + b * p.row_stride : nullptr;
    tp.indices = out;
    tp.n = len;
    tp.k = p.k;
    tp.torch_order = false;
    if (status st = topk_cpu(tp); !st.ok()) return st;
    if (!p.page_table) continue;
    const int64_t mask = (int64_t(1) << p.page_bits) - 1;
    for (int64_t j = 0; j < p.k; ++j) {
      if (out[j] < 0) continue;
      const int64_t i = out[j];
      const int64_t page = p.page_table[b * p.page_table_stride + (i >> p.page_bits)];
      out[j] = int32_t((page << p.page_bits) | (i & mask));
    }
  }
  return {};
}

}  // namespace hart
