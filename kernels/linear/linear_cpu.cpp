#include "kernels/linear/linear.h"

#include <cblas.h>

#include <vector>

namespace hart {
namespace {

// linear_params::k_block: each block's exact dot (fp64 GEMM of fp32 operands whose products,
// quantized values, are exact) rounded to fp32, then accumulated in fp32 block by block.
void linear_blocked(const linear_params& p, int64_t xs, int64_t ys) {
  const int64_t kb = p.k_block, n_blocks = p.in / kb;
  std::vector<double> x(size_t(p.n_rows * kb)), w(size_t(p.out * kb)), part(size_t(p.n_rows * p.out));
  std::vector<float> acc(size_t(p.n_rows * p.out), 0.0f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int64_t r = 0; r < p.n_rows; ++r) {
      for (int64_t k = 0; k < kb; ++k) x[size_t(r * kb + k)] = p.x[r * xs + b * kb + k];
    }
    for (int64_t o = 0; o < p.out; ++o) {
      for (int64_t k = 0; k < kb; ++k) w[size_t(o * kb + k)] = p.w[o * p.in + b * kb + k];
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)p.n_rows, (blasint)p.out, (blasint)kb, 1.0,
                x.data(), (blasint)kb, w.data(), (blasint)kb, 0.0, part.data(), (blasint)p.out);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += float(part[i]);
  }
  for (int64_t r = 0; r < p.n_rows; ++r) {
    for (int64_t o = 0; o < p.out; ++o) {
      float& y = p.y[r * ys + o];
      y = p.accumulate ? y + acc[size_t(r * p.out + o)] : acc[size_t(r * p.out + o)];
    }
  }
}

}  // namespace

status linear_cpu(const linear_params& p) {
  if (!p.x || !p.w || !p.y) return invalid_argument("linear: null pointer");
  if (p.n_rows < 0 || p.in <= 0 || p.out <= 0) {
    return invalid_argument("linear: bad sizes n_rows=%lld in=%lld out=%lld", (long long)p.n_rows,
                            (long long)p.in, (long long)p.out);
  }
  if (p.n_rows == 0) return {};
  const int64_t xs = p.x_stride ? p.x_stride : p.in, ys = p.y_stride ? p.y_stride : p.out;
  if (xs < p.in || ys < p.out) return invalid_argument("linear: row strides smaller than the rows");
  if (p.k_block < 0 || (p.k_block > 0 && p.in % p.k_block)) {
    return invalid_argument("linear: k_block %lld does not divide in=%lld", (long long)p.k_block, (long long)p.in);
  }
  if (p.k_block > 0) {
    linear_blocked(p, xs, ys);
    return {};
  }
  if (p.row_invariant) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t r = 0; r < p.n_rows; ++r) {
      for (int64_t o = 0; o < p.out; ++o) {
        const float* x = p.x + r * xs;
        const float* w = p.w + o * p.in;
        float lane[8] = {};  // 8 fixed lanes, then a fixed tree: same order for every call
        int64_t k = 0;
        for (; k + 8 <= p.in; k += 8) {
          for (int l = 0; l < 8; ++l) lane[l] += x[k + l] * w[k + l];
        }
        for (; k < p.in; ++k) lane[k % 8] += x[k] * w[k];
        const float dot = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
        float& y = p.y[r * ys + o];
        y = p.accumulate ? y + dot : dot;
      }
    }
    return {};
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)p.n_rows, (blasint)p.out,
              (blasint)p.in, 1.0f, p.x, (blasint)xs, p.w, (blasint)p.in,
              p.accumulate ? 1.0f : 0.0f, p.y, (blasint)ys);
  return {};
}

}  // namespace hart
