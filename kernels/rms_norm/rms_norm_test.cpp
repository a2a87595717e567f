// rms_norm_cpu against a double-precision y = x / sqrt(mean(x²) + eps) [· w]
// written in this file: weighted and unweighted, in place (y == x), row strides
// larger than dim (the gaps must stay untouched). Under HART_CUDA, rms_norm_cuda
// is checked against rms_norm_cpu on the same inputs.
#include "kernels/rms_norm/rms_norm.h"

#include "kernels/rope/rope.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/op_test_util.h"
#include "runtime/core/codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
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
::testing::AssertionResult rows_close(const std::vector<float>& got, int64_t stride,
                                      const std::vector<double>& want, int64_t n_rows, int64_t dim,
                                      double rtol, double atol) {
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
    for (int64_t i = 0; i < dim; ++i)
      y[r * dim + i] = double(x[r * stride + i]) * inv * (w ? double(w[i]) : 1.0);
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
const shape k_shapes[] = {{1, 1},   {3, 1},   {1, 3},    {19, 19},  {3, 111}, {111, 3},
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
    ASSERT_TRUE(rope_cpu({apart.data(), pos.data(), inv_freq.data(), int64_t(pos.size()), c.rows_per_pos,
                          c.dim, c.rope_dim})
                    .ok());
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

// -- bf16: the CPU engine's sequences in one call -----------------------------------

// runtime/model/attention.cpp's head_rms_bf16, copied: the engine's per-head q RMS
// under bf16 before rms_norm_params::bf16 took it over.
void head_rms_bf16(float* q, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* x = q + r * dim;
    float acc = 0;
    for (int64_t d = 0; d < dim; ++d) acc += round_to_bf16(x[d] * x[d]);
    const float mean = round_to_bf16(acc * (1.0f / float(dim)));
    const float inv = round_to_bf16(1.0f / std::sqrt(round_to_bf16(mean + eps)));
    for (int64_t d = 0; d < dim; ++d) x[d] = round_to_bf16(x[d] * inv);
  }
}

void to_bf16(std::vector<float>& v) {
  for (float& e : v) e = round_to_bf16(e);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// V4's shapes: kv (head_dim 512, rope 64, one row a token), qr (q_lora 1536), q (64
// heads of 512 a token); 1, 2 and many tokens. The new calls leave `official` off:
// bf16 with a weight implies it.
TEST(rms_norm, bf16_is_the_engines_sequences) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const float eps = 1e-6f;
  const int64_t hd = 512, rd = 64, H = 64, q_lora = 1536;
  for (const int64_t T : {int64_t(1), int64_t(2), int64_t(37)}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const rope_problem pr = make_rope_problem(rng, {T, hd, rd, 1});
    // kv: rms_norm_cpu(official); to_bf16; rope_cpu; to_bf16
    std::vector<float> old_kv = pr.x, kv(pr.x.size());
    ASSERT_TRUE(rms_norm_cpu({old_kv.data(), pr.w.data(), old_kv.data(), T, hd, 0, 0, eps, true}).ok());
    to_bf16(old_kv);
    ASSERT_TRUE(rope_cpu({old_kv.data(), pr.pos.data(), pr.inv_freq.data(), T, 1, hd, rd}).ok());
    to_bf16(old_kv);
    rms_norm_params p{pr.x.data(), pr.w.data(), kv.data(), T, hd, 0, 0, eps};
    p.bf16 = true;
    p.rope_pos = pr.pos.data();
    p.rope_inv_freq = pr.inv_freq.data();
    p.rope_dim = rd;
    ASSERT_TRUE(rms_norm_cpu(p).ok());
    EXPECT_TRUE(same_bits(kv, old_kv)) << "kv";

    // qr: rms_norm_cpu(official); to_bf16 (in place, as the engine calls it)
    const auto x_qr = random_rows(rng, T, q_lora, q_lora, 3.0f);
    const auto w_qr = random_rows(rng, 1, q_lora, q_lora, 1.0f);
    std::vector<float> old_qr = x_qr, qr = x_qr;
    ASSERT_TRUE(rms_norm_cpu({old_qr.data(), w_qr.data(), old_qr.data(), T, q_lora, 0, 0, eps, true}).ok());
    to_bf16(old_qr);
    rms_norm_params p_qr{qr.data(), w_qr.data(), qr.data(), T, q_lora, 0, 0, eps};
    p_qr.bf16 = true;
    ASSERT_TRUE(rms_norm_cpu(p_qr).ok());
    EXPECT_TRUE(same_bits(qr, old_qr)) << "qr";

    // q: head_rms_bf16; rope_cpu (H heads a token); to_bf16 (in place)
    std::vector<float> old_q = random_rows(rng, T * H, hd, hd, 2.0f), q = old_q;
    head_rms_bf16(old_q.data(), T * H, hd, eps);
    ASSERT_TRUE(rope_cpu({old_q.data(), pr.pos.data(), pr.inv_freq.data(), T, H, hd, rd}).ok());
    to_bf16(old_q);
    rms_norm_params p_q{q.data(), nullptr, q.data(), T * H, hd, 0, 0, eps};
    p_q.bf16 = true;
    p_q.rope_pos = pr.pos.data();
    p_q.rope_inv_freq = pr.inv_freq.data();
    p_q.rope_dim = rd;
    p_q.rope_rows_per_pos = H;
    ASSERT_TRUE(rms_norm_cpu(p_q).ok());
    EXPECT_TRUE(same_bits(q, old_q)) << "q";
    // without the rotation: head_rms_bf16 alone (rows of 1024 too, strided)
    const int64_t dim = 1024, xs = dim + 7;
    const auto x_h = random_rows(rng, T, dim, xs, 0.5f);
    std::vector<float> old_h(T * dim), h(T * dim);
    for (int64_t r = 0; r < T; ++r) std::copy_n(x_h.data() + r * xs, dim, old_h.data() + r * dim);
    head_rms_bf16(old_h.data(), T, dim, eps);
    rms_norm_params p_h{x_h.data(), nullptr, h.data(), T, dim, xs, 0, eps};
    p_h.bf16 = true;
    ASSERT_TRUE(rms_norm_cpu(p_h).ok());
    EXPECT_TRUE(same_bits(h, old_h)) << "head RMS without RoPE";
  }
}

// -- CUDA parity -------------------------------------------------------------------

#ifdef HART_CUDA

#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    const cudaError_t e_ = (expr);                                         \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
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
  const shape cuda_shapes[] = {{1, 1},   {3, 19},  {19, 111}, {111, 3},
                               {5, 512}, {2, 989}, {3, 4096}, {1, 7168}};
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
    EXPECT_TRUE(
        rope_cuda({d_a, d_pos, d_inv, int64_t(pos.size()), c.rows_per_pos, c.dim, c.rope_dim}, nullptr).ok());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> fused(x.size()), apart(x.size());
    CUDA_OK(cudaMemcpy(fused.data(), d_f, fused.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(apart.data(), d_a, apart.size() * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT_EQ(0, std::memcmp(fused.data(), apart.data(), fused.size() * sizeof(float)));
    for (void* q : {(void*)d_x, (void*)d_w, (void*)d_f, (void*)d_a, (void*)d_inv, (void*)d_pos}) cudaFree(q);
  }
}

#undef CUDA_OK

using testing::device_vec;

// One official / bf16 call: rows of `dim` at strides (0 = dim; in place: y = x),
// optionally rotated.
struct flag_case {
  int64_t n_rows, dim, x_stride = 0, y_stride = 0;
  bool in_place = false;
  int64_t rope_dim = 0, rows_per_pos = 1;  // rope_dim 0: no rotation
};

std::string describe(const flag_case& c) {
  return "n_rows=" + std::to_string(c.n_rows) + " dim=" + std::to_string(c.dim) +
         " x_stride=" + std::to_string(c.x_stride) + " y_stride=" + std::to_string(c.y_stride) +
         " in_place=" + std::to_string(c.in_place) + " rope_dim=" + std::to_string(c.rope_dim) +
         " rows_per_pos=" + std::to_string(c.rows_per_pos);
}

// Mismatches between the two backends' outputs of one flag_case.
struct flag_diff {
  int64_t n_norm_bad = 0;   // outside the rotated channels (gaps included): must be 0
  int64_t n_rope_bad = 0;   // rotated channels past the bound: must be 0
  int64_t n_rope_diff = 0;  // bf16: rotated channels not bit-identical
  int64_t n_rope = 0;       // bf16: rotated channels
  std::string first;
};

// rms_norm_cpu and rms_norm_cuda on the same fresh inputs, with `official` and
// `bf16` (a weight or not) as given.
flag_diff run_flag_case(std::mt19937& rng, const flag_case& c, bool weighted, bool official, bool bf16) {
  const int64_t xs = c.x_stride ? c.x_stride : c.dim;
  const int64_t ys = c.in_place ? xs : (c.y_stride ? c.y_stride : c.dim);
  const rope_case rc{c.n_rows, c.dim, std::max<int64_t>(c.rope_dim, 2), c.rows_per_pos};
  const rope_problem pr = make_rope_problem(rng, rc);
  const auto x = random_rows(rng, c.n_rows, c.dim, xs, 2.0f);
  std::vector<float> y_cpu = c.in_place ? x : std::vector<float>(c.n_rows * ys, k_sentinel);
  rms_norm_params p{c.in_place ? y_cpu.data() : x.data(),
                    weighted ? pr.w.data() : nullptr,
                    y_cpu.data(),
                    c.n_rows,
                    c.dim,
                    c.x_stride,
                    c.in_place ? c.x_stride : c.y_stride};
  p.official = official;
  p.bf16 = bf16;
  if (c.rope_dim) {
    p.rope_pos = pr.pos.data();
    p.rope_inv_freq = pr.inv_freq.data();
    p.rope_dim = c.rope_dim;
    p.rope_rows_per_pos = c.rows_per_pos;
  }
  EXPECT_TRUE(rms_norm_cpu(p).ok());

  device_vec<float> d_x(x), d_w(pr.w), d_inv(pr.inv_freq), d_y(std::vector<float>(c.n_rows * ys, k_sentinel));
  device_vec<int64_t> d_pos(pr.pos);
  p.x = d_x.get();
  p.w = weighted ? d_w.get() : nullptr;
  p.y = c.in_place ? d_x.get() : d_y.get();
  if (c.rope_dim) {
    p.rope_pos = d_pos.get();
    p.rope_inv_freq = d_inv.get();
  }
  const status st = rms_norm_cuda(p, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(testing::cuda_synced(nullptr));
  const std::vector<float> y_gpu = c.in_place ? d_x.to_host() : d_y.to_host();

  flag_diff d;
  std::ostringstream os;
  os << std::setprecision(9);
  for (int64_t r = 0; r < c.n_rows; ++r) {
    for (int64_t i = 0; i < ys; ++i) {
      const int64_t e = r * ys + i;
      const float g = y_gpu[e], w = y_cpu[e];
      const bool same = std::memcmp(&g, &w, sizeof(float)) == 0;
      const bool rotated = c.rope_dim && i >= c.dim - c.rope_dim && i < c.dim;
      bool ok = same;
      if (rotated) {
        // the rotation's fp32 result is within 1e-6 |pair| of the CPU's (cosf/sinf
        // within 2 ulp: rope_test's bound); bf16 may then round it to the neighbour
        // (2^-7 |v| at most)
        const int64_t a = e - (i - (c.dim - c.rope_dim)) % 2;
        const double pair = std::hypot(double(y_cpu[a]), double(y_cpu[a + 1]));
        const double step = bf16 ? std::ldexp(std::max(std::fabs(g), std::fabs(w)), -7) : 0.0;
        const double bound = 1e-6 * pair + step;
        ok = std::isfinite(g) && std::fabs(double(g) - double(w)) <= bound;
        d.n_rope += bf16;
        d.n_rope_diff += bf16 && !same;
        d.n_rope_bad += !ok;
      } else {
        d.n_norm_bad += !same;
      }
      if (!ok && d.first.empty()) {
        os << "row " << r << " [" << i << "] got " << g << " want " << w;
        d.first = os.str();
      }
    }
  }
  return d;
}

// official and bf16 (weighted, and the unweighted per-head RMS), with and without the
// fused rotation, at V4's shapes: kv / head rows of 512 (rope 64; a token's 64 heads
// share a position), 1024, q_lora 1536, 4096, 7168; 1-2 rows and 1200+; strides that keep
// the vector path (multiples of 4) or force the scalar one (odd, or dim > 8192 / % 4 != 0).
//
// Tolerance: the norm is rms_norm_cpu's arithmetic on both sides (torch's summation
// order, IEEE sqrt / division, no FMA, RNE bf16), so every element outside the rotated
// channels must be bit-identical, for every dim (dims not divisible by 4 sum in double
// serially on both sides). The rotated channels differ only through cosf/sinf (see
// run_flag_case); with bf16 such a difference shows only where it straddles a bf16
// rounding boundary (measured: about 2e-5 of the rotated values): at most 1e-3 may.
TEST(rms_norm, cuda_official_and_bf16_match_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  const std::vector<flag_case> cases = {{1, 512},
                                        {2, 1024},
                                        {1, 1536},
                                        {1300, 1536},
                                        {2, 4096},
                                        {1201, 4096},
                                        {1, 7168},
                                        {1200, 7168},
                                        {2, 512, 516, 520},
                                        {3, 512, 517, 513},
                                        {2, 7168, 0, 0, true},
                                        {3, 1024, 1029, 0, true},
                                        {3, 989},
                                        {5, 19},
                                        {2, 8200},
                                        {1, 12},
                                        {2, 4},
                                        {1, 40},  // torch order with 1, 2, 8 lanes
                                        {1, 512, 0, 0, false, 64},
                                        {2, 512, 0, 0, true, 64},
                                        {1201, 512, 0, 0, false, 64},
                                        {64, 512, 0, 0, true, 64, 64},
                                        {1280, 512, 0, 0, false, 64, 64},
                                        {128, 512, 515, 0, false, 64, 64},
                                        {2, 512, 0, 0, false, 510},
                                        {3, 22, 0, 0, false, 20}};
  struct flags {
    bool weighted, official, bf16;
    const char* name;
  };
  const flags modes[] = {{true, true, false, "official"},
                         {false, true, false, "official unweighted"},
                         {true, false, true, "bf16"},
                         {true, true, true, "bf16 + official"},
                         {false, false, true, "bf16 unweighted (per-head RMS)"}};
  int64_t n_rope = 0, n_rope_diff = 0;
  for (const flag_case& c : cases) {
    for (const flags& m : modes) {
      SCOPED_TRACE(describe(c) + " " + m.name);
      const flag_diff d = run_flag_case(rng, c, m.weighted, m.official, m.bf16);
      EXPECT_EQ(d.n_norm_bad, 0) << d.first;
      EXPECT_EQ(d.n_rope_bad, 0) << d.first;
      n_rope += d.n_rope;
      n_rope_diff += d.n_rope_diff;
    }
  }
  EXPECT_LE(n_rope_diff, n_rope / 1000) << n_rope_diff << " of " << n_rope << " rotated values differ";
}

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
