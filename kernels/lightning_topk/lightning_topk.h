// File: kernels/lightning_topk/lightning_topk.h — Lightning top-k (issue 6, target T1):
// per row of indexer scores, the k largest valid entries, written as (optionally
// page-translated) indices, best first.
//
// Contract (CPU and CUDA identical, compared exactly by the tests):
//   - row b holds scores[b * row_stride + i] for i < len_b = clamp(lengths[b], 0, row_stride);
//     entries at i >= len_b are never read;
//   - out[b * k + j], j < min(k, valid_b), is the index of the j-th best entry, where
//     "better" is (value greater) or (value equal and index lower); -0.0 == +0.0;
//     NaN is never selected (valid_b counts the non-NaN entries); -inf can be;
//   - out[b * k + j] = -1 for j >= min(k, valid_b) (short rows are padded);
//   - with a page table, each selected logical index i is written as
//       page_table[b * page_table_stride + (i >> page_bits)] << page_bits | (i & (2^page_bits - 1)).
// The CUDA version reads `lengths` on the device and picks its path per row there
// (trivial copy for len <= k, else radix select), so it can be captured in a CUDA graph.
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart {

constexpr int64_t k_lightning_topk_max_k = 2048;

struct lightning_topk_params {
  const float* scores = nullptr;     // [batch, row_stride] fp32
  const int32_t* lengths = nullptr;  // [batch] valid length per row; null = every row is row_stride long
  const int32_t* page_table =
      nullptr;             // [batch, page_table_stride] physical page ids, or null (logical indices out)
  int32_t* out = nullptr;  // [batch, k] selected indices, best first, -1 padded
  int64_t batch = 0;       // rows
  int64_t row_stride = 0;  // elements between rows; also the largest allowed length (< 2^31)
  int64_t k = 0;           // 1 <= k <= k_lightning_topk_max_k
  int64_t page_table_stride = 0;  // elements between page-table rows (max pages per row)
  int32_t page_bits = 0;          // log2(page size in entries), 0..30; used only with page_table
};

/// Host pointers; the reference (kernels/indexer topk_cpu per row, lowest-index ties).
status lightning_topk_cpu(const lightning_topk_params& p);

}  // namespace hart

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {
/// Same contract as lightning_topk_cpu with device pointers; no host synchronisation,
/// no allocation (graph-capturable). Radix select, one thread-block cluster per row.
status lightning_topk_cuda(const lightning_topk_params& p, CUstream_st* stream);
}  // namespace hart
#endif
