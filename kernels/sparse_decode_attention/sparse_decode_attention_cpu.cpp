#include "kernels/sparse_attention/sparse_attention.h"
#include "kernels/sparse_decode_attention/sparse_decode_attention.h"
#include "kernels/sparse_decode_attention/sparse_decode_attention_split.h"
#include "runtime/core/codecs.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace hart {

size_t sparse_decode_attention_workspace_bytes(int64_t n_queries, int64_t n_heads, int64_t n_idx0,
                                               int64_t n_idx1) {
  const int64_t splits = sda_n_splits(n_idx0 + n_idx1);
  // Per (query, split, head): 512 partial outputs + running max + sum.
  return size_t(n_queries * splits * n_heads) * (kv_entry_dim + 2) * sizeof(float) +
         sda_chunk_max_bytes(n_queries, n_heads, n_idx0 + n_idx1);
}

status sparse_decode_attention_validate(const sparse_decode_attention_params& p) {
  if (!p.q == !p.q_f32 || !p.out == !p.out_f32)
    return invalid_argument(
        "sparse_decode_attention: need exactly one of q / q_f32 and one of out / out_f32");
  if (!p.sink) return invalid_argument("sparse_decode_attention: null sink");
  if (p.n_queries < 0 || p.n_idx0 < 0 || p.n_idx1 < 0)
    return invalid_argument("sparse_decode_attention: negative size");
  if (p.n_heads <= 0 || p.n_heads % 16)
    return invalid_argument("sparse_decode_attention: n_heads %lld is not a positive multiple of 16",
                            (long long)p.n_heads);
  if (p.n_idx0 + p.n_idx1 == 0) return invalid_argument("sparse_decode_attention: no entry lists");
  if (p.idx_stride && (p.idx_stride < p.n_idx0 || p.idx_stride < p.n_idx1))
    return invalid_argument("sparse_decode_attention: idx_stride %lld below a list's length",
                            (long long)p.idx_stride);
  if (p.n_idx0 && (!p.idx0 || !p.pool0.base))
    return invalid_argument("sparse_decode_attention: null idx0 / pool0");
  if (p.n_idx1 && (!p.idx1 || !p.pool1.base))
    return invalid_argument("sparse_decode_attention: null idx1 / pool1");
  for (const kv_entry_pool* pool : {&p.pool0, &p.pool1}) {
    if (pool->entries_per_page <= 0 || pool->entries_per_page > INT32_MAX ||
        pool->page_bytes < pool->entries_per_page * kv_entry_bytes)
      return invalid_argument("sparse_decode_attention: page_bytes %lld < entries_per_page %lld x %lld",
                              (long long)pool->page_bytes, (long long)pool->entries_per_page,
                              (long long)kv_entry_bytes);
  }
  return {};
}

status sparse_decode_attention_cpu(const sparse_decode_attention_params& p) {
  HART_RETURN_IF_ERROR(sparse_decode_attention_validate(p));
  const int64_t H = p.n_heads, D = kv_entry_dim;
  std::vector<float> q(size_t(H * D)), o(size_t(H * D));
  std::vector<std::vector<float>> rows;
  std::vector<int64_t> slot_rows;  // per slot: its row of `rows`; -1 a masked slot (bf16 keeps them)
  std::vector<const float*> kv;
  for (int64_t t = 0; t < p.n_queries; ++t) {
    if (p.q) {
      bf16_to_f32(p.q + t * H * D, q.data(), H * D);
    } else {
      for (int64_t i = 0; i < H * D; ++i) q[i] = round_to_bf16(p.q_f32[t * H * D + i]);
    }
    rows.clear();
    slot_rows.clear();
    auto gather = [&](const kv_entry_pool& pool, const int32_t* idx, int64_t n) {
      const int32_t* list = idx + t * (p.idx_stride ? p.idx_stride : n);
      for (int64_t j = 0; j < n; ++j) {
        if (list[j] < 0) {
          if (p.bf16) slot_rows.push_back(-1);
          continue;
        }
        rows.emplace_back(size_t(D));
        kv_entry_decode(kv_entry_at(pool, list[j]), rows.back().data());
        slot_rows.push_back(int64_t(rows.size()) - 1);
      }
    };
    gather(p.pool0, p.idx0, p.n_idx0);
    gather(p.pool1, p.idx1, p.n_idx1);
    kv.clear();
    for (int64_t r : slot_rows) kv.push_back(r < 0 ? nullptr : rows[size_t(r)].data());
    HART_RETURN_IF_ERROR(sparse_attention_cpu(
        {q.data(), kv.data(), p.sink, o.data(), H, D, int64_t(kv.size()), p.scale, p.bf16}));
    if (p.out) {
      f32_to_bf16(o.data(), p.out + t * H * D, H * D);
    } else {
      std::copy(o.begin(), o.end(), p.out_f32 + t * H * D);
    }
  }
  return {};
}

}  // namespace hart
