// moe_route: CUDA vs CPU slot by slot, with kernels/moe_route/moe_route_test.cpp's
// rules. Expert ids: exact, except that a slot may hold another expert when the
// two CPU keys s + bias are within 1e-6 of the token's largest |key| (a "near
// tie": CUDA's expf/log1pf differ from glibc's in the last bits); exact ties
// (logits and biases from small sets) and hash ids get no allowance. Weights:
// within 1e-6·|w| on every token whose ids match (near-tie tokens are skipped).
// The ids line's max_abs counts slots that differ, max_rel is the largest key
// gap of a differing slot over the token's max |key|.
#include "kernels/moe_route/moe_route.h"
#include "kernels/testing/op_check_util.h"

#include <algorithm>
#include <cmath>

namespace hart::op_check_detail {
namespace {

constexpr double k_near_tie = 1e-6;

double ref_score(float x) {
  const double v = x;
  return std::sqrt(v > 20.0 ? v : std::log1p(std::exp(v)));
}

struct route_case {
  const char* kind;  // "bias", "hash", "ties", "plain"
  int64_t n_tokens, n_experts, top_k;
  std::vector<float> logits, bias;  // bias empty: none
  std::vector<int32_t> hash;        // empty: score routing
  bool exact_ids;
};

status run_case(const route_case& c, float route_scale, std::vector<op_check_line>& lines) {
  const int64_t n_out = c.n_tokens * c.top_k;
  std::vector<int32_t> ids_cpu(n_out, -99), ids_gpu;
  std::vector<float> w_cpu(n_out, NAN), w_gpu;
  moe_route_params p;
  p.logits = c.logits.data();
  p.bias = c.bias.empty() ? nullptr : c.bias.data();
  p.hash_ids = c.hash.empty() ? nullptr : c.hash.data();
  p.experts = ids_cpu.data();
  p.weights = w_cpu.data();
  p.n_tokens = c.n_tokens;
  p.n_experts = c.n_experts;
  p.top_k = c.top_k;
  p.route_scale = route_scale;
  HART_RETURN_IF_ERROR(moe_route_cpu(p));
  dev<float> d_logits(c.logits), d_bias(c.bias), d_w(std::vector<float>(n_out, NAN));
  dev<int32_t> d_hash(c.hash), d_ids(std::vector<int32_t>(n_out, -99));
  HART_RETURN_IF_ERROR(d_ids.ok());
  p.logits = d_logits.get();
  p.bias = c.bias.empty() ? nullptr : d_bias.get();
  p.hash_ids = c.hash.empty() ? nullptr : d_hash.get();
  p.experts = d_ids.get();
  p.weights = d_w.get();
  HART_RETURN_IF_ERROR(moe_route_cuda(p, nullptr));
  HART_RETURN_IF_ERROR(cuda_status("moe_route", cudaDeviceSynchronize()));
  HART_RETURN_IF_ERROR(d_ids.to_host(ids_gpu));
  HART_RETURN_IF_ERROR(d_w.to_host(w_gpu));

  op_check_line ids{
      "moe_route_ids", "", 0, 0, c.exact_ids ? "exact (ids)" : "exact ids; near tie <= 1e-06*max|key|", true};
  std::vector<float> got_w;
  std::vector<double> want_w, mag_w;
  int64_t n_near = 0;
  std::vector<float> key(c.n_experts);
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    float key_mag = 0;
    for (int64_t e = 0; e < c.n_experts; ++e) {
      key[e] = float(ref_score(c.logits[t * c.n_experts + e])) + (c.bias.empty() ? 0.0f : c.bias[e]);
      key_mag = std::max(key_mag, std::fabs(key[e]));
    }
    bool same = true;
    for (int64_t k = 0; k < c.top_k; ++k) {
      const int32_t g = ids_gpu[t * c.top_k + k], w = ids_cpu[t * c.top_k + k];
      if (g == w) continue;
      same = false;
      ids.max_abs += 1;
      const bool valid = g >= 0 && g < c.n_experts && w >= 0 && w < c.n_experts;
      const double gap = valid ? std::fabs(double(key[g]) - double(key[w])) / double(key_mag) : INFINITY;
      ids.max_rel = std::fmax(ids.max_rel, std::isnan(gap) ? INFINITY : gap);
      if (c.exact_ids || !(gap <= k_near_tie)) ids.pass = false;
    }
    if (!same) {
      ++n_near;
      continue;
    }
    for (int64_t k = 0; k < c.top_k; ++k) {
      got_w.push_back(w_gpu[t * c.top_k + k]);
      want_w.push_back(w_cpu[t * c.top_k + k]);
      mag_w.push_back(std::fabs(double(w_cpu[t * c.top_k + k])));
    }
  }
  const std::string shape = std::string(c.kind) + " tokens=" + std::to_string(c.n_tokens) +
                            " experts=" + std::to_string(c.n_experts) + " top_k=" + std::to_string(c.top_k);
  ids.shape = shape + " near_ties=" + std::to_string(n_near);
  lines.push_back(ids);
  lines.push_back(compare("moe_route_weights", shape, got_w, want_w, mag_w, 1e-6, 1e-30,
                          "1e-06 * |w| (tokens with same ids)"));
  return {};
}

}  // namespace

status check_moe_route(uint32_t seed, std::vector<op_check_line>& lines) {
  std::mt19937 rng = op_rng(seed, "moe_route");
  const float route_scale = 1.5f;  // V4 routed_scaling_factor
  {                                // V4 decode batch: 256 experts, top-6, bias-corrected selection
    route_case c{"bias", 64, 256, 6, normal(rng, 64 * 256, 4.0f), normal(rng, 256, 0.3f), {}, false};
    c.logits[0] = 25.0f;  // past the softplus threshold
    HART_RETURN_IF_ERROR(run_case(c, route_scale, lines));
  }
  {  // V4 hash layer: fixed ids per token, the bias must not matter
    route_case c{"hash", 129, 256, 6, normal(rng, 129 * 256, 4.0f), normal(rng, 256, 1.0f), {}, true};
    c.hash.resize(129 * 6);
    std::uniform_int_distribution<int32_t> ex(0, 255);
    for (int32_t& e : c.hash) e = ex(rng);
    HART_RETURN_IF_ERROR(run_case(c, route_scale, lines));
  }
  {  // exact ties: -200 and -150 both give s = +0, biases +-0 are equal; the lowest id wins
    const float logit_set[] = {-200.0f, -150.0f, -1.0f, 0.0f, 0.5f, 2.0f, 30.0f};
    const float bias_set[] = {0.0f, -0.0f, 0.25f, -0.5f};
    std::uniform_int_distribution<int> pick_l(0, 6), pick_b(0, 3);
    route_case c{"ties", 67, 256, 6, std::vector<float>(67 * 256), std::vector<float>(256), {}, true};
    for (float& v : c.logits) v = logit_set[pick_l(rng)];
    for (float& v : c.bias) v = bias_set[pick_b(rng)];
    std::fill(c.logits.begin(), c.logits.begin() + 256, 0.5f);  // token 0: all equal
    HART_RETURN_IF_ERROR(run_case(c, route_scale, lines));
  }
  {  // odd: 257 experts, top-8, no bias
    route_case c{"plain", 19, 257, 8, normal(rng, 19 * 257, 4.0f), {}, {}, false};
    HART_RETURN_IF_ERROR(run_case(c, route_scale, lines));
  }
  return {};
}

}  // namespace hart::op_check_detail
