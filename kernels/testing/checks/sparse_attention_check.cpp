// sparse_attention (gathered form): CUDA vs CPU on random index sets with -1
// holes and an all-empty query, within 2·(1e-5 + 2·l_err)·Σ_j p_j|kv_j[d]|
// (kernels/sparse_attention/sparse_attention_gather_test.cpp: each side within
// half of it of the exact value; l_err bounds the fp32 logit error).
#include <algorithm>
#include <cmath>

#include "kernels/sparse_attention/sparse_attention.h"
#include "kernels/testing/op_check_util.h"

namespace hart::op_check_detail {

status check_sparse_attention(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "sparse_attention");
  const int64_t cases[][4] = {{3, 64, 512, 640}, {4, 8, 128, 1000}};  // queries, heads, head_dim, n_idx
  for (const auto& c : cases) {
    const int64_t nq = c[0], H = c[1], D = c[2], n_idx = c[3], n_entries = n_idx + 64;
    const auto q = normal(rng, nq * H * D, 1.5f), kv = normal(rng, n_entries * D, 1.0f), sink = normal(rng, H, 1.0f);
    std::vector<int32_t> idx(nq * n_idx);
    std::uniform_int_distribution<int32_t> pick(0, int32_t(n_entries - 1));
    std::bernoulli_distribution hole(0.25);
    for (int64_t t = 0; t < nq; ++t) {
      for (int64_t j = 0; j < n_idx; ++j) idx[t * n_idx + j] = (t == 1 || hole(rng)) ? -1 : pick(rng);
    }
    const float scale = 1.0f / std::sqrt(float(D));
    std::vector<float> cpu(nq * H * D), gpu;
    HART_RETURN_IF_ERROR(sparse_attention_gather_cpu(
        {q.data(), kv.data(), idx.data(), sink.data(), cpu.data(), nq, H, D, n_idx, n_entries, 0, scale}));
    dev<float> d_q(q), d_kv(kv), d_sink(sink), d_out(std::vector<float>(cpu.size(), NAN));
    dev<int32_t> d_idx(idx);
    HART_RETURN_IF_ERROR(d_out.ok());
    HART_RETURN_IF_ERROR(sparse_attention_cuda(
        {d_q.get(), d_kv.get(), d_idx.get(), d_sink.get(), d_out.get(), nq, H, D, n_idx, n_entries, 0, scale},
        nullptr));
    HART_RETURN_IF_ERROR(cuda_status("sparse_attention", cudaDeviceSynchronize()));
    HART_RETURN_IF_ERROR(d_out.to_host(gpu));
    // per element: Σ_j p_j |kv_j[d]| in double; one relative bound from the largest logit error
    std::vector<double> mag(cpu.size(), 0.0);
    double l_err = 0;
    for (int64_t t = 0; t < nq; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const float* qh = q.data() + (t * H + h) * D;
        std::vector<double> l;
        std::vector<const float*> rows;
        double mx = sink[h];
        for (int64_t j = 0; j < n_idx; ++j) {
          if (idx[t * n_idx + j] < 0) continue;
          const float* r = kv.data() + int64_t(idx[t * n_idx + j]) * D;
          double dot = 0, m = 0;
          for (int64_t d = 0; d < D; ++d) {
            dot += double(qh[d]) * r[d];
            m += std::fabs(double(qh[d]) * r[d]);
          }
          l_err = std::max(l_err, double(D + 2) * std::ldexp(1.0, -24) * m * scale);
          rows.push_back(r);
          l.push_back(dot * scale);
          mx = std::max(mx, l.back());
        }
        double z = std::exp(double(sink[h]) - mx);
        for (double v : l) z += std::exp(v - mx);
        for (size_t j = 0; j < rows.size(); ++j) {
          const double p = std::exp(l[j] - mx) / z;
          for (int64_t d = 0; d < D; ++d) mag[(t * H + h) * D + d] += p * std::fabs(rows[j][d]);
        }
      }
    }
    const double rtol = 2 * (1e-5 + 2 * l_err);
    char tol[64];
    std::snprintf(tol, sizeof tol, "%.2g * sum_j p_j|kv_j|", rtol);
    lines.push_back(compare("sparse_attention",
                            "queries=" + std::to_string(nq) + " heads=" + std::to_string(H) + " dim=" +
                                std::to_string(D) + " n_idx=" + std::to_string(n_idx),
                            gpu, std::vector<double>(cpu.begin(), cpu.end()), mag, rtol, 2e-35, tol));
  }
  return {};
}

}  // namespace hart::op_check_detail
