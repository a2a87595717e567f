#include "kernels/quant/quant.h"
#include "kernels/quant/quant_args.h"
#include "runtime/core/codecs.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

namespace hart {

namespace {

using ll = long long;
using namespace quant_args;

constexpr int64_t mxfp4_block = 32;

// max(floor, max |x[i]|) over n elements; NaN elements are skipped (fmaxf
// semantics), +-inf is kept.
float block_amax(const float* x, int64_t n, float floor) {
  float amax = floor;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) amax = a;
  }
  return amax;
}

// clamp(v, -q_max, q_max); NaN passes through.
float clamp_q(float v, float q_max) {
  return v > q_max ? q_max : (v < -q_max ? -q_max : v);
}

status check_finite(const char* op, const float* w, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(w[r * cols + c])) {
        return invalid_argument("%s: w[%lld, %lld] is not finite", op, ll(r), ll(c));
      }
    }
  }
  return {};
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

int pow2_scale_exponent(float amax, float q_max) {
  if (!(amax <= FLT_MAX)) return 128;  // +inf (what the reference bit trick gives) or NaN
  // amax / q_max = (ma / mq) * 2^(ea - eq) with ma / mq in (1/2, 2): the ceil of
  // its log2 is ea - eq, plus one exactly when ma > mq.
  int ea = 0, eq = 0;
  const float ma = std::frexp(amax, &ea);
  const float mq = std::frexp(q_max, &eq);
  return ea - eq + (ma > mq ? 1 : 0);
}

// -- activations --------------------------------------------------------------

status act_quant_fp8(const float* x, int64_t n, int64_t block, uint8_t* q, float* scales) {
  const char* op = "act_quant_fp8";
  HART_RETURN_IF_ERROR(check_blocks(op, n, block));
  HART_RETURN_IF_ERROR(check_ptr(op, "x", x, n));
  HART_RETURN_IF_ERROR(check_ptr(op, "q", q, n));
  HART_RETURN_IF_ERROR(check_ptr(op, "scales", scales, n));
  for (int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    const float s = std::ldexp(1.0f, pow2_scale_exponent(block_amax(xb, block, fp8_amax_floor), e4m3_max));
    scales[b] = s;
    for (int64_t i = 0; i < block; ++i) q[b * block + i] = e4m3_from_f32(clamp_q(xb[i] / s, e4m3_max));
  }
  return {};
}

status act_dequant_fp8(const uint8_t* q, const float* scales, int64_t n, int64_t block, float* out) {
  const char* op = "act_dequant_fp8";
  HART_RETURN_IF_ERROR(check_blocks(op, n, block));
  HART_RETURN_IF_ERROR(check_ptr(op, "q", q, n));
  HART_RETURN_IF_ERROR(check_ptr(op, "scales", scales, n));
  HART_RETURN_IF_ERROR(check_ptr(op, "out", out, n));
  for (int64_t i = 0; i < n; ++i) out[i] = f32_from_e4m3(q[i]) * scales[i / block];
  return {};
}

status act_quant_fp8_qdq(float* x, int64_t n, int64_t block) {
  const char* op = "act_quant_fp8_qdq";
  HART_RETURN_IF_ERROR(check_blocks(op, n, block));
  HART_RETURN_IF_ERROR(check_ptr(op, "x", x, n));
  for (int64_t b = 0; b < n / block; ++b) {
    float* xb = x + b * block;
    const float s = std::ldexp(1.0f, pow2_scale_exponent(block_amax(xb, block, fp8_amax_floor), e4m3_max));
    for (int64_t i = 0; i < block; ++i)
      xb[i] = f32_from_e4m3(e4m3_from_f32(clamp_q(xb[i] / s, e4m3_max))) * s;
  }
  return {};
}

status fp4_act_qdq(float* x, int64_t n, int64_t block) {
  const char* op = "fp4_act_qdq";
  HART_RETURN_IF_ERROR(check_blocks(op, n, block));
  HART_RETURN_IF_ERROR(check_ptr(op, "x", x, n));
  for (int64_t b = 0; b < n / block; ++b) {
    float* xb = x + b * block;
    const float s = std::ldexp(1.0f, pow2_scale_exponent(block_amax(xb, block, fp4_amax_floor), e2m1_max));
    for (int64_t i = 0; i < block; ++i)
      xb[i] = f32_from_e2m1(e2m1_from_f32(clamp_q(xb[i] / s, e2m1_max))) * s;
  }
  return {};
}

// -- Hadamard -------------------------------------------------------------------

status hadamard_transform(float* x, int64_t n, float scale) {
  const char* op = "hadamard_transform";
  if (n < 1 || (n & (n - 1)) != 0) return invalid_argument("%s: n=%lld is not a power of two", op, ll(n));
  HART_RETURN_IF_ERROR(check_ptr(op, "x", x, n));
  // NOTE(quant): fp64 butterflies round once at the end, so this reference is
  // at least as accurate as any fp32 kernel ordering it is compared against.
  std::vector<double> t(x, x + n);
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t i = 0; i < n; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const double a = t[j], b = t[j + h];
        t[j] = a + b;
        t[j + h] = a - b;
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(t[i] * static_cast<double>(scale));
  return {};
}

// -- FP8 weights ----------------------------------------------------------------

status fp8_block_quantize(const float* w, int64_t rows, int64_t cols, int64_t block, uint8_t* q,
                          uint8_t* scale_e8m0) {
  const char* op = "fp8_block_quantize";
  HART_RETURN_IF_ERROR(check_matrix(op, rows, cols));
  if (block <= 0) return invalid_argument("%s: block=%lld must be > 0", op, ll(block));
  HART_RETURN_IF_ERROR(check_ptr(op, "w", w, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "q", q, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "scale_e8m0", scale_e8m0, rows * cols));
  HART_RETURN_IF_ERROR(check_finite(op, w, rows, cols));
  const int64_t n_rb = ceil_div(rows, block), n_cb = ceil_div(cols, block);
  for (int64_t rb = 0; rb < n_rb; ++rb) {
    const int64_t r0 = rb * block, r1 = std::min(rows, r0 + block);
    for (int64_t cb = 0; cb < n_cb; ++cb) {
      const int64_t c0 = cb * block, c1 = std::min(cols, c0 + block);
      float amax = fp8_amax_floor;
      for (int64_t r = r0; r < r1; ++r) amax = std::max(amax, block_amax(w + r * cols + c0, c1 - c0, 0.0f));
      // Finite amax >= 1e-4 gives k in [-22, 120]: the e8m0 code is exact.
      const uint8_t code = e8m0_from_exponent(pow2_scale_exponent(amax, e4m3_max));
      scale_e8m0[rb * n_cb + cb] = code;
      const float s = f32_from_e8m0(code);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c)
          q[r * cols + c] = e4m3_from_f32(clamp_q(w[r * cols + c] / s, e4m3_max));
      }
    }
  }
  return {};
}

status fp8_block_dequantize(const uint8_t* q, const float* scale, int64_t rows, int64_t cols, int64_t block,
                            float* out) {
  const char* op = "fp8_block_dequantize";
  HART_RETURN_IF_ERROR(check_matrix(op, rows, cols));
  if (block <= 0) return invalid_argument("%s: block=%lld must be > 0", op, ll(block));
  HART_RETURN_IF_ERROR(check_ptr(op, "q", q, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "scale", scale, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "out", out, rows * cols));
  const int64_t n_rb = ceil_div(rows, block), n_cb = ceil_div(cols, block);
  for (int64_t i = 0; i < n_rb * n_cb; ++i) {
    if (!std::isfinite(scale[i])) {
      return data_loss("%s: scale[%lld, %lld] is not finite", op, ll(i / n_cb), ll(i % n_cb));
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* srow = scale + (r / block) * n_cb;
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = f32_from_e4m3(q[r * cols + c]) * srow[c / block];
  }
  return {};
}

status fp8_block_dequantize(const uint8_t* q, const uint8_t* scale_e8m0, int64_t rows, int64_t cols,
                            int64_t block, float* out) {
  const char* op = "fp8_block_dequantize";
  HART_RETURN_IF_ERROR(check_matrix(op, rows, cols));
  if (block <= 0) return invalid_argument("%s: block=%lld must be > 0", op, ll(block));
  HART_RETURN_IF_ERROR(check_ptr(op, "scale_e8m0", scale_e8m0, rows * cols));
  const int64_t n_rb = ceil_div(rows, block), n_cb = ceil_div(cols, block);
  std::vector<float> scale(static_cast<size_t>(n_rb * n_cb));
  for (int64_t i = 0; i < n_rb * n_cb; ++i) {
    if (scale_e8m0[i] == 0xff) {
      return data_loss("%s: scale_e8m0[%lld, %lld] is NaN (0xff)", op, ll(i / n_cb), ll(i % n_cb));
    }
    scale[i] = f32_from_e8m0(scale_e8m0[i]);  // e4m3 * 2^k is exact in fp32
  }
  return fp8_block_dequantize(q, scale.data(), rows, cols, block, out);
}

// -- MXFP4 weights ----------------------------------------------------------------

status mxfp4_quantize(const float* w, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scale_e8m0) {
  const char* op = "mxfp4_quantize";
  HART_RETURN_IF_ERROR(check_matrix(op, rows, cols));
  if (cols % mxfp4_block != 0) return invalid_argument("%s: cols=%lld is not a multiple of 32", op, ll(cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "w", w, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "packed", packed, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "scale_e8m0", scale_e8m0, rows * cols));
  HART_RETURN_IF_ERROR(check_finite(op, w, rows, cols));
  const int64_t n_groups = cols / mxfp4_block;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < n_groups; ++g) {
      const float* wg = w + r * cols + g * mxfp4_block;
      // amax in [6 * 2^-126, FLT_MAX] gives k in [-126, 126]: the code is exact.
      const uint8_t code =
          e8m0_from_exponent(pow2_scale_exponent(block_amax(wg, mxfp4_block, fp4_amax_floor), e2m1_max));
      scale_e8m0[r * n_groups + g] = code;
      const float s = f32_from_e8m0(code);
      uint8_t* pg = packed + r * (cols / 2) + g * (mxfp4_block / 2);
      for (int64_t j = 0; j < mxfp4_block / 2; ++j) {
        const uint8_t lo = e2m1_from_f32(clamp_q(wg[2 * j] / s, e2m1_max));
        const uint8_t hi = e2m1_from_f32(clamp_q(wg[2 * j + 1] / s, e2m1_max));
        pg[j] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
  return {};
}

status mxfp4_dequantize(const uint8_t* packed, const uint8_t* scale_e8m0, int64_t rows, int64_t cols,
                        float* out) {
  const char* op = "mxfp4_dequantize";
  HART_RETURN_IF_ERROR(check_matrix(op, rows, cols));
  if (cols % mxfp4_block != 0) return invalid_argument("%s: cols=%lld is not a multiple of 32", op, ll(cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "packed", packed, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "scale_e8m0", scale_e8m0, rows * cols));
  HART_RETURN_IF_ERROR(check_ptr(op, "out", out, rows * cols));
  const int64_t n_groups = cols / mxfp4_block;
  for (int64_t i = 0; i < rows * n_groups; ++i) {
    if (scale_e8m0[i] == 0xff) {
      return data_loss("%s: scale_e8m0[%lld, %lld] is NaN (0xff)", op, ll(i / n_groups), ll(i % n_groups));
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      const uint8_t byte = packed[r * (cols / 2) + k / 2];
      const uint8_t nibble = (k % 2 == 0) ? (byte & 0xf) : (byte >> 4);
      out[r * cols + k] = f32_from_e2m1(nibble) * f32_from_e8m0(scale_e8m0[r * n_groups + k / mxfp4_block]);
    }
  }
  return {};
}

}  // namespace hart
