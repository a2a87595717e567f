// CUDA parity of the quant ops (kernels/quant/quant.cu): bit-exact against the
// CPU reference on fresh random and adversarial inputs; skipped without a device.
#include "kernels/quant/quant.h"
#include "kernels/quant/quant_test_util.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/op_test_util.h"
#include "runtime/core/codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace hart {
namespace {

using namespace quant_testing;

// -- CUDA parity: bit-exact ---------------------------------------------------------

#ifdef HART_CUDA

// Every CUDA quantizer must reproduce the CPU bits exactly (tolerance 0): the
// codecs are integer ports, scales are powers of two, x / s and q * s are single
// IEEE roundings and the Hadamard runs the same fp64 butterflies. The one
// allowance: two NaNs compare equal whatever their payload (x86 and the GPU
// produce different default NaN bits for 0 * inf).

using testing::cuda_synced;
using testing::device_vec;
using testing::k_sentinel;

constexpr size_t k_guard = 37;  // floats (or bytes) of sentinel on each side of every output

::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  int64_t n_bad = 0;
  std::ostringstream os;
  os << std::setprecision(9);
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = (std::isnan(got[i]) && std::isnan(want[i])) || bits_of(got[i]) == bits_of(want[i]);
    if (!ok && n_bad++ < 8) os << "\n  [" << i << "] got " << got[i] << " want " << want[i];
  }
  if (n_bad) return ::testing::AssertionFailure() << n_bad << " of " << got.size() << " differ:" << os.str();
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i])
      return ::testing::AssertionFailure()
             << "byte " << i << ": got " << int(got[i]) << " want " << int(want[i]);
  }
  return ::testing::AssertionSuccess();
}

// v inside k_guard sentinels on both sides (floats: k_sentinel; bytes: 0xa5)
std::vector<float> with_guards(const std::vector<float>& v) {
  std::vector<float> g(v.size() + 2 * k_guard, k_sentinel);
  std::copy(v.begin(), v.end(), g.begin() + k_guard);
  return g;
}
std::vector<uint8_t> byte_guards(size_t n) {
  return std::vector<uint8_t>(n + 2 * k_guard, 0xa5);
}

// Strips the guards after checking them.
template <class T>
std::vector<T> body_of(const std::vector<T>& g, T sentinel) {
  for (size_t i = 0; i < k_guard; ++i) {
    EXPECT_EQ(bits_of(float(g[i])), bits_of(float(sentinel))) << "guard before body clobbered at " << i;
    EXPECT_EQ(bits_of(float(g[g.size() - 1 - i])), bits_of(float(sentinel))) << "guard after body clobbered";
  }
  return std::vector<T>(g.begin() + k_guard, g.end() - k_guard);
}

// Random blocks over many binades, then adversarial entries: NaN, +-inf (in
// their own blocks), +-0, subnormals, FLT_MAX, and exact midpoints of the target
// grid (ties to even) in blocks whose amax pins the scale to 1.
std::vector<float> adversarial_blocks(std::mt19937& rng, int64_t n, int64_t block,
                                      const std::vector<double>& mags, double q_max) {
  std::vector<float> x = random_blocks(rng, n, block, -40, 40);
  const int64_t n_blocks = n / block;
  std::uniform_int_distribution<int64_t> pick(0, block - 1);
  std::uniform_int_distribution<size_t> grid(0, mags.size() - 2);
  for (int64_t b = 0; b < n_blocks; ++b) {
    float* xb = x.data() + b * block;
    switch (b % 8) {
      case 1:
        xb[pick(rng)] = NAN;
        break;
      case 2:
        xb[pick(rng)] = (b & 8) ? INFINITY : -INFINITY;
        break;
      case 3:
        xb[pick(rng)] = -0.0f;
        xb[pick(rng)] = std::ldexp(1.0f, -140);
        break;
      case 4:
        xb[pick(rng)] = (b & 8) ? FLT_MAX : -FLT_MAX;
        break;
      case 5:
      case 6:
        for (int64_t i = 0; i < block; ++i) {
          const size_t c = grid(rng);
          const double mid = 0.5 * (mags[c] + mags[c + 1]);
          xb[i] = float((i & 1) ? -mid : mid);
        }
        xb[pick(rng)] = float(q_max);
        break;
      case 7:
        for (int64_t i = 0; i < block; ++i) xb[i] = 0.0f;
        break;
      default:
        break;
    }
  }
  return x;
}

struct act_case {
  int64_t n, block;
};
const act_case k_act_cases[] = {{1, 1},           {19, 19},         {38, 19},       {128, 128},
                                {448 * 7, 64},    {300 * 9, 300},   {32 * 129, 32}, {128 * 1001, 128},
                                {7168 * 3, 7168}, {512 * 7168, 128}};

TEST(quant_cuda, act_fp8_qdq_and_codes_bit_exact) {
  HART_SKIP_WITHOUT_CUDA();
  seeded s;
  SCOPED_TRACE(s.trace());
  for (const act_case& c : k_act_cases) {
    SCOPED_TRACE("n=" + std::to_string(c.n) + " block=" + std::to_string(c.block));
    const auto x = adversarial_blocks(s.rng, c.n, c.block, e4m3_mags(), 448.0);
    // QDQ in place
    auto want = x;
    ASSERT_TRUE(act_quant_fp8_qdq(want.data(), c.n, c.block).ok());
    device_vec<float> d_x(with_guards(x));
    ASSERT_TRUE(act_quant_fp8_qdq_cuda(d_x.get() + k_guard, c.n, c.block, nullptr).ok());
    ASSERT_TRUE(cuda_synced(nullptr));
    EXPECT_TRUE(same_bits(body_of(d_x.to_host(), k_sentinel), want));
    // codes + scales
    std::vector<uint8_t> q_cpu(c.n);
    std::vector<float> sc_cpu(c.n / c.block);
    ASSERT_TRUE(act_quant_fp8(x.data(), c.n, c.block, q_cpu.data(), sc_cpu.data()).ok());
    device_vec<float> d_in(x), d_sc(with_guards(std::vector<float>(c.n / c.block, k_sentinel)));
    device_vec<uint8_t> d_q(byte_guards(c.n));
    ASSERT_TRUE(
        act_quant_fp8_cuda(d_in.get(), c.n, c.block, d_q.get() + k_guard, d_sc.get() + k_guard, nullptr)
            .ok());
    ASSERT_TRUE(cuda_synced(nullptr));
    EXPECT_TRUE(same_bytes(body_of<uint8_t>(d_q.to_host(), 0xa5), q_cpu));
    EXPECT_TRUE(same_bits(body_of(d_sc.to_host(), k_sentinel), sc_cpu));
  }
}

TEST(quant_cuda, fp4_act_qdq_bit_exact) {
  HART_SKIP_WITHOUT_CUDA();
  seeded s;
  SCOPED_TRACE(s.trace());
  for (const act_case& c : k_act_cases) {
    SCOPED_TRACE("n=" + std::to_string(c.n) + " block=" + std::to_string(c.block));
    const auto x = adversarial_blocks(s.rng, c.n, c.block, e2m1_mags(), 6.0);
    auto want = x;
    ASSERT_TRUE(fp4_act_qdq(want.data(), c.n, c.block).ok());
    device_vec<float> d_x(with_guards(x));
    ASSERT_TRUE(fp4_act_qdq_cuda(d_x.get() + k_guard, c.n, c.block, nullptr).ok());
    ASSERT_TRUE(cuda_synced(nullptr));
    EXPECT_TRUE(same_bits(body_of(d_x.to_host(), k_sentinel), want));
  }
}

// The engine's indexer path: Hadamard (scale n^-0.5) then FP4 QDQ, block 32.
TEST(quant_cuda, hadamard_bit_exact_and_with_fp4) {
  HART_SKIP_WITHOUT_CUDA();
  seeded s;
  SCOPED_TRACE(s.trace());
  for (int64_t n = 1; n <= 4096; n *= 2) {
    for (int64_t rows : {int64_t(1), int64_t(3), int64_t(257)}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " rows=" + std::to_string(rows));
      const float scale = 1.0f / std::sqrt(float(n));
      const auto x = random_blocks(s.rng, rows * n, n, -30, 30);
      auto want = x;
      for (int64_t r = 0; r < rows; ++r) ASSERT_TRUE(hadamard_transform(want.data() + r * n, n, scale).ok());
      device_vec<float> d_x(with_guards(x));
      ASSERT_TRUE(hadamard_transform_cuda(d_x.get() + k_guard, rows, n, scale, nullptr).ok());
      ASSERT_TRUE(cuda_synced(nullptr));
      EXPECT_TRUE(same_bits(body_of(d_x.to_host(), k_sentinel), want));
      if (n >= 32) {
        ASSERT_TRUE(fp4_act_qdq(want.data(), rows * n, 32).ok());
        ASSERT_TRUE(fp4_act_qdq_cuda(d_x.get() + k_guard, rows * n, 32, nullptr).ok());
        ASSERT_TRUE(cuda_synced(nullptr));
        EXPECT_TRUE(same_bits(body_of(d_x.to_host(), k_sentinel), want));
      }
    }
  }
}

TEST(quant_cuda, invalid_arguments) {
  HART_SKIP_WITHOUT_CUDA();
  device_vec<float> d_x(std::vector<float>(64, 1.0f));
  device_vec<uint8_t> d_b(std::vector<uint8_t>(64, 0));
  const auto bad = [](const status& st) { return st.code() == status_code::invalid_argument; };
  EXPECT_TRUE(bad(act_quant_fp8_qdq_cuda(d_x.get(), 64, 0, nullptr)));
  EXPECT_TRUE(bad(act_quant_fp8_qdq_cuda(d_x.get(), 63, 32, nullptr)));
  EXPECT_TRUE(bad(act_quant_fp8_qdq_cuda(nullptr, 64, 32, nullptr)));
  EXPECT_TRUE(bad(act_quant_fp8_cuda(d_x.get(), 64, 32, nullptr, d_x.get(), nullptr)));
  EXPECT_TRUE(bad(fp4_act_qdq_cuda(d_x.get(), 64, -1, nullptr)));
  EXPECT_TRUE(bad(hadamard_transform_cuda(d_x.get(), 1, 48, 1.0f, nullptr)));
  EXPECT_TRUE(bad(hadamard_transform_cuda(d_x.get(), 1, 8192, 1.0f, nullptr)));
  EXPECT_TRUE(bad(hadamard_transform_cuda(d_x.get(), -1, 64, 1.0f, nullptr)));
  // empty inputs are fine and touch nothing
  EXPECT_TRUE(act_quant_fp8_qdq_cuda(d_x.get(), 0, 32, nullptr).ok());
  EXPECT_TRUE(hadamard_transform_cuda(d_x.get(), 0, 64, 1.0f, nullptr).ok());
  ASSERT_TRUE(cuda_synced(nullptr));
  for (float v : d_x.to_host()) EXPECT_EQ(v, 1.0f);
}

#endif  // HART_CUDA

}  // namespace
}  // namespace hart
