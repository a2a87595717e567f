// File: kernels/quant/quant_test_util.h — helpers shared by the two halves of the
// quant tests, quant_test.cpp (CPU) and quant_cuda_test.cpp (CUDA parity): format
// tables from the definitions, random multi-binade data, seeding.
#pragma once

#include "kernels/testing/op_test_util.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace hart::quant_testing {

// Magnitudes by code, from the format definitions.
inline std::vector<double> e4m3_mags() {
  std::vector<double> t;
  for (int c = 0; c <= 0x7e; ++c) {
    const int e = c >> 3, m = c & 7;
    t.push_back(e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7));
  }
  return t;
}

inline std::vector<double> e2m1_mags() {
  return {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
}

inline uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Random data whose per-block magnitude spans many binades, so scales, floors
// and e4m3 subnormals are all exercised.
inline std::vector<float> random_blocks(std::mt19937& rng, int64_t n, int64_t block, int lo, int hi) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exp(lo, hi);
  std::vector<float> x(n);
  for (int64_t b = 0; b < n / block; ++b) {
    const float mag = std::ldexp(1.0f, exp(rng));
    for (int64_t i = 0; i < block; ++i) x[b * block + i] = normal(rng) * mag;
  }
  return x;
}

// env: HART_TEST_SEED replays a run (testing::test_seed).
struct seeded {
  uint32_t seed = testing::test_seed();
  std::mt19937 rng{seed};
  std::string trace() const { return testing::seed_trace(seed); }
};

// Rows with magnitudes spread over many binades.
inline std::vector<float> random_matrix(std::mt19937& rng, int64_t rows, int64_t cols) {
  std::vector<float> w = random_blocks(rng, rows * cols, cols, -20, 10);
  return w;
}

}  // namespace hart::quant_testing
