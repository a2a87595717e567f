// indexer (Lightning Indexer scores, the engine's paged form): a pass's tokens
// scored straight from a paged key store (shuffled pages, a key offset and a
// gap in each page, ragged lengths) vs indexer_score_cpu per token on the
// same keys, bit for bit (the kernel sums each dot in the CPU's order; the
// unit test in kernels/indexer/indexer_test.cpp pins the same rule); scores
// past a token's length untouched. All-zero keys (the exact ReLU zeros the
// top-k's tie rule decides) and a key holding a NaN are among them. bf16
// (indexer_score_paged_params::bf16, the GPU engine's fp8 mode): softmax_scale
// 1 with the score scale folded into bf16 head weights, as index_topk calls it;
// bitwise too (indexer_test's cuda_paged_bf16_v4_shapes_match_cpu: the same
// fp32 operations and bf16 roundings in the same order), once on the engine's
// inputs (q and keys Hadamard-rotated and FP4-QDQ'd as bf16) and once on
// normal ones, whose dots are inexact and so check the order itself.
#include "kernels/indexer/indexer.h"
#include "kernels/quant/quant.h"
#include "kernels/testing/op_check_util.h"
#include "runtime/core/codecs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hart::op_check_detail {
namespace {

constexpr float k_untouched = 4321.0f;

// The engine's fp8 indexer inputs (gpu_attention.cpp's hadamard_fp4, the
// compressor's indexer keys): rounded to bf16, Hadamard-rotated, rounded again,
// FP4-QDQ'd in blocks of 32.
status fp4_row(float* row, int64_t hd) {
  for (int64_t d = 0; d < hd; ++d) row[d] = round_to_bf16(row[d]);
  HART_RETURN_IF_ERROR(hadamard_transform(row, hd, 1.0f / std::sqrt(float(hd))));
  for (int64_t d = 0; d < hd; ++d) row[d] = round_to_bf16(row[d]);
  return fp4_act_qdq(row, hd, std::min<int64_t>(32, hd));
}

// bf16: the flag, softmax_scale 1 and the bf16 head weights with hd^-0.5 folded
// in (index_topk); `engine_inputs` also gives q and the keys the engine's FP4 form.
status run_case(std::mt19937& rng, int64_t n_heads, int64_t head_dim, int64_t page_size,
                const std::vector<int32_t>& lengths, bool bf16, bool engine_inputs,
                std::vector<op_check_line>& lines) {
  const int64_t rate = 4, per_page = page_size / rate, key_off = 8;
  const int64_t page_floats = key_off + per_page * head_dim + 4;
  const int64_t T = int64_t(lengths.size());
  const int64_t max_keys = *std::max_element(lengths.begin(), lengths.end()), stride = max_keys + 3;
  const int64_t pages_per_token = (max_keys + per_page - 1) / per_page, n_pages = pages_per_token + 2;
  auto store = normal(rng, size_t(n_pages * page_floats), 1.0f);
  for (int64_t pg = 0; engine_inputs && pg < n_pages; ++pg) {
    for (int64_t i = 0; i < per_page; ++i) {
      HART_RETURN_IF_ERROR(fp4_row(store.data() + pg * page_floats + key_off + i * head_dim, head_dim));
    }
  }
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
  auto q = normal(rng, size_t(T * n_heads * head_dim), 1.0f), w = normal(rng, size_t(T * n_heads), 1.0f);
  for (int64_t r = 0; engine_inputs && r < T * n_heads; ++r) {
    HART_RETURN_IF_ERROR(fp4_row(q.data() + r * head_dim, head_dim));
  }
  if (bf16) {  // the engine's weights: weights_proj's bf16 output times hd^-0.5 · n_heads^-0.5, rounded
    const float wscale = float(std::pow(double(head_dim), -0.5) * std::pow(double(n_heads), -0.5));
    for (float& v : w) v = round_to_bf16(round_to_bf16(v) * wscale);
  }
  const float scale = bf16 ? 1.0f : 1.0f / std::sqrt(float(head_dim));
  std::vector<float> want(size_t(T * stride), k_untouched), got;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> keys;
    for (int64_t i = 0; i < lengths[size_t(t)]; ++i) {
      const int64_t pos = i * rate;
      const float* k = store.data() + pages[size_t(page_base[size_t(t)] + pos / page_size)] * page_floats +
                       key_off + pos % page_size / rate * head_dim;
      keys.insert(keys.end(), k, k + head_dim);
    }
    if (lengths[size_t(t)] == 0) continue;
    HART_RETURN_IF_ERROR(
        indexer_score_cpu({q.data() + t * n_heads * head_dim, w.data() + t * n_heads, keys.data(),
                           want.data() + t * stride, n_heads, head_dim, lengths[size_t(t)], scale, bf16}));
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
  p.bf16 = bf16;
  HART_RETURN_IF_ERROR(indexer_score_paged_cuda(p, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("indexer_score_paged", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_score.to_host(got));
  lines.push_back(compare_bits("indexer_score_paged",
                               "heads=" + std::to_string(n_heads) + " head_dim=" + std::to_string(head_dim) +
                                   " tokens=" + std::to_string(T) + " keys<=" + std::to_string(max_keys) +
                                   (engine_inputs ? " fp4 inputs" : "") + (bf16 ? " bf16" : ""),
                               got, want));
  return {};
}

}  // namespace

status check_indexer(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "indexer");
  // V4: 64 heads x 128 over the C4 keys of a 16K context (pages of 256 positions), ragged tokens;
  // odd: 3 heads x 33 over small pages.
  HART_RETURN_IF_ERROR(run_case(rng, 64, 128, 256, {4096, 1, 0, 2500, 4095}, false, false, lines));
  HART_RETURN_IF_ERROR(run_case(rng, 3, 33, 16, {0, 1, 5, 37, 9, 40}, false, false, lines));
  // bf16 (the fp8 engine): the V4 pass on the engine's FP4 inputs and on normal ones; the odd shape.
  HART_RETURN_IF_ERROR(run_case(rng, 64, 128, 256, {4096, 1, 0, 2500, 4095}, true, true, lines));
  HART_RETURN_IF_ERROR(run_case(rng, 64, 128, 256, {4100, 1, 2, 1000}, true, false, lines));
  HART_RETURN_IF_ERROR(run_case(rng, 3, 33, 16, {0, 1, 5, 37, 9, 40}, true, false, lines));
  return {};
}

}  // namespace hart::op_check_detail
