// sparse_attention (gathered form): CUDA vs CPU on random index sets with -1
// holes and an all-empty query, within 2·(1e-5 + 2·l_err)·Σ_j p_j|kv_j[d]|
// (kernels/sparse_attention/sparse_attention_gather_test.cpp: each side within
// half of it of the exact value; l_err bounds the fp32 logit error). bf16
// (sparse_attention_gather_params::bf16, the GPU engine's fp8 mode without FP8
// KV entries; bf16-valued q and rows as there, the engine's workspace, which
// the mode ignores): the test's bf16_matches_cpu rule, each output within a
// bf16 ulp (2^-7 |o|) plus 2^-7 Σ_j p_j|kv_j[d]| (every P a bf16 ulp off) plus
// the fp32 bound, and at most 1% of outputs not bitwise equal (fp32 orders and
// expf's last bit flip a rounding only near a boundary; 0.12-0.33% measured).
#include "kernels/sparse_attention/sparse_attention.h"
#include "kernels/testing/op_check_util.h"
#include "runtime/core/codecs.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace hart::op_check_detail {

status check_sparse_attention(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "sparse_attention");
  // queries, heads, head_dim, n_idx, bf16
  const int64_t cases[][5] = {
      {3, 64, 512, 640, 0}, {4, 8, 128, 1000, 0}, {3, 64, 512, 640, 1}, {4, 8, 128, 1000, 1}};
  for (const auto& c : cases) {
    const int64_t nq = c[0], H = c[1], D = c[2], n_idx = c[3], n_entries = n_idx + 64;
    const bool bf16 = c[4] != 0;
    auto q = normal(rng, nq * H * D, 1.5f), kv = normal(rng, n_entries * D, 1.0f);
    const auto sink = normal(rng, H, 1.0f);
    if (bf16) {  // the engine's q and KV rows are bf16 values there
      for (float& x : q) x = round_to_bf16(x);
      for (float& x : kv) x = round_to_bf16(x);
    }
    std::vector<int32_t> idx(nq * n_idx);
    std::uniform_int_distribution<int32_t> pick(0, int32_t(n_entries - 1));
    std::bernoulli_distribution hole(0.25);
    for (int64_t t = 0; t < nq; ++t) {
      for (int64_t j = 0; j < n_idx; ++j) idx[t * n_idx + j] = (t == 1 || hole(rng)) ? -1 : pick(rng);
    }
    const float scale = 1.0f / std::sqrt(float(D));
    std::vector<float> cpu(nq * H * D), gpu;
    sparse_attention_gather_params hp{q.data(), kv.data(), idx.data(), sink.data(), cpu.data(), nq,
                                      H,        D,         n_idx,      n_entries,   0,          scale};
    hp.bf16 = bf16;
    HART_RETURN_IF_ERROR(sparse_attention_gather_cpu(hp));
    const size_t ws_bytes = bf16 ? sparse_attention_cuda_workspace_bytes(H, D) : 0;
    dev<float> d_q(q), d_kv(kv), d_sink(sink), d_out(std::vector<float>(cpu.size(), NAN));
    dev<float> d_ws(std::vector<float>(ws_bytes / sizeof(float), NAN));
    dev<int32_t> d_idx(idx);
    HART_RETURN_IF_ERROR(d_out.ok());
    HART_RETURN_IF_ERROR(d_ws.ok());
    sparse_attention_gather_params p{d_q.get(), d_kv.get(), d_idx.get(), d_sink.get(), d_out.get(), nq,
                                     H,         D,          n_idx,       n_entries,    0,           scale};
    p.bf16 = bf16;
    if (bf16) {  // as the engine passes it outside --deterministic
      p.workspace = d_ws.get();
      p.workspace_bytes = ws_bytes;
    }
    HART_RETURN_IF_ERROR(sparse_attention_cuda(p, nullptr));
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
    std::string shape = "queries=" + std::to_string(nq) + " heads=" + std::to_string(H) +
                        " dim=" + std::to_string(D) + " n_idx=" + std::to_string(n_idx);
    const std::vector<double> want(cpu.begin(), cpu.end());
    char tol[80];
    if (!bf16) {
      std::snprintf(tol, sizeof tol, "%.2g * sum_j p_j|kv_j|", rtol);
      lines.push_back(compare("sparse_attention", shape, gpu, want, mag, rtol, 2e-35, tol));
      continue;
    }
    // bound 2^-7·(|o| + S) + rtol·S = 2^-7·(|o| + (1 + 2^7·rtol)·S), S = Σ_j p_j|kv_j[d]|
    std::vector<double> bound(cpu.size());
    for (size_t i = 0; i < bound.size(); ++i) {
      bound[i] = std::fabs(double(cpu[i])) + (1 + 0x1p7 * rtol) * mag[i];
    }
    int64_t differ = 0;
    for (size_t i = 0; i < gpu.size() && i < cpu.size(); ++i) differ += std::memcmp(&gpu[i], &cpu[i], 4) != 0;
    std::snprintf(tol, sizeof tol, "2^-7*(|o|+S) + %.2g*S, <=1%% not bits", rtol);
    shape += " bf16 differ=" + std::to_string(differ) + "/" + std::to_string(gpu.size());
    op_check_line l = compare("sparse_attention", shape, gpu, want, bound, 0x1p-7, 2e-35, tol);
    l.pass = l.pass && differ * 100 <= int64_t(gpu.size());
    lines.push_back(l);
  }
  return {};
}

}  // namespace hart::op_check_detail
