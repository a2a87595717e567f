// indexer (Lightning Indexer scores): CUDA vs CPU within
// 2·(head_dim + n_heads + 8)·2^-24 · Σ_h |w_h|·scale·Σ_d |q_hd·k_d| per key
// (kernels/indexer/indexer_test.cpp: both sides sum each dot in fp32 in
// different orders, each within γ_head_dim of Σ|q·k|, the head sum adds
// γ_n_heads). A key holding a NaN must score the same on both sides exactly
// (fmax(NaN, 0) = 0), and so must all-zero keys (the exact ReLU zeros the top-k's
// tie rule decides).
#include "kernels/indexer/indexer.h"
#include "kernels/testing/op_check_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace hart::op_check_detail {
namespace {

status run_case(std::mt19937& rng, int64_t n_heads, int64_t head_dim, int64_t n_keys,
                std::vector<op_check_line>& lines) {
  const auto q = normal(rng, n_heads * head_dim, 1.0f), w = normal(rng, n_heads, 1.0f);
  auto keys = normal(rng, n_keys * head_dim, 1.0f);  // [head_dim, n_keys]
  keys[(n_keys - 1) * head_dim] = NAN;
  // key 0 and every 97th all zero: every head dot is 0, the score an exact 0 (mag 0)
  for (int64_t s = 0; s < n_keys - 1; s += 97)
    std::fill(keys.begin() + s * head_dim, keys.begin() + (s + 1) * head_dim, 0.0f);
  const float scale = 1.0f / std::sqrt(float(head_dim));
  std::vector<float> cpu(n_keys), gpu;
  HART_RETURN_IF_ERROR(
      indexer_score_cpu({q.data(), w.data(), keys.data(), cpu.data(), n_heads, head_dim, n_keys, scale}));
  dev<float> d_q(q), d_w(w), d_keys(keys), d_score(std::vector<float>(n_keys, NAN));
  HART_RETURN_IF_ERROR(d_score.ok());
  HART_RETURN_IF_ERROR(indexer_score_cuda(
      {d_q.get(), d_w.get(), d_keys.get(), d_score.get(), n_heads, head_dim, n_keys, scale}, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("indexer_score", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_score.to_host(gpu));
  // per key: Σ_h |w_h|·scale·Σ_d |q_hd·k_sd| (0 for the NaN key: exact)
  std::vector<double> mag(n_keys, 0.0);
  for (int64_t s = 0; s < n_keys - 1; ++s) {
    const float* k = keys.data() + s * head_dim;
    for (int64_t h = 0; h < n_heads; ++h) {
      double dot_mag = 0;
      for (int64_t d = 0; d < head_dim; ++d) dot_mag += std::fabs(double(q[h * head_dim + d]) * k[d]);
      mag[s] += std::fabs(double(w[h])) * scale * dot_mag;
    }
  }
  const double rtol = 2.0 * double(head_dim + n_heads + 8) * std::ldexp(1.0, -24);
  char tol[64];
  std::snprintf(tol, sizeof tol, "%.2g * sum_h|w_h|*scale*sum|q*k|", rtol);
  lines.push_back(compare("indexer_score",
                          "heads=" + std::to_string(n_heads) + " head_dim=" + std::to_string(head_dim) +
                              " keys=" + std::to_string(n_keys),
                          gpu, std::vector<double>(cpu.begin(), cpu.end()), mag, rtol, 0.0, tol));
  return {};
}

}  // namespace

status check_indexer(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "indexer");
  // V4: 64 heads x 128 over the C4 keys of a 64K context; odd: 3 heads x 33 over 1000 keys
  HART_RETURN_IF_ERROR(run_case(rng, 64, 128, 16384, lines));
  HART_RETURN_IF_ERROR(run_case(rng, 3, 33, 1000, lines));
  return {};
}

}  // namespace hart::op_check_detail
