// indexer (Lightning Indexer scores, the engine's paged form): a pass's tokens
// scored straight from a paged key store (shuffled pages, a key offset and a
// gap in each page, ragged lengths) vs indexer_score_cpu per token on the
// same keys, bit for bit (the kernel sums each dot in the CPU's order; the
// unit test in kernels/indexer/indexer_test.cpp pins the same rule); scores
// past a token's length untouched. All-zero keys (the exact ReLU zeros the
// top-k's tie rule decides) and a key holding a NaN are among them.
#include "kernels/indexer/indexer.h"
#include "kernels/testing/op_check_util.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hart::op_check_detail {
namespace {

constexpr float k_untouched = 4321.0f;

status run_case(std::mt19937& rng, int64_t n_heads, int64_t head_dim, int64_t page_size,
                const std::vector<int32_t>& lengths, std::vector<op_check_line>& lines) {
  const int64_t rate = 4, per_page = page_size / rate, key_off = 8;
  const int64_t page_floats = key_off + per_page * head_dim + 4;
  const int64_t T = int64_t(lengths.size());
  const int64_t max_keys = *std::max_element(lengths.begin(), lengths.end()), stride = max_keys + 3;
  const int64_t pages_per_token = (max_keys + per_page - 1) / per_page, n_pages = pages_per_token + 2;
  auto store = normal(rng, size_t(n_pages * page_floats), 1.0f);
  for (int64_t pg = 0; pg < n_pages; ++pg) {  // key 0 of every page all zero; one NaN key
    std::fill_n(store.begin() + pg * page_floats + key_off, head_dim, 0.0f);
  }
  store[size_t(key_off + head_dim)] = NAN;
  std::vector<int32_t> pages, page_base, order(static_cast<size_t>(n_pages));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(order.begin(), order.end(), rng);
    page_base.push_back(int32_t(pages.size()));
    pages.insert(pages.end(), order.begin(), order.begin() + (lengths[size_t(t)] + per_page - 1) / per_page);
  }
  const auto q = normal(rng, size_t(T * n_heads * head_dim), 1.0f), w = normal(rng, size_t(T * n_heads), 1.0f);
  const float scale = 1.0f / std::sqrt(float(head_dim));
  std::vector<float> want(size_t(T * stride), k_untouched), got;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> keys;
    for (int64_t i = 0; i < lengths[size_t(t)]; ++i) {
      const int64_t pos = i * rate;
      const float* k = store.data() + pages[size_t(page_base[size_t(t)] + pos / page_size)] * page_floats + key_off +
                       pos % page_size / rate * head_dim;
      keys.insert(keys.end(), k, k + head_dim);
    }
    if (lengths[size_t(t)] == 0) continue;
    HART_RETURN_IF_ERROR(indexer_score_cpu({q.data() + t * n_heads * head_dim, w.data() + t * n_heads, keys.data(),
                                            want.data() + t * stride, n_heads, head_dim, lengths[size_t(t)], scale}));
  }
  dev<float> d_q(q), d_w(w), d_store(store), d_score(std::vector<float>(want.size(), k_untouched));
  dev<int32_t> d_len(lengths), d_base(page_base), d_pages(pages);
  HART_RETURN_IF_ERROR(d_score.ok());
  indexer_score_paged_params p;
  p.q = d_q.get();
  p.w = d_w.get();
  p.keys = d_store.get();
  p.lengths = d_len.get();
  p.page_base = d_base.get();
  p.pages = d_pages.get();
  p.score = d_score.get();
  p.n_tokens = T;
  p.n_heads = n_heads;
  p.head_dim = head_dim;
  p.max_keys = max_keys;
  p.score_stride = stride;
  p.rate = rate;
  p.page_size = page_size;
  p.page_floats = page_floats;
  p.key_off = key_off;
  p.softmax_scale = scale;
  HART_RETURN_IF_ERROR(indexer_score_paged_cuda(p, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("indexer_score_paged", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_score.to_host(got));
  lines.push_back(compare_bits("indexer_score_paged",
                               "heads=" + std::to_string(n_heads) + " head_dim=" + std::to_string(head_dim) +
                                   " tokens=" + std::to_string(T) + " keys<=" + std::to_string(max_keys),
                               got, want));
  return {};
}

}  // namespace

status check_indexer(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "indexer");
  // V4: 64 heads x 128 over the C4 keys of a 16K context (pages of 256 positions), ragged tokens;
  // odd: 3 heads x 33 over small pages.
  HART_RETURN_IF_ERROR(run_case(rng, 64, 128, 256, {4096, 1, 0, 2500, 4095}, lines));
  HART_RETURN_IF_ERROR(run_case(rng, 3, 33, 16, {0, 1, 5, 37, 9, 40}, lines));
  return {};
}

}  // namespace hart::op_check_detail
