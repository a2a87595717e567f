// The fused device re-quantization (weight_requant.h) against the host quant
// ops it replaces, bitwise, on fresh random weights: whole and partial
// 128x128 tiles, column counts that are and are not multiples of 4, a
// misaligned base (the scalar path), tiles of very different magnitudes, zero
// tiles; NaN and infinity refused as the host refuses them. Skips without a device.
#include "runtime/gpu/weight_requant.h"

#include "kernels/linear/linear.h"
#include "kernels/quant/quant.h"
#include "kernels/testing/op_test_util.h"
#include "runtime/core/codecs.h"
#include "runtime/gpu/gpu_engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace hart::gpu {
namespace {

using hart::testing::seed_trace;
using hart::testing::test_seed;

constexpr int64_t k_block = 128;

#define SKIP_WITHOUT_GPU() \
  if (!gpu_device_available()) GTEST_SKIP() << "no CUDA device: the device re-quantization not checked here"

int64_t n_scales(int64_t out, int64_t in) {
  return ((out + k_block - 1) / k_block) * ((in + k_block - 1) / k_block);
}

// Weights whose 128x128 tiles span 2^-20..2^10 in magnitude; every fifth tile
// from the fourth on is zero (only the amax floor sets its scale).
std::vector<float> random_weight(std::mt19937& rng, int64_t out, int64_t in) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int> ex(-20, 10);
  std::vector<int> tile_exp(size_t(n_scales(out, in)));
  for (size_t t = 0; t < tile_exp.size(); ++t) tile_exp[t] = t % 5 == 3 ? INT32_MIN : ex(rng);
  const int64_t n_ct = (in + k_block - 1) / k_block;
  std::vector<float> w(size_t(out * in));
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in; ++c) {
      const int e = tile_exp[size_t((r / k_block) * n_ct + c / k_block)];
      w[size_t(r * in + c)] = e == INT32_MIN ? 0.f : std::ldexp(nd(rng), e);
    }
  }
  return w;
}

struct host_result {
  std::vector<float> v;
  std::vector<uint8_t> codes, scales;
  bool exact = false;
};

// What the fresh fp8 load computes on the host.
host_result host_requant(const std::vector<float>& raw, int64_t out, int64_t in) {
  host_result h;
  h.v = raw;
  h.codes.resize(raw.size());
  h.scales.resize(size_t(n_scales(out, in)));
  EXPECT_TRUE(fp8_block_quantize(h.v.data(), out, in, k_block, h.codes.data(), h.scales.data()).ok());
  EXPECT_TRUE(fp8_block_dequantize(h.codes.data(), h.scales.data(), out, in, k_block, h.v.data()).ok());
  EXPECT_TRUE(fp8_block_quantize(h.v.data(), out, in, k_block, h.codes.data(), h.scales.data()).ok());
  std::vector<float> back(raw.size());
  EXPECT_TRUE(fp8_block_dequantize(h.codes.data(), h.scales.data(), out, in, k_block, back.data()).ok());
  h.exact = std::memcmp(back.data(), h.v.data(), back.size() * sizeof(float)) == 0;
  return h;
}

// Bitwise, NaN payloads included: the device must round exactly as the host.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t differ = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && differ++ == 0) first = int64_t(i);
  }
  EXPECT_EQ(differ, 0) << what << ": " << differ << " values differ, first at " << first << " (got "
                       << (first >= 0 ? got[size_t(first)] : 0.f) << " want "
                       << (first >= 0 ? want[size_t(first)] : 0.f) << ")";
}

struct device_case {
  device_buffer w, codes, scales;
  float* wp = nullptr;  // w's base plus the misalignment
};

// Runs weight_requant_fp8 (or weight_qdq_fp8 when !full) on `raw` at `offset` floats into its buffer.
void run_case(const std::vector<float>& raw, int64_t out, int64_t in, int64_t offset, bool full,
              const char* label) {
  SCOPED_TRACE(std::string(label) + " " + std::to_string(out) + "x" + std::to_string(in) + " offset " +
               std::to_string(offset));
  const host_result want = host_requant(raw, out, in);
  auto w = device_buffer::create((raw.size() + size_t(offset)) * sizeof(float));
  auto codes = device_buffer::create(raw.size() + 1);
  auto scales = device_buffer::create(size_t(n_scales(out, in)));
  ASSERT_TRUE(w.ok() && codes.ok() && scales.ok());
  float* wp = static_cast<float*>(w->get()) + offset;
  ASSERT_EQ(cudaMemcpy(wp, raw.data(), raw.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<float> v(raw.size());
  if (!full) {
    ASSERT_TRUE(weight_qdq_fp8(wp, out, in, nullptr, nullptr).ok());
    ASSERT_EQ(cudaMemcpy(v.data(), wp, v.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<float> qdq = raw;
    std::vector<uint8_t> q(raw.size()), s(size_t(n_scales(out, in)));
    ASSERT_TRUE(fp8_block_quantize(qdq.data(), out, in, k_block, q.data(), s.data()).ok());
    ASSERT_TRUE(fp8_block_dequantize(q.data(), s.data(), out, in, k_block, qdq.data()).ok());
    expect_same_bits(v, qdq, "QDQ values");
    return;
  }
  weight_requant_scratch sc;
  ASSERT_TRUE(sc.reserve().ok());
  auto* cp = static_cast<uint8_t*>(codes->get()) + (offset % 2);  // odd offsets misalign the codes too
  auto exact = weight_requant_fp8(wp, out, in, cp, static_cast<uint8_t*>(scales->get()), sc, nullptr);
  ASSERT_TRUE(exact.ok()) << exact.get_status().to_string();
  std::vector<uint8_t> gc(raw.size()), gs(want.scales.size());
  ASSERT_EQ(cudaMemcpy(v.data(), wp, v.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(gc.data(), cp, gc.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(gs.data(), scales->get(), gs.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  // Exact: w left raw, the codes carry v. Not exact: w holds v, which the engine keeps.
  expect_same_bits(v, want.exact ? raw : want.v, want.exact ? "w left raw" : "QDQ values in w");
  EXPECT_TRUE(gc == want.codes) << "codes differ";
  EXPECT_TRUE(gs == want.scales) << "scales differ";
  EXPECT_EQ(*exact, want.exact);
}

TEST(weight_requant, equals_the_host_load_bitwise) {
  SKIP_WITHOUT_GPU();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  struct shape {
    int64_t out, in;
  };
  for (const shape s : {shape{128, 128}, shape{300, 200}, shape{130, 131}, shape{1, 5}, shape{256, 384},
                        shape{7, 1024}, shape{1024, 4096}}) {
    const std::vector<float> raw = random_weight(rng, s.out, s.in);
    for (const int64_t offset : {0, 1}) {
      run_case(raw, s.out, s.in, offset, true, "requant");
      run_case(raw, s.out, s.in, offset, false, "qdq");
    }
  }
}

// The e4m3 rounding edges, where a hardware conversion and the host codec
// could part: every code's value, the midpoints between neighbours (ties to
// even) and the floats either side of them, subnormals and the ties below the
// smallest one, both signs, in tiles whose amax (448 or 448·2^k) makes the
// scale exactly 1 or 2^k (the divided values land on the edges themselves).
TEST(weight_requant, rounding_edges_equal_the_host_bitwise) {
  SKIP_WITHOUT_GPU();
  std::vector<float> edges;
  for (int c = 0; c < 0x7e; ++c) {
    const float a = f32_from_e4m3(uint8_t(c)), b = f32_from_e4m3(uint8_t(c + 1)), mid = 0.5f * (a + b);
    for (const float v : {a, mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f), b}) {
      edges.push_back(v);
      edges.push_back(-v);
    }
  }
  for (const float v :
       {0x1p-10f, 0x1p-11f, 0x1.8p-10f, 0x1p-30f, 0x1p-126f, 0x1p-149f}) {  // round to 0 or 2^-9
    edges.push_back(v);
    edges.push_back(-v);
  }
  for (const int k : {0, -5, 7}) {
    const int64_t out = 128, in = 128;
    std::vector<float> raw(size_t(out * in), 0.f);
    for (size_t i = 0; i < edges.size() && i < raw.size(); ++i) raw[i] = std::ldexp(edges[i], k);
    raw.back() = std::ldexp(448.f, k);  // the tile's amax: scale 2^k
    for (const int64_t offset : {0, 1}) run_case(raw, out, in, offset, true, "edges");
  }
}

TEST(weight_requant, non_finite_weights_are_refused_as_on_the_host) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    std::vector<float> raw = random_weight(rng, 256, 256);
    raw[128 * 256 + 3] = bad;
    std::vector<float> v = raw;
    std::vector<uint8_t> q(raw.size()), sc(4);
    EXPECT_FALSE(fp8_block_quantize(v.data(), 256, 256, k_block, q.data(), sc.data()).ok())
        << "the host refuses " << bad;
    auto w = device_buffer::create(raw.size() * sizeof(float));
    auto codes = device_buffer::create(raw.size());
    auto scales = device_buffer::create(4);
    ASSERT_TRUE(w.ok() && codes.ok() && scales.ok());
    auto* wp = static_cast<float*>(w->get());
    ASSERT_EQ(cudaMemcpy(wp, raw.data(), raw.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    weight_requant_scratch s;
    ASSERT_TRUE(s.reserve().ok());
    auto r = weight_requant_fp8(wp, 256, 256, static_cast<uint8_t*>(codes->get()),
                                static_cast<uint8_t*>(scales->get()), s, nullptr);
    EXPECT_FALSE(r.ok()) << "requant of a weight holding " << bad;
    if (!r.ok()) {
      EXPECT_NE(r.get_status().to_string().find("non-finite"), std::string::npos)
          << r.get_status().to_string();
    }
    weight_requant_scratch s2;
    ASSERT_TRUE(s2.reserve().ok());
    ASSERT_TRUE(s2.check(nullptr).ok()) << "fresh counters";
    ASSERT_TRUE(weight_qdq_fp8(wp, 256, 256, s2.count(), nullptr).ok());
    EXPECT_FALSE(s2.check(nullptr).ok()) << "qdq of a weight holding " << bad;
  }
}

// weight_requant_mxfp4_async on `raw` [out, in] against the host's
// mxfp4_quantize + mxfp4_mma_order, bitwise; the non-finite count it adds.
uint32_t expect_mxfp4_as_host(const std::vector<float>& raw, int64_t out, int64_t in, const char* label) {
  SCOPED_TRACE(std::string(label) + " " + std::to_string(out) + "x" + std::to_string(in));
  std::vector<uint8_t> want_pairs(raw.size() / 2), want_scales(raw.size() / 32);
  const bool finite = mxfp4_quantize(raw.data(), out, in, want_pairs.data(), want_scales.data()).ok();
  if (finite) {
    EXPECT_TRUE(mxfp4_mma_order(want_pairs.data(), out, in, want_pairs.data()).ok());
  }
  auto w = device_buffer::create(raw.size() * sizeof(float));
  auto pairs = device_buffer::create(raw.size() / 2);
  auto scales = device_buffer::create(raw.size() / 32);
  weight_requant_scratch sc;
  EXPECT_TRUE(w.ok() && pairs.ok() && scales.ok() && sc.reserve().ok());
  if (!w.ok() || !pairs.ok() || !scales.ok() || !sc.count()) return 0;
  EXPECT_EQ(cudaMemcpy(w->get(), raw.data(), raw.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_TRUE(weight_requant_mxfp4_async(static_cast<const float*>(w->get()), out, in,
                                         static_cast<uint8_t*>(pairs->get()),
                                         static_cast<uint8_t*>(scales->get()), sc.count(), nullptr)
                  .ok());
  uint32_t counts[2] = {0, 0};
  EXPECT_EQ(cudaMemcpy(counts, sc.count(), sizeof counts, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(counts[0], 0u);
  if (!finite) return counts[1];
  std::vector<uint8_t> got_pairs(want_pairs.size()), got_scales(want_scales.size());
  EXPECT_EQ(cudaMemcpy(got_pairs.data(), pairs->get(), got_pairs.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(cudaMemcpy(got_scales.data(), scales->get(), got_scales.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  size_t bad = 0;
  while (bad < got_pairs.size() && got_pairs[bad] == want_pairs[bad]) ++bad;
  EXPECT_EQ(bad, got_pairs.size()) << "pairs differ first at byte " << bad;
  EXPECT_TRUE(got_scales == want_scales) << "scales differ";
  return counts[1];
}

// Routed experts of a model served MXFP4 (a weight update): random weights
// whose 32-blocks span 2^-140..2^10 (subnormal blocks only the amax floor
// scales; every seventh block zero), and blocks holding every e2m1 value, the
// midpoints between neighbours (ties to even) and the floats either side of
// them at scales 2^0, 2^-5 and 2^7.
TEST(weight_requant, mxfp4_equals_the_host_quantizer_in_the_kernels_order) {
  SKIP_WITHOUT_GPU();
  const uint32_t seed = test_seed();
  SCOPED_TRACE(seed_trace(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int> ex(-140, 10);
  struct shape {
    int64_t out, in;
  };
  for (const shape s : {shape{1, 128}, shape{128, 128}, shape{300, 384}, shape{7, 1024}, shape{512, 4096}}) {
    std::vector<float> raw(size_t(s.out * s.in));
    for (size_t b = 0; b < raw.size() / 32; ++b) {
      const int e = ex(rng);
      for (size_t i = 0; i < 32; ++i) raw[b * 32 + i] = b % 7 == 3 ? 0.f : std::ldexp(nd(rng), e);
    }
    EXPECT_EQ(expect_mxfp4_as_host(raw, s.out, s.in, "random"), 0u);
  }
  std::vector<float> edges;
  const float codes[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (int c = 0; c < 7; ++c) {
    const float mid = 0.5f * (codes[c] + codes[c + 1]);
    for (const float v : {codes[c], mid, std::nextafter(mid, 0.f), std::nextafter(mid, 9.f)}) {
      edges.push_back(v);
      edges.push_back(-v);
    }
  }
  std::vector<float> raw(size_t(64 * 128), 0.f);
  for (size_t b = 0; b < raw.size() / 32; ++b) {
    const int k = b % 3 == 0 ? 0 : b % 3 == 1 ? -5 : 7;
    for (size_t i = 0; i < 31; ++i) raw[b * 32 + i] = std::ldexp(edges[(b * 31 + i) % edges.size()], k);
    raw[b * 32 + 31] = std::ldexp(6.f, k);  // the block's amax: scale 2^k
  }
  EXPECT_EQ(expect_mxfp4_as_host(raw, 64, 128, "edges"), 0u);
  for (const float bad : {std::nanf(""), INFINITY}) {
    std::vector<float> r = raw;
    r[700] = bad;
    EXPECT_EQ(expect_mxfp4_as_host(r, 64, 128, "non-finite"), 1u) << "counted, as the host refuses " << bad;
  }
  EXPECT_FALSE(weight_requant_mxfp4_async(nullptr, 4, 100, nullptr, nullptr, nullptr, nullptr).ok())
      << "columns not a multiple of 128";
}

TEST(weight_requant, bad_arguments) {
  SKIP_WITHOUT_GPU();
  weight_requant_scratch sc;
  float* none = nullptr;
  EXPECT_FALSE(weight_requant_fp8(none, 4, 4, nullptr, nullptr, sc, nullptr).ok()) << "scratch not reserved";
  ASSERT_TRUE(sc.reserve().ok());
  EXPECT_FALSE(weight_requant_fp8(none, 4, 4, nullptr, nullptr, sc, nullptr).ok()) << "null pointers";
  EXPECT_FALSE(weight_qdq_fp8(none, -1, 4, nullptr, nullptr).ok()) << "negative shape";
  auto empty = weight_requant_fp8(none, 0, 4, nullptr, nullptr, sc, nullptr);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(*empty) << "nothing to check is exact";
}

}  // namespace
}  // namespace hart::gpu
