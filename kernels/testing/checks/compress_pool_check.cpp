// compress_pool (the compressor's gated softmax pooling): CUDA vs CPU within
// 2e-6·Σ_j w_j|kv_j[ch]| (kernels/compress_pool/compress_pool_test.cpp: the same
// fp32 operations in the same order per channel except expf, 2 ulp on the
// device vs 1 in glibc, so each weight moves by ~3 ulp relative). Candidates
// live in one device buffer in reverse order with gaps; only the row pointers
// locate them. Dead (-inf gate) candidates carry NaN / inf kv that must not leak.
#include "kernels/compress_pool/compress_pool.h"
#include "kernels/testing/op_check_util.h"

#include <algorithm>
#include <cmath>

namespace hart::op_check_detail {
namespace {

// Σ_j w_j |kv_j[ch]| with w the softmax over the live (finite-gate) candidates, in double.
std::vector<double> magnitude(const std::vector<float>& kv, const std::vector<float>& gate, int64_t n_cand,
                              int64_t dim) {
  std::vector<double> mag(dim, 0.0);
  for (int64_t ch = 0; ch < dim; ++ch) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < n_cand; ++j) {
      if (gate[j * dim + ch] != -INFINITY) mx = std::max(mx, double(gate[j * dim + ch]));
    }
    if (mx == -INFINITY) continue;
    double z = 0;
    for (int64_t j = 0; j < n_cand; ++j) {
      if (gate[j * dim + ch] != -INFINITY) z += std::exp(double(gate[j * dim + ch]) - mx);
    }
    for (int64_t j = 0; j < n_cand; ++j) {
      if (gate[j * dim + ch] == -INFINITY) continue;
      mag[ch] += std::exp(double(gate[j * dim + ch]) - mx) / z * std::fabs(double(kv[j * dim + ch]));
    }
  }
  return mag;
}

status run_case(std::mt19937& rng, int64_t n_cand, int64_t dim, bool dead, const char* what,
                std::vector<op_check_line>& lines) {
  auto kv = normal(rng, n_cand * dim, 1.0f), gate = normal(rng, n_cand * dim, 3.0f);  // [dim, n_cand]
  if (dead) {  // every 5th channel dead in all candidates (pools to 0), else 30% dead
    std::bernoulli_distribution p(0.3);
    for (int64_t j = 0; j < n_cand; ++j) {
      for (int64_t ch = 0; ch < dim; ++ch) {
        if (ch % 5 != 0 && !p(rng)) continue;
        gate[j * dim + ch] = -INFINITY;
        kv[j * dim + ch] = ch % 2 ? NAN : INFINITY;
      }
    }
  }
  std::vector<const float*> kv_ptr(n_cand), gate_ptr(n_cand);
  for (int64_t j = 0; j < n_cand; ++j) {
    kv_ptr[j] = kv.data() + j * dim;
    gate_ptr[j] = gate.data() + j * dim;
  }
  std::vector<float> cpu(dim), gpu;
  HART_RETURN_IF_ERROR(compress_pool_cpu({kv_ptr.data(), gate_ptr.data(), cpu.data(), n_cand, dim}));
  // device: candidate j's kv at slot n_cand-1-j, its gate at 2·n_cand-1-j, rows pitch dim + 7
  const int64_t pitch = dim + 7;
  std::vector<float> rows(2 * n_cand * pitch, NAN);
  for (int64_t j = 0; j < n_cand; ++j) {
    std::copy(kv.begin() + j * dim, kv.begin() + (j + 1) * dim, rows.begin() + (n_cand - 1 - j) * pitch);
    std::copy(gate.begin() + j * dim, gate.begin() + (j + 1) * dim,
              rows.begin() + (2 * n_cand - 1 - j) * pitch);
  }
  dev<float> d_rows(rows), d_out(std::vector<float>(dim, NAN));
  HART_RETURN_IF_ERROR(d_rows.ok());
  for (int64_t j = 0; j < n_cand; ++j) {
    kv_ptr[j] = d_rows.get() + (n_cand - 1 - j) * pitch;
    gate_ptr[j] = d_rows.get() + (2 * n_cand - 1 - j) * pitch;
  }
  dev<const float*> d_kv(kv_ptr), d_gate(gate_ptr);
  HART_RETURN_IF_ERROR(d_out.ok());
  HART_RETURN_IF_ERROR(compress_pool_cuda({d_kv.get(), d_gate.get(), d_out.get(), n_cand, dim}, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("compress_pool", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_out.to_host(gpu));
  lines.push_back(
      compare("compress_pool",
              std::string(what) + " n_cand=" + std::to_string(n_cand) + " dim=" + std::to_string(dim), gpu,
              std::vector<double>(cpu.begin(), cpu.end()), magnitude(kv, gate, n_cand, dim), 2e-6, 0.0,
              "2e-06 * sum_j w_j|kv_j|"));
  return {};
}

}  // namespace

status check_compress_pool(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "compress_pool");
  // V4: CSA (ratio 4, overlapping: 8 candidates) of the 512-dim KV and of the
  // 128-dim indexer keys; HCA (ratio 128) of the KV; odd: 19 x 257 with dead candidates
  HART_RETURN_IF_ERROR(run_case(rng, 8, 512, false, "csa_kv", lines));
  HART_RETURN_IF_ERROR(run_case(rng, 8, 128, false, "csa_index", lines));
  HART_RETURN_IF_ERROR(run_case(rng, 128, 512, false, "hca_kv", lines));
  HART_RETURN_IF_ERROR(run_case(rng, 19, 257, true, "dead", lines));
  return {};
}

}  // namespace hart::op_check_detail
