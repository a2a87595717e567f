#include "kernels/mhc/mhc.h"
#include "kernels/rms_norm/rms_norm.h"
#include "runtime/core/codecs.h"

#include <cmath>
#include <vector>

namespace hart {
namespace {

float sigmoid(float v) {
  return 1.0f / (1.0f + std::exp(-v));
}

// mix[o] = (x · fn[o]) * rsqrt(mean(x^2) + eps) over the flattened n_hc*dim streams;
// `official`: the mean square in the reference's order and the rsqrt rounded once.
void hc_mix(const float* x, const float* fn, int64_t n_out, int64_t width, float eps, bool official,
            float* mix) {
  float mean_square;
  if (official) {
    mean_square = sum_squares_torch_order(x, width) * (1.0f / float(width));
  } else {
    double ss = 0;
    for (int64_t i = 0; i < width; ++i) ss += double(x[i]) * double(x[i]);
    mean_square = float(ss / double(width));
  }
  const float r =
      official ? float(1.0 / std::sqrt(double(mean_square + eps))) : 1.0f / std::sqrt(mean_square + eps);
  for (int64_t o = 0; o < n_out; ++o) {
    const float* w = fn + o * width;
    double acc = 0;
    for (int64_t i = 0; i < width; ++i) acc += double(x[i]) * double(w[i]);
    mix[o] = float(acc) * r;
  }
}

}  // namespace

status hc_pre_cpu(const hc_pre_params& p) {
  if (!p.x || !p.fn || !p.base || !p.scale || !p.collapsed || !p.post || !p.comb) {
    return invalid_argument("hc_pre: null pointer");
  }
  if (p.n_hc <= 0 || p.dim <= 0 || p.sinkhorn_iters < 1) return invalid_argument("hc_pre: bad sizes");
  const int64_t n = p.n_hc, width = n * p.dim, n_mix = (2 + n) * n;
  const bool official = p.official || p.bf16;
#pragma omp parallel for schedule(static) if (p.n_tokens > 8)
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const float* x = p.x + t * width;
    std::vector<float> mix(n_mix);
    hc_mix(x, p.fn, n_mix, width, p.norm_eps, official, mix.data());
    std::vector<float> pre(n);
    for (int64_t i = 0; i < n; ++i) {
      pre[i] = sigmoid(mix[i] * p.scale[0] + p.base[i]) + p.hc_eps;
      p.post[t * n + i] = 2.0f * sigmoid(mix[n + i] * p.scale[1] + p.base[n + i]);
    }
    float* c = p.comb + t * n * n;  // c[j*n + k]: input stream j -> output stream k
    for (int64_t j = 0; j < n; ++j) {
      float mx = -INFINITY;
      for (int64_t k = 0; k < n; ++k) {
        c[j * n + k] = mix[2 * n + j * n + k] * p.scale[2] + p.base[2 * n + j * n + k];
        mx = std::fmax(mx, c[j * n + k]);
      }
      float sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += (c[j * n + k] = std::exp(c[j * n + k] - mx));
      for (int64_t k = 0; k < n; ++k) c[j * n + k] = c[j * n + k] / sum + p.hc_eps;
    }
    auto normalize_cols = [&] {
      for (int64_t k = 0; k < n; ++k) {
        float s = 0;
        for (int64_t j = 0; j < n; ++j) s += c[j * n + k];
        for (int64_t j = 0; j < n; ++j) c[j * n + k] /= s + p.hc_eps;
      }
    };
    auto normalize_rows = [&] {
      for (int64_t j = 0; j < n; ++j) {
        float s = 0;
        for (int64_t k = 0; k < n; ++k) s += c[j * n + k];
        for (int64_t k = 0; k < n; ++k) c[j * n + k] /= s + p.hc_eps;
      }
    };
    normalize_cols();
    for (int64_t it = 1; it < p.sinkhorn_iters; ++it) {
      normalize_rows();
      normalize_cols();
    }
    float* out = p.collapsed + t * p.dim;
    for (int64_t d = 0; d < p.dim; ++d) {
      float acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += pre[i] * x[i * p.dim + d];
      out[d] = p.bf16 ? round_to_bf16(acc) : acc;
    }
  }
  return {};
}

status hc_post_cpu(const hc_post_params& p) {
  if (!p.x || !p.y || !p.post || !p.comb || !p.out) return invalid_argument("hc_post: null pointer");
  if (p.out == p.x) return invalid_argument("hc_post: out must not alias x");
  const int64_t n = p.n_hc;
  const bool official = p.official || p.bf16;
#pragma omp parallel for schedule(static) if (p.n_tokens > 8)
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const float* x = p.x + t * n * p.dim;
    const float* y = p.y + t * p.dim;
    const float* c = p.comb + t * n * n;
    float* o = p.out + t * n * p.dim;
    for (int64_t k = 0; k < n; ++k) {
      const float pk = p.post[t * n + k];
      for (int64_t d = 0; d < p.dim; ++d) {
        if (official) {  // post·y + (Σ_j comb·x): the sum over input streams first, as the reference adds
          float mixed = 0;
          for (int64_t j = 0; j < n; ++j) mixed += c[j * n + k] * x[j * p.dim + d];
          const float sum = pk * y[d] + mixed;
          o[k * p.dim + d] = p.bf16 ? round_to_bf16(sum) : sum;
          continue;
        }
        float acc = pk * y[d];
        for (int64_t j = 0; j < n; ++j) acc += c[j * n + k] * x[j * p.dim + d];
        o[k * p.dim + d] = acc;
      }
    }
  }
  return {};
}

status hc_head_cpu(const hc_head_params& p) {
  if (!p.x || !p.fn || !p.base || !p.scale || !p.out) return invalid_argument("hc_head: null pointer");
  const int64_t n = p.n_hc, width = n * p.dim;
#pragma omp parallel for schedule(static) if (p.n_tokens > 8)
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const float* x = p.x + t * width;
    std::vector<float> mix(n);
    hc_mix(x, p.fn, n, width, p.norm_eps, p.official || p.bf16, mix.data());
    for (int64_t i = 0; i < n; ++i) mix[i] = sigmoid(mix[i] * p.scale[0] + p.base[i]) + p.hc_eps;
    for (int64_t d = 0; d < p.dim; ++d) {
      float acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += mix[i] * x[i * p.dim + d];
      p.out[t * p.dim + d] = p.bf16 ? round_to_bf16(acc) : acc;
    }
  }
  return {};
}

}  // namespace hart
