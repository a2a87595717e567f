// rms_norm_cpu against a double-precision y = x / sqrt(mean(x²) + eps) [· w]
// written in this file: weighted and unweighted, in place (y == x), row strides
// larger than dim (the gaps must stay untouched). Under HART_CUDA, rms_norm_cuda
// is checked against rms_norm_cpu on the same inputs.
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"

#include "kernels/testing/op_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#ifdef HART_CUDA
#include <cuda_runtime.h>
#endif

namespace hart {
namespace {

// -- test helpers --------------------------------------------------------------

using testing::k_sentinel;  // fill of the gaps between rows; must survive
using testing::seed_trace;
using testing::test_seed;
using testing::value_close;

// got[r*stride + i] vs want[r*dim + i]: |got - want| <= rtol·|want| + atol;
// NaN/Inf must match exactly; every gap element (i >= dim) must still be k_sentinel.
::testing::AssertionResult rows_close(const std::vector<float>& got, int64_t stride, const std::vector<double>& want,
                                      int64_t n_rows, int64_t dim, double rtol, double atol) {
  int64_t n_bad = 0;
  std::ostringstream os;
  os << std::setprecision(9);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < stride; ++i) {
      const double g = got[r * stride + i];
      bool ok;
      double w = k_sentinel;
      if (i >= dim) {
        ok = got[r * stride + i] == k_sentinel;
      } else {
        w = want[r * dim + i];
        ok = value_close(g, w, atol + rtol * std::fabs(w));
      }
      if (!ok && n_bad++ < 8) os << "\n  row " << r << " [" << i << "] got " << g << " want " << w;
    }
  }
  if (n_bad) return ::testing::AssertionFailure() << n_bad << " elements differ:" << os.str();
  return ::testing::AssertionSuccess();
}

// rows of `dim` values at `stride`, gaps filled with k_sentinel
std::vector<float> random_rows(std::mt19937& rng, int64_t n_rows, int64_t dim, int64_t stride, float sigma) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n_rows * stride, k_sentinel);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < dim; ++i) v[r * stride + i] = nd(rng);
  }
  return v;
}

std::vector<double> reference(const std::vector<float>& x, int64_t stride, const float* w, int64_t n_rows,
                              int64_t dim, double eps) {
  std::vector<double> y(n_rows * dim);
  for (int64_t r = 0; r < n_rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[r * stride + i]) * double(x[r * stride + i]);
    const double inv = 1.0 / std::sqrt(ss / double(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = double(x[r * stride + i]) * inv * (w ? double(w[i]) : 1.0);
  }
  return y;
}

// A few fp32 roundings per element (the statistic, rsqrt, two products).
constexpr double k_rtol = 1e-5;
constexpr double k_atol = 1e-30;  // only matters for exact zeros

struct shape {
  int64_t n_rows, dim;
};
// 512 / 4096 / 8192 take the CUDA float4 path (contiguous), 8200 is past it.
const shape k_shapes[] = {{1, 1},   {3, 1},   {1, 3},    {19, 19}, {3, 111}, {111, 3},
                          {5, 512}, {2, 989}, {1, 4096}, {2, 8192}, {2, 8200}};

// mode: 0 = separate y, contiguous; 1 = separate y, strides > dim; 2 = in place, contiguous;
// 3 = in place, stride > dim
const char* const k_mode_name[] = {"out-of-place", "strided", "in-place", "in-place strided"};

void run_cpu_case(std::mt19937& rng, const shape& s, bool weighted, int mode) {
  SCOPED_TRACE("n_rows=" + std::to_string(s.n_rows) + " dim=" + std::to_string(s.dim) +
               " weighted=" + std::to_string(weighted) + " mode=" + k_mode_name[mode]);
  const bool in_place = mode >= 2;
  const int64_t xs = (mode == 1 || mode == 3) ? s.dim + 5 : s.dim;
  const int64_t ys = in_place ? xs : (mode == 1 ? s.dim + 3 : s.dim);
  std::uniform_real_distribution<float> ud(0.25f, 4.0f);
  const float sigma = ud(rng);
  auto x = random_rows(rng, s.n_rows, s.dim, xs, sigma);
  const auto x_in = x;
  const auto w = random_rows(rng, 1, s.dim, s.dim, 1.0f);
  std::vector<float> y(s.n_rows * ys, k_sentinel);
  rms_norm_params p;
  p.x = x.data();
  p.w = weighted ? w.data() : nullptr;
  p.y = in_place ? x.data() : y.data();
  p.n_rows = s.n_rows;
  p.dim = s.dim;
  p.x_stride = (mode == 1 || mode == 3) ? xs : 0;  // 0 = dim
  p.y_stride = (mode == 1 || mode == 3) ? ys : 0;
  p.eps = 1e-6f;
  const status st = rms_norm_cpu(p);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const auto want = reference(x_in, xs, p.w, s.n_rows, s.dim, p.eps);
  EXPECT_TRUE(rows_close(in_place ? x : y, ys, want, s.n_rows, s.dim, k_rtol, k_atol));
  if (!in_place) {
    EXPECT_EQ(0, std::memcmp(x.data(), x_in.data(), x.size() * sizeof(float))) << "x modified";
  }
}

// -- tests -----------------------------------------------------------------------

TEST(rms_norm, matches_reference_weighted_and_unweighted) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const shape& s : k_shapes) {
    for (bool weighted : {false, true}) run_cpu_case(rng, s, weighted, 0);
  }
}

TEST(rms_norm, strides_larger_than_dim) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const shape& s : k_shapes) {
    for (bool weighted : {false, true}) run_cpu_case(rng, s, weighted, 1);
  }
}

TEST(rms_norm, in_place) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const shape& s : k_shapes) {
    for (bool weighted : {false, true}) {
      run_cpu_case(rng, s, weighted, 2);
      run_cpu_case(rng, s, weighted, 3);
    }
  }
}

// eps sits inside the square root: a constant row of 1e-4 (mean square 1e-8)
// with eps 1e-6 gives 1e-4 / sqrt(1.01e-6), far from 1 (eps ignored) and from
// 1e-4 / (1e-4 + 1e-6) (eps outside the root). An all-zero row stays 0.
TEST(rms_norm, eps_inside_root_and_zero_row) {
  const int64_t dim = 19;
  std::vector<float> x(2 * dim, 1e-4f);
  for (int64_t i = dim; i < 2 * dim; ++i) x[i] = 0.0f;
  std::vector<float> y(2 * dim, k_sentinel);
  rms_norm_params p;
  p.x = x.data();
  p.y = y.data();
  p.n_rows = 2;
  p.dim = dim;
  p.eps = 1e-6f;
  ASSERT_TRUE(rms_norm_cpu(p).ok());
  const double want = 1e-4 / std::sqrt(double(1e-4f) * double(1e-4f) + double(1e-6f));
  for (int64_t i = 0; i < dim; ++i) {
    EXPECT_NEAR(y[i], want, 1e-5 * want) << "i=" << i;
    EXPECT_EQ(y[dim + i], 0.0f) << "i=" << i;
  }
}

TEST(rms_norm, zero_rows_and_bad_arguments) {
  float x[4] = {1, 2, 3, 4}, y[4] = {k_sentinel, k_sentinel, k_sentinel, k_sentinel};
  rms_norm_params p;
  p.x = x;
  p.y = y;
  p.n_rows = 0;
  p.dim = 4;
  EXPECT_TRUE(rms_norm_cpu(p).ok());
  for (float v : y) EXPECT_EQ(v, k_sentinel);
  rms_norm_params q = p;
  q.n_rows = 1;
  q.dim = 0;
  EXPECT_FALSE(rms_norm_cpu(q).ok());
  q = p;
  q.n_rows = 1;
  q.y = nullptr;
  EXPECT_FALSE(rms_norm_cpu(q).ok());
}

// -- fused RoPE ------------------------------------------------------------------

struct rope_case {
  int64_t n_rows, dim, rope_dim, rows_per_pos;
};

// Rows, a weight, positions (one per rows_per_pos rows) and V4's inverse frequencies.
struct rope_problem {
  std::vector<float> x, w, inv_freq;
  std::vector<int64_t> pos;
};

rope_problem make_rope_problem(std::mt19937& rng, const rope_case& c) {
  rope_problem pr;
  pr.x = random_rows(rng, c.n_rows, c.dim, c.dim, 2.0f);
  pr.w = random_rows(rng, 1, c.dim, c.dim, 1.0f);
  std::uniform_int_distribution<int64_t> at(0, 1 << 20);
  pr.pos.resize(size_t((c.n_rows + c.rows_per_pos - 1) / c.rows_per_pos));
  for (int64_t& v : pr.pos) v = at(rng);
  pr.inv_freq.resize(size_t(c.rope_dim / 2));
  for (size_t i = 0; i < pr.inv_freq.size(); ++i) {
    pr.inv_freq[i] = std::pow(10000.0f, -2.0f * float(i) / float(c.rope_dim));
  }
  return pr;
}

// The CPU's fused call is rms_norm_cpu, then rope_cpu on every row, bit for bit.
TEST(rms_norm, fused_rope_is_norm_then_rope) {
  std::mt19937 rng(test_seed());
  for (const rope_case c : {rope_case{3, 64, 16, 1}, rope_case{8, 512, 64, 4}, rope_case{5, 20, 20, 5}}) {
    SCOPED_TRACE("dim=" + std::to_string(c.dim) + " rope_dim=" + std::to_string(c.rope_dim));
    const rope_problem pr = make_rope_problem(rng, c);
    const auto &x = pr.x, &w = pr.w, &inv_freq = pr.inv_freq;
    const auto& pos = pr.pos;
    std::vector<float> fused(x.size()), apart(x.size());
    rms_norm_params p{x.data(), w.data(), fused.data(), c.n_rows, c.dim};
    p.rope_pos = pos.data();
    p.rope_inv_freq = inv_freq.data();
    p.rope_dim = c.rope_dim;
    p.rope_rows_per_pos = c.rows_per_pos;
    ASSERT_TRUE(rms_norm_cpu(p).ok());
    ASSERT_TRUE(rms_norm_cpu({x.data(), w.data(), apart.data(), c.n_rows, c.dim}).ok());
    ASSERT_TRUE(rope_cpu({apart.data(), pos.data(), inv_freq.data(), int64_t(pos.size()), c.rows_per_pos, c.dim,
                          c.rope_dim}).ok());
    EXPECT_EQ(0, std::memcmp(fused.data(), apart.data(), fused.size() * sizeof(float)));
  }
  rms_norm_params bad{nullptr, nullptr, nullptr, 1, 8};
  float v[8] = {};
  int64_t at = 0;
  bad.x = bad.y = v;
  bad.rope_pos = &at;
  EXPECT_EQ(rms_norm_cpu(bad).code(), status_code::invalid_argument);  // no inv_freq
  bad.rope_inv_freq = v;
  bad.rope_dim = 3;
  EXPECT_EQ(rms_norm_cpu(bad).code(), status_code::invalid_argument);  // odd
  bad.rope_dim = 10;
  EXPECT_EQ(rms_norm_cpu(bad).code(), status_code::invalid_argument);  // past dim
}

// -- CUDA parity -------------------------------------------------------------------

#ifdef HART_CUDA

#define CUDA_OK(expr)                                                              \
  do {                                                                             \
    const cudaError_t e_ = (expr);                                                 \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);         \
  } while (0)

// One layout on the device vs rms_norm_cpu on the host; relative 1e-5 (the
// device reduces the sum of squares in fp32 in a different order).
void run_cuda_case(std::mt19937& rng, cudaStream_t stream, const shape& s, bool weighted, int mode) {
  SCOPED_TRACE("n_rows=" + std::to_string(s.n_rows) + " dim=" + std::to_string(s.dim) +
               " weighted=" + std::to_string(weighted) + " mode=" + k_mode_name[mode]);
  const bool in_place = mode >= 2;
  const bool strided = mode == 1 || mode == 3;
  const int64_t xs = strided ? s.dim + 5 : s.dim;
  const int64_t ys = in_place ? xs : (strided ? s.dim + 3 : s.dim);
  const auto x = random_rows(rng, s.n_rows, s.dim, xs, 2.0f);
  const auto w = random_rows(rng, 1, s.dim, s.dim, 1.0f);

  rms_norm_params p;
  p.n_rows = s.n_rows;
  p.dim = s.dim;
  p.x_stride = strided ? xs : 0;
  p.y_stride = strided ? ys : 0;
  p.eps = 1e-6f;

  // host reference from the CPU op
  std::vector<float> y_cpu = in_place ? x : std::vector<float>(s.n_rows * ys, k_sentinel);
  p.x = in_place ? y_cpu.data() : x.data();
  p.w = weighted ? w.data() : nullptr;
  p.y = y_cpu.data();
  const status st_cpu = rms_norm_cpu(p);
  ASSERT_TRUE(st_cpu.ok()) << st_cpu.to_string();

  float *d_x = nullptr, *d_w = nullptr, *d_y = nullptr;
  CUDA_OK(cudaMalloc(&d_x, x.size() * sizeof(float)));
  CUDA_OK(cudaMalloc(&d_w, w.size() * sizeof(float)));
  CUDA_OK(cudaMemcpy(d_x, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_w, w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice));
  if (in_place) {
    d_y = d_x;
  } else {
    const std::vector<float> fill(s.n_rows * ys, k_sentinel);
    CUDA_OK(cudaMalloc(&d_y, fill.size() * sizeof(float)));
    CUDA_OK(cudaMemcpy(d_y, fill.data(), fill.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  p.x = d_x;
  p.w = weighted ? d_w : nullptr;
  p.y = d_y;
  const status st = rms_norm_cuda(p, stream);
  EXPECT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaStreamSynchronize(stream));
  std::vector<float> y_gpu(s.n_rows * ys);
  CUDA_OK(cudaMemcpy(y_gpu.data(), d_y, y_gpu.size() * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(d_x);
  cudaFree(d_w);
  if (!in_place) cudaFree(d_y);

  // the CPU result is the expectation; the gaps (k_sentinel on both sides) must survive
  std::vector<double> want(s.n_rows * s.dim);
  for (int64_t r = 0; r < s.n_rows; ++r) {
    for (int64_t i = 0; i < s.dim; ++i) want[r * s.dim + i] = y_cpu[r * ys + i];
  }
  EXPECT_TRUE(rows_close(y_gpu, ys, want, s.n_rows, s.dim, 1e-5, k_atol));
}

TEST(rms_norm, cuda_matches_cpu) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    GTEST_SKIP() << "no CUDA device";
  }
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  const shape cuda_shapes[] = {{1, 1}, {3, 19}, {19, 111}, {111, 3}, {5, 512}, {2, 989}, {3, 4096}, {1, 7168}};
  for (const shape& s : cuda_shapes) {
    for (bool weighted : {false, true}) {
      for (int mode = 0; mode < 4; ++mode) run_cuda_case(rng, stream, s, weighted, mode);
    }
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

// The device's fused call equals rms_norm_cuda then rope_cuda bit for bit, on
// the vector path (dim % 4 == 0) and the scalar one, rotations starting inside a float4.
TEST(rms_norm, cuda_fused_rope_is_norm_then_rope) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    (void)cudaGetLastError();
    GTEST_SKIP() << "no CUDA device";
  }
  std::mt19937 rng(test_seed());
  for (const rope_case c : {rope_case{6, 512, 64, 3}, rope_case{4, 512, 510, 1}, rope_case{3, 22, 20, 1},
                            rope_case{7, 4096, 64, 7}}) {
    SCOPED_TRACE("dim=" + std::to_string(c.dim) + " rope_dim=" + std::to_string(c.rope_dim));
    const rope_problem pr = make_rope_problem(rng, c);
    const auto &x = pr.x, &w = pr.w, &inv_freq = pr.inv_freq;
    const auto& pos = pr.pos;
    float *d_x = nullptr, *d_w = nullptr, *d_f = nullptr, *d_a = nullptr, *d_inv = nullptr;
    int64_t* d_pos = nullptr;
    CUDA_OK(cudaMalloc(&d_x, x.size() * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_w, w.size() * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_f, x.size() * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_a, x.size() * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_inv, inv_freq.size() * sizeof(float)));
    CUDA_OK(cudaMalloc(&d_pos, pos.size() * sizeof(int64_t)));
    CUDA_OK(cudaMemcpy(d_x, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_w, w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_inv, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_pos, pos.data(), pos.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
    rms_norm_params p{d_x, d_w, d_f, c.n_rows, c.dim};
    p.rope_pos = d_pos;
    p.rope_inv_freq = d_inv;
    p.rope_dim = c.rope_dim;
    p.rope_rows_per_pos = c.rows_per_pos;
    EXPECT_TRUE(rms_norm_cuda(p, nullptr).ok());
    EXPECT_TRUE(rms_norm_cuda({d_x, d_w, d_a, c.n_rows, c.dim}, nullptr).ok());
    EXPECT_TRUE(rope_cuda({d_a, d_pos, d_inv, int64_t(pos.size()), c.rows_per_pos, c.dim, c.rope_dim}, nullptr).ok());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> fused(x.size()), apart(x.size());
    CUDA_OK(cudaMemcpy(fused.data(), d_f, fused.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(apart.data(), d_a, apart.size() * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT_EQ(0, std::memcmp(fused.data(), apart.data(), fused.size() * sizeof(float)));
    for (void* q : {(void*)d_x, (void*)d_w, (void*)d_f, (void*)d_a, (void*)d_inv, (void*)d_pos}) cudaFree(q);
  }
}

#undef CUDA_OK

#endif  // HART_CUDA

// sum_squares_torch_order: lanes of float4 vectors, each lane's 4 accumulators
// folded in order, then a shuffle-down tree. 8 values make 2 lanes: lane 0 holds
// 2^24 and 1 (their fp32 sum rounds back to 2^24), lane 1 holds 1, and the tree
// adds 2^24 + 1 = 2^24 again; the exact sum is 2^24 + 2. 6 values (not a
// multiple of 4) take the exactly rounded sum.
TEST(rms_norm, sum_squares_in_torchs_order) {
  const float x[8] = {4096.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f};
  EXPECT_EQ(sum_squares_torch_order(x, 8), 16777216.0f);
  EXPECT_EQ(sum_squares_torch_order(x, 6), 16777218.0f);
  // official: the same norm up to that order and one rsqrt rounding
  std::vector<float> row(512), a(512), b(512);
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float& v : row) v = n(rng);
  rms_norm_params p;
  p.x = row.data();
  p.n_rows = 1;
  p.dim = 512;
  p.y = a.data();
  ASSERT_TRUE(rms_norm_cpu(p).ok());
  p.official = true;
  p.y = b.data();
  ASSERT_TRUE(rms_norm_cpu(p).ok());
  for (int i = 0; i < 512; ++i) EXPECT_NEAR(b[i], a[i], 1e-6f * std::fabs(a[i]) + 1e-30f) << i;
}

}  // namespace
}  // namespace hart
