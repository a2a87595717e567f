// CUDA linears against linear_cpu on fresh random inputs (outputs poisoned,
// sentinel guards around y, NaN in overwrite mode), decode (1..16 rows) and
// prefill shapes, dims that are not multiples of 16 or 128:
//   - linear_cuda (fp32) and linear_bf16w_cuda (bf16 weights,
//     fp32 inputs: the GEMV up to 64 rows, widened chunks above, one shape
//     over two chunks): |gpu - cpu| <= 2e-5·Σ|x·w|, twice the bound linear_cpu
//     itself is held to (each side within 1e-5·Σ|x·w| of the exact value;
//     cuBLASLt sums in its own order, possibly split-K);
//   - linear_fp8_cuda: its activation QDQ is bitwise act_quant_fp8_qdq (per
//     row, per 128 channels); its output against a double-precision sum of the
//     same exact products within (in/32 + 24)·2^-24·Σ|x'·w'| (the roundings
//     of its fp32 sums: at most 16 + in/512 per lane on the vector path, in/32
//     on the scalar path, 5 shuffle levels, the accumulate add), and against linear_cpu on fp8_qdq(x) and the
//     dequantized W within 2e-5·Σ|x'·w'|; bitwise the same whichever number of output rows a warp takes (1, 2
//     or 4, chosen by shape); with unquantized inputs on row slices of one quantized matrix (wo_a's groups,
//     slices starting mid scale block) against linear_cpu on the raw x within 2e-5·Σ|x·w|;
//   - linear_fp8_tc_cuda (tensor cores): the exact sum of the same quantized
//     products within 2^-12·Σ|x'·w'| (the worst ratio printed).
#include "kernels/linear/linear.h"

#ifdef HART_CUDA

#include "kernels/linear/linear_impl.h"
#include "kernels/quant/quant.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/op_test_util.h"
#include "runtime/core/codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace hart {
namespace {

using testing::all_close;
using testing::cuda_synced;
using testing::device_vec;
using testing::k_sentinel;
using testing::normal_vec;
using testing::seed_trace;
using testing::test_seed;

constexpr int64_t k_guard = 16;  // sentinels on each side of y (and in the row gaps)

struct shape {
  int64_t n_rows, in, out;
};

// Decode rows 1..16 and prefill rows, dims off the 16/128 grid included; wide
// outputs where the GEMVs take 4 (1 row) and 2 (8 rows) output rows per warp;
// 65 x 4096 x 2100 widens bf16 weights in two chunks.
const shape k_shapes[] = {{1, 1, 1},       {1, 19, 3},     {2, 128, 128},  {3, 111, 19},
                          {4, 1000, 300},  {5, 4096, 64},  {8, 256, 1024}, {9, 200, 129},
                          {16, 512, 257},  {16, 4096, 96}, {33, 989, 5},   {130, 384, 200},
                          {200, 1000, 61}, {1, 256, 9001}, {8, 512, 4229}, {65, 4096, 2100}};

std::string name(const shape& s, int64_t ys, bool acc) {
  return "n_rows=" + std::to_string(s.n_rows) + " in=" + std::to_string(s.in) +
         " out=" + std::to_string(s.out) + " y_stride=" + std::to_string(ys) +
         " accumulate=" + std::to_string(acc);
}

// Poisoned y: k_guard sentinels, then rows of `ys` (first `out` = y0 or NaN, the gap sentinels), then guards.
std::vector<float> poisoned_y(const shape& s, int64_t ys, const std::vector<float>& y0, bool acc) {
  std::vector<float> y(s.n_rows * ys + 2 * k_guard, k_sentinel);
  for (int64_t r = 0; r < s.n_rows; ++r) {
    for (int64_t o = 0; o < s.out; ++o) {
      y[k_guard + r * ys + o] = acc ? y0[r * s.out + o] : std::numeric_limits<float>::quiet_NaN();
    }
  }
  return y;
}

// Checks the gaps and guards are untouched and returns the dense [n_rows][out] body.
std::vector<float> body(const std::vector<float>& y, const shape& s, int64_t ys) {
  std::vector<float> b(s.n_rows * s.out);
  for (size_t i = 0; i < y.size(); ++i) {
    const int64_t j = int64_t(i) - k_guard, r = j / ys, o = j % ys;
    const bool in_body = j >= 0 && r < s.n_rows && o < s.out;
    if (in_body)
      b[r * s.out + o] = y[i];
    else
      EXPECT_EQ(y[i], k_sentinel) << "guard or row gap overwritten at " << i;
  }
  return b;
}

// y0 + x W^T in double (x [n_rows][in], W [out][in]) and Σ|terms|.
void exact(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* y0,
           const shape& s, std::vector<double>& want, std::vector<double>& mag) {
  want.assign(s.n_rows * s.out, 0.0);
  mag.assign(s.n_rows * s.out, 0.0);
  for (int64_t r = 0; r < s.n_rows; ++r) {
    for (int64_t o = 0; o < s.out; ++o) {
      double a = y0 ? (*y0)[r * s.out + o] : 0.0, m = std::fabs(a);
      for (int64_t i = 0; i < s.in; ++i) {
        const double t = double(x[r * s.in + i]) * w[o * s.in + i];
        a += t;
        m += std::fabs(t);
      }
      want[r * s.out + o] = a;
      mag[r * s.out + o] = m;
    }
  }
}

std::vector<float> cpu_linear(const std::vector<float>& x, const std::vector<float>& w,
                              const std::vector<float>& y0, const shape& s, bool acc) {
  std::vector<float> y = acc ? y0 : std::vector<float>(s.n_rows * s.out, 0.0f);
  const status st = linear_cpu({x.data(), w.data(), y.data(), s.n_rows, s.in, s.out, 0, 0, acc, false});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return y;
}

std::unique_ptr<linear_cuda_context> make_context() {
  auto ctx = linear_cuda_context::create(256, 8192);
  EXPECT_TRUE(ctx.ok()) << ctx.get_status().to_string();
  return ctx.ok() ? std::move(*ctx) : nullptr;
}

// -- fp32 and bf16 -------------------------------------------------------------------

enum class dense { fp32, bf16_weights };

const char* dense_name(dense k) {
  return k == dense::fp32 ? " fp32" : " bf16 weights";
}

void run_dense(std::mt19937& rng, linear_cuda_context& ctx, const shape& s, dense kind, bool acc, int64_t ys,
               int64_t xs) {
  SCOPED_TRACE(name(s, ys, acc) + dense_name(kind) + " x_stride=" + std::to_string(xs));
  const auto x = normal_vec(rng, s.n_rows * s.in, 1.0f);
  auto w = normal_vec(rng, s.out * s.in, 1.0f);
  const auto y0 = normal_vec(rng, s.n_rows * s.out, 1.0f);
  std::vector<uint16_t> wb(w.size());
  if (kind != dense::fp32) {  // the CPU side sees exactly the bf16 values
    f32_to_bf16(w.data(), wb.data(), int64_t(w.size()));
    bf16_to_f32(wb.data(), w.data(), int64_t(w.size()));
  }
  device_vec<float> d_y(poisoned_y(s, ys, y0, acc));
  status st;
  if (kind == dense::bf16_weights) {
    std::vector<float> xp(s.n_rows * xs, k_sentinel);
    for (int64_t r = 0; r < s.n_rows; ++r) std::copy_n(x.data() + r * s.in, s.in, xp.data() + r * xs);
    device_vec<float> d_x(xp);
    device_vec<uint16_t> d_w(wb);
    st = linear_bf16w_cuda({d_x.get(), d_w.get(), d_y.get() + k_guard, s.n_rows, s.in, s.out, xs, ys, acc},
                           ctx, nullptr);
    ASSERT_TRUE(cuda_synced(nullptr));
  } else {
    device_vec<float> d_x(x), d_w(w);
    st = linear_cuda({d_x.get(), d_w.get(), d_y.get() + k_guard, s.n_rows, s.in, s.out, 0, ys, acc, false},
                     ctx, nullptr);
    ASSERT_TRUE(cuda_synced(nullptr));
  }
  ASSERT_TRUE(st.ok()) << st.to_string();
  const auto got = body(d_y.to_host(), s, ys);
  const auto cpu = cpu_linear(x, w, y0, s, acc);
  std::vector<double> want, mag;
  exact(x, w, acc ? &y0 : nullptr, s, want, mag);
  EXPECT_TRUE(all_close(got.data(), got.size(), std::vector<double>(cpu.begin(), cpu.end()), mag, 2e-5, 0.0));
}

TEST(linear_cuda, fp32_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  for (const shape& s : k_shapes) {
    for (bool acc : {false, true}) run_dense(rng, *ctx, s, dense::fp32, acc, acc ? s.out + 3 : s.out, s.in);
  }
}

// Row strides that keep (s.in + 4) and break (s.in + 1) the 16-byte x rows of the vector path.
TEST(linear_cuda, bf16_weights_match_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  for (const shape& s : k_shapes) {
    run_dense(rng, *ctx, s, dense::bf16_weights, false, s.out, s.in);
    run_dense(rng, *ctx, s, dense::bf16_weights, true, s.out + 3, s.in + 4);
    run_dense(rng, *ctx, s, dense::bf16_weights, false, s.out, s.in + 1);
  }
}

// The tensor-core path (2-64 rows): layers with a CTA per SM (the LM head's
// shape class) and, splitting K over CTAs, the small ones (a compressor's 1024
// outputs, the index compressor's 256, weights_proj's 64: half a CTA's warps
// idle), with plain and padded strides and accumulation.
TEST(linear_cuda, bf16_weights_on_tensor_cores_match_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  for (const shape& s :
       {shape{2, 256, 17408}, shape{17, 512, 16896}, shape{64, 128, 16896}, shape{5, 4096, 16928},
        shape{2, 4096, 1024}, shape{32, 4096, 256}, shape{8, 4096, 64}, shape{3, 1024, 512}}) {
    run_dense(rng, *ctx, s, dense::bf16_weights, false, s.out, s.in);
    run_dense(rng, *ctx, s, dense::bf16_weights, true, s.out + 3, s.in + 4);
  }
}

// row_invariant (the engine's --deterministic): a row's outputs are the same
// bits computed alone as among others, for fp32 weights (a GEMV instead of
// cuBLASLt) and bf16 weights (the GEMV at every row count, where the tensor
// cores or cuBLASLt would run), and within 2e-5·Σ|x·w| of the exact sum.
TEST(linear_cuda, row_invariant_rows_do_not_depend_on_the_batch) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  for (const bool bf16 : {false, true}) {
    for (const shape& s :
         {shape{100, 256, 300}, shape{3, 200, 129}, shape{70, 512, 16896}, shape{40, 256, 16896}}) {
      SCOPED_TRACE(name(s, s.out, false) + (bf16 ? " bf16 weights" : " fp32"));
      const auto x = normal_vec(rng, s.n_rows * s.in, 1.0f);
      auto w = normal_vec(rng, s.out * s.in, 1.0f);
      std::vector<uint16_t> wb(w.size());
      f32_to_bf16(w.data(), wb.data(), int64_t(w.size()));
      if (bf16) bf16_to_f32(wb.data(), w.data(), int64_t(w.size()));
      device_vec<float> d_x(x), d_w(w), d_y(std::vector<float>(s.n_rows * s.out, k_sentinel));
      device_vec<uint16_t> d_wb(wb);
      auto run = [&](int64_t r0, int64_t n) {
        float* y = d_y.get() + r0 * s.out;
        const float* xr = d_x.get() + r0 * s.in;
        status st;
        if (bf16) {
          linear_bf16w_params p{xr, d_wb.get(), y, n, s.in, s.out};
          p.row_invariant = true;
          st = linear_bf16w_cuda(p, *ctx, nullptr);
        } else {
          st = linear_cuda({xr, d_w.get(), y, n, s.in, s.out, 0, 0, false, true}, *ctx, nullptr);
        }
        EXPECT_TRUE(st.ok()) << st.to_string();
        EXPECT_TRUE(cuda_synced(nullptr));
        return d_y.to_host();
      };
      const std::vector<float> all = run(0, s.n_rows);
      std::vector<double> want, mag;
      exact(x, w, nullptr, s, want, mag);
      EXPECT_TRUE(all_close(all.data(), all.size(), want, mag, 2e-5, 0.0));
      for (const int64_t r : {int64_t(0), s.n_rows / 2, s.n_rows - 1}) {
        const std::vector<float> alone = run(r, 1);
        EXPECT_EQ(
            std::memcmp(all.data() + r * s.out, alone.data() + r * s.out, size_t(s.out) * sizeof(float)), 0)
            << "row " << r << " alone differs from the batched call";
      }
    }
  }
}

// -- fp8 ---------------------------------------------------------------------------

// Per row, per 128 channels (last block shorter): the CPU QDQ rule.
std::vector<float> cpu_act_qdq(std::vector<float> x, int64_t n_rows, int64_t in) {
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t b = 0; b < in; b += k_linear_fp8_block) {
      const int64_t len = std::min(k_linear_fp8_block, in - b);
      EXPECT_TRUE(act_quant_fp8_qdq(x.data() + r * in + b, len, len).ok());
    }
  }
  return x;
}

// Inputs whose 128-blocks span many scales: some all-tiny (below the 1e-4 floor), some huge.
std::vector<float> scaled_inputs(std::mt19937& rng, int64_t n_rows, int64_t in) {
  auto x = normal_vec(rng, n_rows * in, 1.0f);
  std::uniform_int_distribution<int> e(-30, 30);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t b = 0; b < in; b += k_linear_fp8_block) {
      const float f = std::ldexp(1.0f, e(rng));
      for (int64_t i = b; i < std::min(in, b + k_linear_fp8_block); ++i) x[r * in + i] *= f;
    }
  }
  return x;
}

bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0;
}

TEST(linear_cuda, fp8_activation_qdq_is_bitwise_the_cpu_rule) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  for (const int64_t in : {1, 19, 128, 129, 1000, 4096}) {
    const int64_t n_rows = 7, xs = in + 3;
    auto x = scaled_inputs(rng, n_rows, in);
    // adversarial values: zeros, subnormals, rounding ties, ±448 edges, FLT_MAX, inf, NaN
    const float special[] = {0.0f,
                             -0.0f,
                             1e-40f,
                             1e-4f,
                             448.0f,
                             464.0f,
                             -480.0f,
                             0x1.3p0f,
                             3.4e38f,
                             std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN()};
    for (size_t i = 0; i < sizeof special / sizeof *special && i < size_t(in); ++i)
      x[(i % n_rows) * in + i] = special[i];
    std::vector<float> xp(n_rows * xs, k_sentinel);
    for (int64_t r = 0; r < n_rows; ++r) std::copy_n(x.data() + r * in, in, xp.data() + r * xs);
    device_vec<float> d_x(xp), d_q(std::vector<float>(n_rows * in, k_sentinel));
    ASSERT_EQ(linear_fp8_act_qdq_launch(d_x.get(), xs, d_q.get(), n_rows, in, nullptr), cudaSuccess);
    ASSERT_TRUE(cuda_synced(nullptr));
    const auto got = d_q.to_host(), want = cpu_act_qdq(x, n_rows, in);
    int64_t n_bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!same_bits(got[i], want[i]) && n_bad++ < 8) {
        ADD_FAILURE() << "in=" << in << " [" << i << "] x=" << x[i] << " got " << got[i] << " want "
                      << want[i];
      }
    }
    EXPECT_EQ(n_bad, 0) << "in=" << in;
  }
}

struct fp8_weight {
  std::vector<uint8_t> q, scale;  // e4m3 [out][in], e8m0 [ceil(out/128)][ceil(in/128)]
  std::vector<float> deq;         // what linear_cpu sees
};

fp8_weight random_fp8_weight(std::mt19937& rng, int64_t out, int64_t in) {
  auto w = normal_vec(rng, out * in, 0.05f);
  std::uniform_int_distribution<int> e(-6, 6);  // blocks of different scales
  const int64_t nb_o = (out + 127) / 128, nb_i = (in + 127) / 128;
  std::vector<float> f(nb_o * nb_i);
  for (auto& v : f) v = std::ldexp(1.0f, e(rng));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) w[o * in + i] *= f[(o / 128) * nb_i + i / 128];
  }
  fp8_weight r;
  r.q.resize(out * in);
  r.scale.resize(nb_o * nb_i);
  r.deq.resize(out * in);
  EXPECT_TRUE(fp8_block_quantize(w.data(), out, in, 128, r.q.data(), r.scale.data()).ok());
  EXPECT_TRUE(fp8_block_dequantize(r.q.data(), r.scale.data(), out, in, 128, r.deq.data()).ok());
  return r;
}

void run_fp8(std::mt19937& rng, linear_cuda_context& ctx, const shape& s, bool acc, int64_t xs, int64_t ys) {
  SCOPED_TRACE(name(s, ys, acc) + " x_stride=" + std::to_string(xs));
  const auto x = scaled_inputs(rng, s.n_rows, s.in);
  const fp8_weight w = random_fp8_weight(rng, s.out, s.in);
  const auto y0 = normal_vec(rng, s.n_rows * s.out, 1.0f);
  std::vector<float> xp(s.n_rows * xs, k_sentinel);
  for (int64_t r = 0; r < s.n_rows; ++r) std::copy_n(x.data() + r * s.in, s.in, xp.data() + r * xs);
  device_vec<float> d_x(xp), d_y(poisoned_y(s, ys, y0, acc));
  device_vec<uint8_t> d_w(w.q), d_s(w.scale);
  const status st = linear_fp8_cuda({d_x.get(), d_w.get(), d_s.get(), d_y.get() + k_guard, s.n_rows, s.in,
                                     s.out, xs == s.in ? 0 : xs, ys, acc},
                                    ctx, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_TRUE(cuda_synced(nullptr));
  const auto got = body(d_y.to_host(), s, ys);
  const auto xq = cpu_act_qdq(x, s.n_rows, s.in);
  std::vector<double> want, mag;
  exact(xq, w.deq, acc ? &y0 : nullptr, s, want, mag);
  const double rtol = (double(s.in) / 32.0 + 24.0) * std::ldexp(1.0, -24);
  EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, rtol, 0.0))
      << "vs exact sum of the quantized products";
  const auto cpu = cpu_linear(xq, w.deq, y0, s, acc);
  EXPECT_TRUE(all_close(got.data(), got.size(), std::vector<double>(cpu.begin(), cpu.end()), mag, 2e-5, 0.0))
      << "vs linear_cpu on the fp8 QDQ inputs";
}

TEST(linear_cuda, fp8_matches_cpu_qdq_reference) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  for (const shape& s : k_shapes) {
    run_fp8(rng, *ctx, s, false, s.in, s.out);
    run_fp8(rng, *ctx, s, true, s.in + 7, s.out + 2);  // strided rows, y += ...
  }
}

// A row's result does not depend on how many rows share the call.
TEST(linear_cuda, fp8_is_batch_invariant) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  const int64_t in = 1024, out = 136, n = 37;
  const auto x = scaled_inputs(rng, n, in);
  const fp8_weight w = random_fp8_weight(rng, out, in);
  device_vec<float> d_x(x), d_all(std::vector<float>(n * out, k_sentinel)),
      d_one(std::vector<float>(out, k_sentinel));
  device_vec<uint8_t> d_w(w.q), d_s(w.scale);
  ASSERT_TRUE(
      linear_fp8_cuda({d_x.get(), d_w.get(), d_s.get(), d_all.get(), n, in, out}, *ctx, nullptr).ok());
  const auto all = d_all.to_host();
  for (int64_t r : {int64_t(0), int64_t(5), n - 1}) {
    ASSERT_TRUE(
        linear_fp8_cuda({d_x.get() + r * in, d_w.get(), d_s.get(), d_one.get(), 1, in, out}, *ctx, nullptr)
            .ok());
    ASSERT_TRUE(cuda_synced(nullptr));
    const auto one = d_one.to_host();
    EXPECT_EQ(0, std::memcmp(one.data(), all.data() + r * out, out * sizeof(float))) << "row " << r;
  }
}

// Each output's sum is the same whether its warp takes 1, 2 or 4 output rows:
// a wide weight (several rows per warp) against its first 128 rows alone (one).
TEST(linear_cuda, fp8_output_rows_per_warp_do_not_change_results) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  const int64_t in = 512, out = 9001, part = 128;
  const fp8_weight w = random_fp8_weight(rng, out, in);
  device_vec<uint8_t> d_w(w.q), d_s(w.scale);
  for (const int64_t n : {1, 2, 8}) {
    const auto x = scaled_inputs(rng, n, in);
    device_vec<float> d_x(x), d_all(std::vector<float>(n * out, k_sentinel)),
        d_part(std::vector<float>(n * part, k_sentinel));
    ASSERT_TRUE(
        linear_fp8_cuda({d_x.get(), d_w.get(), d_s.get(), d_all.get(), n, in, out}, *ctx, nullptr).ok());
    // The first 128 output rows: the scale rows' first block row only, so w_scale needs no slicing.
    ASSERT_TRUE(
        linear_fp8_cuda({d_x.get(), d_w.get(), d_s.get(), d_part.get(), n, in, part}, *ctx, nullptr).ok());
    ASSERT_TRUE(cuda_synced(nullptr));
    const auto all = d_all.to_host(), one = d_part.to_host();
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_EQ(0, std::memcmp(one.data() + r * part, all.data() + r * out, part * sizeof(float)))
          << "n=" << n << " row " << r;
    }
  }
}

// wo_a: G groups of `rows` output rows of one [G·rows, in] quantized matrix,
// each applied to its own slice of the (unquantized) input row: one call per
// group (row slices), then one call for all (x_group_rows), bitwise equal.
TEST(linear_cuda, fp8_raw_input_on_row_slices_matches_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  struct slices {
    int64_t groups, rows, in, n_rows;
  };
  for (const slices c :
       {slices{3, 40, 256, 1}, slices{2, 32, 128, 3}, slices{8, 1024, 512, 2}, slices{4, 130, 200, 9}}) {
    SCOPED_TRACE("groups=" + std::to_string(c.groups) + " rows=" + std::to_string(c.rows) +
                 " in=" + std::to_string(c.in) + " n_rows=" + std::to_string(c.n_rows));
    const int64_t out = c.groups * c.rows, nb_i = (c.in + 127) / 128, xs = c.groups * c.in, ys = out;
    const fp8_weight w = random_fp8_weight(rng, out, c.in);
    const auto x = normal_vec(rng, c.n_rows * xs, 1.0f);
    device_vec<float> d_x(x), d_y(std::vector<float>(c.n_rows * ys, k_sentinel));
    device_vec<uint8_t> d_w(w.q), d_s(w.scale);
    for (int64_t g = 0; g < c.groups; ++g) {
      linear_fp8_params p{d_x.get() + g * c.in,
                          d_w.get() + g * c.rows * c.in,
                          d_s.get() + (g * c.rows / 128) * nb_i,
                          d_y.get() + g * c.rows,
                          c.n_rows,
                          c.in,
                          c.rows,
                          xs,
                          ys};
      p.quantize_input = false;
      p.w_scale_row_offset = g * c.rows % 128;
      const status st = linear_fp8_cuda(p, *ctx, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    ASSERT_TRUE(cuda_synced(nullptr));
    const auto got = d_y.to_host();
    // All groups in one call (x_group_rows): bitwise the per-group calls.
    device_vec<float> d_all(std::vector<float>(c.n_rows * ys, k_sentinel));
    linear_fp8_params all{d_x.get(), d_w.get(), d_s.get(), d_all.get(), c.n_rows, c.in, out, xs, ys};
    all.quantize_input = false;
    all.x_group_rows = c.rows;
    all.x_group_stride = c.in;
    const status st_all = linear_fp8_cuda(all, *ctx, nullptr);
    ASSERT_TRUE(st_all.ok()) << st_all.to_string();
    ASSERT_TRUE(cuda_synced(nullptr));
    const auto got_all = d_all.to_host();
    EXPECT_EQ(0, std::memcmp(got_all.data(), got.data(), got.size() * sizeof(float)))
        << "one call for all groups";
    for (int64_t g = 0; g < c.groups; ++g) {
      const shape s{c.n_rows, c.in, c.rows};
      std::vector<float> xg(c.n_rows * c.in),
          wg(w.deq.begin() + g * c.rows * c.in, w.deq.begin() + (g + 1) * c.rows * c.in);
      for (int64_t r = 0; r < c.n_rows; ++r)
        std::copy_n(x.data() + r * xs + g * c.in, c.in, xg.data() + r * c.in);
      const auto cpu = cpu_linear(xg, wg, {}, s, false);
      std::vector<double> want, mag;
      exact(xg, wg, nullptr, s, want, mag);
      std::vector<float> gg(c.n_rows * c.rows);
      for (int64_t r = 0; r < c.n_rows; ++r)
        std::copy_n(got.data() + r * ys + g * c.rows, c.rows, gg.data() + r * c.rows);
      EXPECT_TRUE(
          all_close(gg.data(), gg.size(), std::vector<double>(cpu.begin(), cpu.end()), mag, 2e-5, 0.0))
          << "group " << g;
    }
  }
}

// One tensor-core FP8 linear (`run` on params `supported` accepts) on fresh
// inputs of each shape, with and without accumulation and row strides, against
// the exact sum of the QDQ'd inputs and dequantized weights within `tol` of
// Σ|x'·w'|; same_bits_again: a second call (no accumulation) gives the same
// bits. *worst: the largest ratio seen.
void expect_fp8_tensor_core_linear(const std::vector<shape>& shapes, std::mt19937& rng,
                                   const std::function<bool(const linear_fp8_params&)>& supported,
                                   const std::function<status(const linear_fp8_params&)>& run, double tol,
                                   bool same_bits_again, double* worst) {
  for (const shape& sh : shapes) {
    for (const bool acc : {false, true}) {
      SCOPED_TRACE(name(sh, sh.out + (acc ? 8 : 0), acc));
      const int64_t xs = sh.in + (acc ? 4 : 0), ys = sh.out + (acc ? 8 : 0);
      const auto x = scaled_inputs(rng, sh.n_rows, sh.in);
      const fp8_weight w = random_fp8_weight(rng, sh.out, sh.in);
      const auto y0 = normal_vec(rng, sh.n_rows * sh.out, 1.0f);
      std::vector<float> xp(sh.n_rows * xs, k_sentinel);
      for (int64_t r = 0; r < sh.n_rows; ++r) std::copy_n(x.data() + r * sh.in, sh.in, xp.data() + r * xs);
      device_vec<float> d_x(xp), d_y(poisoned_y(sh, ys, y0, acc));
      device_vec<uint8_t> d_w(w.q), d_s(w.scale);
      linear_fp8_params p{d_x.get(), d_w.get(), d_s.get(), d_y.get() + k_guard, sh.n_rows, sh.in, sh.out,
                          xs,        ys,        acc};
      ASSERT_TRUE(supported(p));
      const status st = run(p);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_TRUE(cuda_synced(nullptr));
      const auto got = body(d_y.to_host(), sh, ys);
      const auto xq = cpu_act_qdq(x, sh.n_rows, sh.in);
      std::vector<double> want, mag;
      exact(xq, w.deq, acc ? &y0 : nullptr, sh, want, mag);
      for (size_t i = 0; i < got.size(); ++i)
        *worst = std::max(*worst, std::fabs(got[i] - want[i]) / std::max(mag[i], 1e-30));
      EXPECT_TRUE(all_close(got.data(), got.size(), want, mag, tol, 0.0));
      if (same_bits_again && !acc) {
        ASSERT_TRUE(run(p).ok());
        ASSERT_TRUE(cuda_synced(nullptr));
        EXPECT_EQ(body(d_y.to_host(), sh, ys), got);
      }
    }
  }
}

// The tensor-core product: the same QDQ'd inputs and dequantized weights as the
// CUDA-core path, summed by the MMA per 128-channel block. Tolerance 2^-12 of
// Σ|x'·w'| allows an MMA whose internal accumulation keeps fewer than fp32's
// bits (as Hopper's FP8 wgmma does); the measured worst ratio is printed.
// {16, 4096, 1024} and {32, 1024, 4096} have fewer output tiles than SMs, so
// they run split K (the last CTA of a tile adds the partials).
TEST(linear_cuda, fp8_tensor_cores_match_the_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  double worst = 0;
  expect_fp8_tensor_core_linear(
      {{1, 128, 128},
       {5, 256, 128},
       {16, 4096, 1024},
       {17, 512, 384},
       {32, 1024, 4096},
       {64, 2048, 256},
       {100, 128, 256},
       {256, 384, 128}},
      rng, linear_fp8_tc_supported,
      [&](const linear_fp8_params& p) { return linear_fp8_tc_cuda(p, *ctx, nullptr); }, std::ldexp(1.0, -12),
      /*same_bits_again=*/true, &worst);
  std::printf("linear_fp8_tc: worst |gpu - exact| / sum|x'w'| = %.3g (2^%.1f)\n", worst,
              std::log2(std::max(worst, 1e-300)));
}

// FP8 weights on unquantized inputs (wo_a) on tensor cores: exact products
// (codes widened to bf16, x split into three bf16 terms), fp32 sums per
// 128-channel block; checked against the exact sum within 2^-16 of Σ|x·w'|
// (fp32 summation's worst case over a block; a wrong tile or scale is O(1)),
// grouped as the engine calls it and not, wo_a's shapes splitting K.
TEST(linear_cuda, fp8_raw_tensor_cores_match_the_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  struct raw_case {
    int64_t groups, rows, in, n_rows;
    bool acc;
  };
  double worst = 0;
  for (const raw_case c :
       {raw_case{1, 128, 128, 1, false}, raw_case{1, 384, 512, 17, true}, raw_case{8, 1024, 4096, 2, false},
        raw_case{8, 1024, 4096, 32, false}, raw_case{2, 256, 256, 40, true}}) {
    SCOPED_TRACE("groups=" + std::to_string(c.groups) + " rows=" + std::to_string(c.rows) +
                 " in=" + std::to_string(c.in) + " n_rows=" + std::to_string(c.n_rows) +
                 " acc=" + std::to_string(c.acc));
    const int64_t out = c.groups * c.rows, xs = c.groups * c.in + 4, ys = out + 8;
    const fp8_weight w = random_fp8_weight(rng, out, c.in);
    const auto x = normal_vec(rng, c.n_rows * xs, 1.0f);
    const auto y0 = normal_vec(rng, c.n_rows * ys, 1.0f);
    device_vec<float> d_x(x), d_y(y0);
    device_vec<uint8_t> d_w(w.q), d_s(w.scale);
    linear_fp8_params p{d_x.get(), d_w.get(), d_s.get(), d_y.get(), c.n_rows, c.in, out, xs, ys, c.acc};
    p.quantize_input = false;
    if (c.groups > 1) {
      p.x_group_rows = c.rows;
      p.x_group_stride = c.in;
    }
    ASSERT_TRUE(linear_fp8_raw_tc_supported(p));
    const status st = linear_fp8_raw_tc_cuda(p, *ctx, nullptr);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(cuda_synced(nullptr));
    const auto got = d_y.to_host();
    if (!c.acc) {  // split K (wo_a's shapes: 64 output tiles) sums in a fixed order: the same bits again
      ASSERT_TRUE(linear_fp8_raw_tc_cuda(p, *ctx, nullptr).ok());
      ASSERT_TRUE(cuda_synced(nullptr));
      EXPECT_EQ(d_y.to_host(), got);
    }
    for (int64_t g = 0; g < c.groups; ++g) {
      const shape sh{c.n_rows, c.in, c.rows};
      std::vector<float> xg(c.n_rows * c.in);
      std::vector<float> wg(w.deq.begin() + g * c.rows * c.in, w.deq.begin() + (g + 1) * c.rows * c.in);
      std::vector<float> y0g(c.n_rows * c.rows), gg(c.n_rows * c.rows);
      for (int64_t r = 0; r < c.n_rows; ++r) {
        std::copy_n(x.data() + r * xs + g * c.in, c.in, xg.data() + r * c.in);
        std::copy_n(y0.data() + r * ys + g * c.rows, c.rows, y0g.data() + r * c.rows);
        std::copy_n(got.data() + r * ys + g * c.rows, c.rows, gg.data() + r * c.rows);
      }
      std::vector<double> want, mag;
      exact(xg, wg, c.acc ? &y0g : nullptr, sh, want, mag);
      for (size_t i = 0; i < gg.size(); ++i) {
        worst = std::max(worst, std::fabs(gg[i] - want[i]) / std::max(mag[i], 1e-30));
      }
      EXPECT_TRUE(all_close(gg.data(), gg.size(), want, mag, std::ldexp(1.0, -16), 0.0)) << "group " << g;
    }
    for (int64_t r = 0; r < c.n_rows; ++r) {  // the row padding is untouched
      for (int64_t i = out; i < ys; ++i) ASSERT_EQ(got[r * ys + i], y0[r * ys + i]);
    }
  }
  std::printf("linear_fp8_raw_tc: worst |gpu - exact| / sum|x w'| = %.3g (2^%.1f)\n", worst,
              std::log2(std::max(worst, 1e-300)));
  device_vec<float> d(std::vector<float>(4096, 0.0f));
  device_vec<uint8_t> q(std::vector<uint8_t>(65536, 0));
  linear_fp8_params bad{d.get(), q.get(), q.get(), d.get(), 2, 128, 128};
  EXPECT_EQ(linear_fp8_raw_tc_cuda(bad, *ctx, nullptr).code(),
            status_code::unimplemented);  // quantized inputs
  bad.quantize_input = false;
  bad.x_group_rows = 64;  // a 128-row scale block across two groups
  bad.x_group_stride = 128;
  EXPECT_EQ(linear_fp8_raw_tc_cuda(bad, *ctx, nullptr).code(), status_code::unimplemented);
}

// A prefill FP8 linear on Hopper's FP8 MMA (cuBLASLt's block-scaled GEMM,
// our wgmma kernel): the same QDQ'd inputs and dequantized weights, within
// 2^-10 of Σ|x'·w'| (the MMA accumulates with fewer bits than fp32; G2 v1
// measured 2^-12 at Flash shapes; a wrong scale order is 10^2-10^4 times the
// bound). Row strides, accumulation and row counts that are not multiples of
// 4 or of a 128-row tile, as prefill chunks give them; then the refusals: in
// not a multiple of 128, y rows misaligned (`bad_y_stride`), more rows than
// the context holds.
void expect_prefill_fp8_linear(
    const char* name, const std::function<bool(const linear_fp8_params&)>& supported,
    const std::function<status(const linear_fp8_params&, linear_cuda_context&)>& run, bool same_bits_again,
    int64_t bad_y_stride) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  auto ctx = linear_cuda_context::create(1024, 4096);
  ASSERT_TRUE(ctx.ok()) << ctx.get_status().to_string();
  double worst = 0;
  // in / 128 of 1, 2, 3 and 5 with several 128-row blocks of W: cuBLASLt pads
  // the rows of W's scale blocks to 4 (a copy without the padding failed only these).
  expect_fp8_tensor_core_linear(
      {{5, 256, 128},
       {64, 4096, 256},
       {517, 1024, 512},
       {1000, 512, 384},
       {129, 128, 1024},
       {40, 384, 512},
       {12, 256, 640},
       {33, 640, 256}},
      rng, supported, [&](const linear_fp8_params& p) { return run(p, **ctx); }, std::ldexp(1.0, -10),
      same_bits_again, &worst);
  std::printf("%s: worst |gpu - exact| / sum|x'w'| = %.3g (2^%.1f)\n", name, worst,
              std::log2(std::max(worst, 1e-300)));
  device_vec<float> d(std::vector<float>(4096, 0.0f));
  device_vec<uint8_t> q(std::vector<uint8_t>(65536, 0));
  linear_fp8_params bad{d.get(), q.get(), q.get(), d.get(), 2, 200, 128};  // in % 128 != 0
  EXPECT_FALSE(supported(bad));
  EXPECT_EQ(run(bad, **ctx).code(), status_code::unimplemented);
  bad.in = 128;
  bad.y_stride = bad_y_stride;
  EXPECT_EQ(run(bad, **ctx).code(), status_code::unimplemented);
  bad.y_stride = 0;
  bad.n_rows = 2000;  // over the context's 1024 rows
  EXPECT_EQ(run(bad, **ctx).code(), status_code::resource_exhausted);
}

// cuBLASLt's kernel choice follows the row count (no same-bits check); it
// wants y rows 16-byte aligned.
TEST(linear_cuda, fp8_cublaslt_matches_the_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  expect_prefill_fp8_linear(
      "linear_fp8_lt", linear_fp8_lt_supported,
      [](const linear_fp8_params& p, linear_cuda_context& c) { return linear_fp8_lt_cuda(p, c, nullptr); },
      /*same_bits_again=*/false, /*bad_y_stride=*/130);
}

// Our wgmma kernel (G2 v2): a fixed order per output, so the same bits again;
// y rows 8-byte aligned.
TEST(linear_cuda, fp8_wgmma_matches_the_cpu) {
  HART_SKIP_WITHOUT_CUDA();
  expect_prefill_fp8_linear(
      "linear_fp8_wgmma", linear_fp8_wgmma_supported,
      [](const linear_fp8_params& p, linear_cuda_context& c) { return linear_fp8_wgmma_cuda(p, c, nullptr); },
      /*same_bits_again=*/true, /*bad_y_stride=*/129);
}

TEST(linear_cuda, fp8_tensor_cores_refuse_what_they_do_not_take) {
  HART_SKIP_WITHOUT_CUDA();
  auto ctx = make_context();
  ASSERT_TRUE(ctx);
  device_vec<float> d(std::vector<float>(4096, 0.0f));
  device_vec<uint8_t> q(std::vector<uint8_t>(65536, 0));
  linear_fp8_params p{d.get(), q.get(), q.get(), d.get(), 2, 200, 128};  // in % 128 != 0
  EXPECT_FALSE(linear_fp8_tc_supported(p));
  EXPECT_EQ(linear_fp8_tc_cuda(p, *ctx, nullptr).code(), status_code::unimplemented);
  p.in = 128;
  p.out = 100;  // out % 128 != 0
  EXPECT_EQ(linear_fp8_tc_cuda(p, *ctx, nullptr).code(), status_code::unimplemented);
  p.out = 128;
  p.quantize_input = false;
  EXPECT_EQ(linear_fp8_tc_cuda(p, *ctx, nullptr).code(), status_code::unimplemented);
  p.quantize_input = true;
  p.n_rows = 1000;  // over the context's 256 rows
  EXPECT_EQ(linear_fp8_tc_cuda(p, *ctx, nullptr).code(), status_code::resource_exhausted);
}

TEST(linear_cuda, fp8_rejects_bad_arguments) {
  HART_SKIP_WITHOUT_CUDA();
  auto ctx = linear_cuda_context::create(4, 256);
  ASSERT_TRUE(ctx.ok()) << ctx.get_status().to_string();
  device_vec<float> d(std::vector<float>(1024, 0.0f));
  device_vec<uint8_t> q(std::vector<uint8_t>(1024, 0));
  const linear_fp8_params ok{d.get(), q.get(), q.get(), d.get(), 1, 4, 4};
  EXPECT_TRUE(linear_fp8_cuda(ok, **ctx, nullptr).ok());
  linear_fp8_params p = ok;
  p.w_scale = nullptr;
  EXPECT_EQ(linear_fp8_cuda(p, **ctx, nullptr).code(), status_code::invalid_argument);
  p = ok;
  p.in = 0;
  EXPECT_EQ(linear_fp8_cuda(p, **ctx, nullptr).code(), status_code::invalid_argument);
  p = ok;
  p.x_stride = 2;
  EXPECT_EQ(linear_fp8_cuda(p, **ctx, nullptr).code(), status_code::invalid_argument);
  p = ok;
  p.n_rows = 5;  // over the context's 4-row buffer
  EXPECT_EQ(linear_fp8_cuda(p, **ctx, nullptr).code(), status_code::resource_exhausted);
  p = ok;
  p.in = 257;
  EXPECT_EQ(linear_fp8_cuda(p, **ctx, nullptr).code(), status_code::resource_exhausted);
}

}  // namespace
}  // namespace hart

#endif  // HART_CUDA
