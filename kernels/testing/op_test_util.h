// File: kernels/testing/op_test_util.h — helpers shared by the kernels/<op>/*_test.cpp
// files: seeding, comparison against a double reference, random inputs, guard regions.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace hart::testing {

/// Seed for a test's RNG. env: HART_TEST_SEED replays a run with the seed
/// printed by SCOPED_TRACE(seed_trace(seed)); otherwise a fresh random seed.
inline uint32_t test_seed() {
  if (const char* s = std::getenv("HART_TEST_SEED"))
    return static_cast<uint32_t>(std::strtoul(s, nullptr, 10));
  return std::random_device{}();
}

/// "seed=<seed>", for SCOPED_TRACE.
inline std::string seed_trace(uint32_t seed) {
  return "seed=" + std::to_string(seed);
}

inline const float k_nan = std::numeric_limits<float>::quiet_NaN();
inline const float k_inf = std::numeric_limits<float>::infinity();

/// Fill of guard regions and row gaps; an op must never overwrite it.
constexpr float k_sentinel = -7.25e33f;

/// got within tol of want; a NaN or Inf on either side must match exactly.
inline bool value_close(double got, double want, double tol) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (std::isinf(got) || std::isinf(want)) return got == want;
  return std::fabs(got - want) <= tol;
}

/// |got[i] - want[i]| <= atol + rtol·mag[i] for i < n (value_close); want and
/// mag must hold n values. Vector callers pass v.data(), v.size().
inline ::testing::AssertionResult all_close(const float* got, size_t n, const std::vector<double>& want,
                                            const std::vector<double>& mag, double rtol, double atol) {
  if (n != want.size() || n != mag.size()) {
    return ::testing::AssertionFailure()
           << "size mismatch: got " << n << " want " << want.size() << " mag " << mag.size();
  }
  int64_t n_bad = 0;
  std::ostringstream os;
  os << std::setprecision(9);
  for (size_t i = 0; i < n; ++i) {
    const double g = got[i], w = want[i], tol = atol + rtol * mag[i];
    if (!value_close(g, w, tol) && n_bad++ < 8) {
      os << "\n  [" << i << "] got " << g << " want " << w << " (tol " << tol << ")";
    }
  }
  if (n_bad) return ::testing::AssertionFailure() << n_bad << " of " << n << " differ:" << os.str();
  return ::testing::AssertionSuccess();
}

/// n values drawn from N(0, sigma²).
inline std::vector<float> normal_vec(std::mt19937& rng, size_t n, float sigma) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& e : v) e = nd(rng);
  return v;
}

/// n_guard sentinels, n_body copies of body_fill, n_guard sentinels; the op
/// writes to data() + n_guard.
inline std::vector<float> guarded_buffer(size_t n_body, size_t n_guard, float body_fill,
                                         float sentinel = k_sentinel) {
  std::vector<float> v(n_body + 2 * n_guard, sentinel);
  for (size_t i = 0; i < n_body; ++i) v[n_guard + i] = body_fill;
  return v;
}

/// The first and last n_guard elements of buf still hold sentinel.
inline ::testing::AssertionResult guards_intact(const std::vector<float>& buf, size_t n_guard,
                                                float sentinel = k_sentinel) {
  if (buf.size() < 2 * n_guard) return ::testing::AssertionFailure() << "buffer shorter than its guards";
  for (size_t i = 0; i < n_guard; ++i) {
    if (buf[i] != sentinel)
      return ::testing::AssertionFailure() << "guard before body clobbered at " << i << ": " << buf[i];
    const size_t j = buf.size() - n_guard + i;
    if (buf[j] != sentinel)
      return ::testing::AssertionFailure() << "guard after body clobbered at " << j << ": " << buf[j];
  }
  return ::testing::AssertionSuccess();
}

/// buf without its n_guard elements on each side.
inline std::vector<float> unguarded(const std::vector<float>& buf, size_t n_guard) {
  return std::vector<float>(buf.begin() + n_guard, buf.end() - n_guard);
}

}  // namespace hart::testing
