// lightning_topk_cpu against an independent brute force (std::sort by (value desc,
// index asc), NaN dropped, -1 padded, page-translated) on fresh random rows and on the
// adversarial cases of lightning_topk_cases.h: all equal, a few-ulp range, ±inf, NaN,
// signed zeros, length < k, length 0, k = 1 and 2048, page tables, odd strides.
// Under HART_CUDA, lightning_topk_cuda must reproduce the CPU output exactly (same
// indices in the same order) with the output poisoned (0x7f bytes) before each run.
#include "kernels/lightning_topk/lightning_topk.h"

#include "kernels/lightning_topk/lightning_topk_cases.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#ifdef HART_CUDA
#include <cuda_runtime.h>
#endif

namespace hart {
namespace {

// env: HART_TEST_SEED — replays a run with the seed printed by SCOPED_TRACE.
uint32_t test_seed() {
  if (const char* s = std::getenv("HART_TEST_SEED"))
    return static_cast<uint32_t>(std::strtoul(s, nullptr, 10));
  return std::random_device{}();
}

std::vector<int32_t> run_cpu(const lt_cases::lt_case& c) {
  std::vector<int32_t> out(size_t(c.batch * c.k));
  std::memset(out.data(), 0x7f, out.size() * sizeof(int32_t));
  const lightning_topk_params p =
      c.params(c.scores.data() + c.scores_offset, c.lengths.data(), c.page_table.data(), out.data());
  const status st = lightning_topk_cpu(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

::testing::AssertionResult same(const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                                int64_t k) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i])
      return ::testing::AssertionFailure() << "row " << int64_t(i) / k << " slot " << int64_t(i) % k
                                           << ": got " << got[i] << " want " << want[i];
  }
  return ::testing::AssertionSuccess();
}

TEST(LightningTopkCpu, MatchesBruteForceOnEvalCases) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (const lt_cases::lt_case& c : lt_cases::eval_cases(seed)) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(same(run_cpu(c), lt_cases::brute_force(c), c.k));
  }
}

TEST(LightningTopkCpu, AllEqualTakesLowestIndices) {
  lt_cases::lt_case c = lt_cases::make("eq", 1, 1000, 8);
  std::fill(c.scores.begin(), c.scores.end(), -2.f);
  const std::vector<int32_t> out = run_cpu(c);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(out[j], j);
}

TEST(LightningTopkCpu, ShortRowPadsAndTranslates) {
  lt_cases::lt_case c = lt_cases::make("short", 1, 8, 4);
  c.scores = {0.f, 5.f, std::numeric_limits<float>::quiet_NaN(), 3.f, 0, 0, 0, 0};
  c.lengths = {4};
  c.page_bits = 1;
  c.pt_stride = 4;
  c.page_table = {10, 20, 30, 40};
  // logical best first: 1 (5), 3 (3), 0 (0); NaN dropped; then -1.
  // physical: 1 -> page 0 -> 10<<1|1 = 21; 3 -> page 1 -> 20<<1|1 = 41; 0 -> 10<<1|0 = 20.
  const std::vector<int32_t> want = {21, 41, 20, -1};
  EXPECT_TRUE(same(run_cpu(c), want, 4));
}

TEST(LightningTopkCpu, RejectsBadK) {
  lt_cases::lt_case c = lt_cases::make("bad", 1, 8, 0);
  std::vector<int32_t> out(8);
  EXPECT_FALSE(lightning_topk_cpu(c.params(c.scores.data(), c.lengths.data(), nullptr, out.data())).ok());
  c.k = 4096;
  EXPECT_FALSE(lightning_topk_cpu(c.params(c.scores.data(), c.lengths.data(), nullptr, out.data())).ok());
}

#ifdef HART_CUDA
#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

TEST(LightningTopkCuda, MatchesCpuExactly) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) GTEST_SKIP() << "no CUDA device";
  const uint32_t seed = test_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (const lt_cases::lt_case& c : lt_cases::eval_cases(seed)) {
    SCOPED_TRACE(c.name);
    const std::vector<int32_t> want = run_cpu(c);
    float* d_s = nullptr;
    int32_t *d_len = nullptr, *d_pt = nullptr, *d_out = nullptr;
    const size_t n_out = size_t(c.batch * c.k);
    CUDA_OK(cudaMalloc(&d_s, c.scores.size() * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_len, c.lengths.size() * sizeof(int32_t)));
    CUDA_OK(cudaMalloc(&d_pt, (c.page_table.size() + 1) * sizeof(int32_t)));
    CUDA_OK(cudaMalloc(&d_out, n_out * sizeof(int32_t)));
    CUDA_OK(cudaMemcpy(d_s, c.scores.data(), c.scores.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_len, c.lengths.data(), c.lengths.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    if (!c.page_table.empty()) {
      CUDA_OK(cudaMemcpy(d_pt, c.page_table.data(), c.page_table.size() * sizeof(int32_t),
                         cudaMemcpyHostToDevice));
    }
    for (int rep = 0; rep < 2; ++rep) {
      CUDA_OK(cudaMemset(d_out, 0x7f, n_out * sizeof(int32_t)));
      const status st = lightning_topk_cuda(c.params(d_s + c.scores_offset, d_len, d_pt, d_out), nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<int32_t> got(n_out);
      CUDA_OK(cudaMemcpy(got.data(), d_out, n_out * sizeof(int32_t), cudaMemcpyDeviceToHost));
      EXPECT_TRUE(same(got, want, c.k)) << "rep " << rep;
    }
    cudaFree(d_s);
    cudaFree(d_len);
    cudaFree(d_pt);
    cudaFree(d_out);
  }
}
#endif

}  // namespace
}  // namespace hart
