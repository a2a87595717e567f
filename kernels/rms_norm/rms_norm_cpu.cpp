#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"
#include "runtime/core/codecs.h"

#include <algorithm>
#include <cmath>

namespace hart {

float sum_squares_torch_order(const float* x, int64_t dim) {
  if (dim % 4) {  // no float4 path: the exactly rounded sum
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[i]) * double(x[i]);
    return float(ss);
  }
  const int64_t n_vec = dim / 4;
  int64_t lanes = 1;
  while (lanes * 2 <= std::min<int64_t>(n_vec, 32)) lanes *= 2;
  float lane[32];
  for (int64_t i = 0; i < lanes; ++i) {
    float acc[4] = {0, 0, 0, 0};
    for (int64_t v = i; v < n_vec; v += lanes) {
      for (int64_t k = 0; k < 4; ++k) acc[k] += x[4 * v + k] * x[4 * v + k];
    }
    lane[i] = ((acc[0] + acc[1]) + acc[2]) + acc[3];
  }
  for (int64_t off = lanes / 2; off >= 1; off >>= 1) {
    for (int64_t i = 0; i < off; ++i) lane[i] += lane[i + off];
  }
  return lane[0];
}

namespace {

// 1 / rms as the official per-head q RMS computes it on bf16 tensors (runtime/model
// attention.cpp's head_rms_bf16): each x² rounded, summed in fp32 in channel order,
// the mean, mean + eps and the reciprocal square root each rounded.
float head_inv_rms_bf16(const float* x, int64_t dim, float eps) {
  float acc = 0;
  for (int64_t i = 0; i < dim; ++i) acc += round_to_bf16(x[i] * x[i]);
  const float mean = round_to_bf16(acc * (1.0f / float(dim)));
  return round_to_bf16(1.0f / std::sqrt(round_to_bf16(mean + eps)));
}

}  // namespace

status rms_norm_cpu(const rms_norm_params& p) {
  if (!p.x || !p.y) return invalid_argument("rms_norm: null pointer");
  if (p.dim <= 0 || p.n_rows < 0) return invalid_argument("rms_norm: bad dim %lld", (long long)p.dim);
  HART_RETURN_IF_ERROR(rms_norm_rope_check(p));
  const int64_t xs = p.x_stride ? p.x_stride : p.dim;
  const int64_t ys = p.y_stride ? p.y_stride : p.dim;
#pragma omp parallel for schedule(static) if (p.n_rows > 64)
  for (int64_t r = 0; r < p.n_rows; ++r) {
    const float* x = p.x + r * xs;
    float* y = p.y + r * ys;
    if (p.bf16 && !p.w) {
      const float inv = head_inv_rms_bf16(x, p.dim, p.eps);
      for (int64_t i = 0; i < p.dim; ++i) y[i] = round_to_bf16(x[i] * inv);
      continue;
    }
    const bool official = p.official || p.bf16;
    float mean_square;
    if (official) {
      mean_square = sum_squares_torch_order(x, p.dim) * (1.0f / float(p.dim));
    } else {
      double ss = 0;
      for (int64_t i = 0; i < p.dim; ++i) ss += double(x[i]) * double(x[i]);
      mean_square = float(ss / double(p.dim));
    }
    // official: rsqrt rounded once (1 / sqrtf rounds twice, off by an ulp often enough to
    // flip a bf16 output).
    const float inv = official ? float(1.0 / std::sqrt(double(mean_square + p.eps)))
                               : 1.0f / std::sqrt(mean_square + p.eps);
    for (int64_t i = 0; i < p.dim; ++i) {
      const float v = x[i] * inv;
      const float out = p.w ? p.w[i] * v : v;
      y[i] = p.bf16 ? round_to_bf16(out) : out;
    }
  }
  if (!p.rope_pos) return {};
  for (int64_t r = 0; r < p.n_rows; ++r) {  // rope_cpu on each row as one head
    HART_RETURN_IF_ERROR(rope_cpu({p.y + r * ys, p.rope_pos + r / p.rope_rows_per_pos, p.rope_inv_freq, 1, 1,
                                   p.dim, p.rope_dim, 0, p.rope_attention_factor, false, p.bf16}));
  }
  return {};
}

status rms_norm_rope_check(const rms_norm_params& p) {
  if (!p.rope_pos) return {};
  if (!p.rope_inv_freq) return invalid_argument("rms_norm: rope_pos without rope_inv_freq");
  if (p.rope_dim <= 0 || p.rope_dim % 2 || p.rope_dim > p.dim || p.rope_rows_per_pos <= 0) {
    return invalid_argument(
        "rms_norm: rope_dim %lld must be even and in (0, dim %lld], rope_rows_per_pos %lld >= 1",
        (long long)p.rope_dim, (long long)p.dim, (long long)p.rope_rows_per_pos);
  }
  return {};
}

}  // namespace hart
