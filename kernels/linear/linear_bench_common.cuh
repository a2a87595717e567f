// File: kernels/linear/linear_bench_common.cuh — what the FP8 linear benches
// (linear_bench.cu: decode shapes, G1; linear_prefill_bench.cu: prefill shapes,
// G2) share: error checks, random e4m3 / e8m0 fills on the device, and the host
// reference check. Header-only: the benches are built by nvcc alone
// (scripts/gpu/bench_linear.sh).
#pragma once

#include "kernels/quant/quant.h"
#include "kernels/testing/cuda_bench_util.h"
#include "runtime/core/codecs.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace hart::bench {

// Finite e4m3 codes (0x7f / 0xff are NaN) and e8m0 codes in [120, 134).
__global__ void fill_codes(uint8_t* w, int64_t n, uint64_t seed, int scale_codes) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint8_t c = uint8_t(hash32((seed << 40) ^ uint64_t(i)));
    if (scale_codes)
      c = uint8_t(120 + c % 14);
    else if ((c & 0x7f) == 0x7f)
      c ^= 1;
    w[i] = c;
  }
}

struct linear_shape {
  const char* name;
  int64_t in, out;
};

// Host check of 64 sampled outputs in every `row_step`-th row against a double
// sum of the same exact products (the fp8 mode's QDQ of x applied on the host);
// returns the worst error / (rtol · Σ|x'·w'|) ratio (<= 1 passes).
inline double check_linear(int64_t in, int64_t out, int64_t n_rows, const float* d_x, const uint8_t* d_w,
                           const uint8_t* d_s, const float* d_y, double rtol, int64_t row_step = 1) {
  const linear_shape s{"", in, out};
  const int64_t nb_i = (s.in + 127) / 128;
  std::vector<float> x(n_rows * s.in), y(n_rows * s.out);
  std::vector<uint8_t> w(s.in * s.out), sc(((s.out + 127) / 128) * nb_i);
  CK(cudaMemcpy(x.data(), d_x, x.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(y.data(), d_y, y.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(w.data(), d_w, w.size(), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(sc.data(), d_s, sc.size(), cudaMemcpyDeviceToHost));
  for (int64_t r = 0; r < n_rows; r += row_step) {
    for (int64_t b = 0; b < s.in; b += 128) {
      if (!act_quant_fp8_qdq(x.data() + r * s.in + b, std::min<int64_t>(128, s.in - b),
                             std::min<int64_t>(128, s.in - b))
               .ok())
        std::exit(1);
    }
  }
  double worst = 0;
  for (int64_t j = 0; j < 64; ++j) {
    const int64_t o = j * (s.out - 1) / 63;
    for (int64_t r = 0; r < n_rows; r += row_step) {
      double acc = 0, mag = 0;
      for (int64_t i = 0; i < s.in; ++i) {
        const double wv = double(f32_from_e4m3(w[o * s.in + i])) *
                          std::ldexp(1.0, int(sc[(o / 128) * nb_i + i / 128]) - 127);
        acc += wv * x[r * s.in + i];
        mag += std::fabs(wv * x[r * s.in + i]);
      }
      const double err = std::fabs(y[r * s.out + o] - acc);
      worst = std::max(worst, std::isfinite(y[r * s.out + o]) ? err / (rtol * mag + 1e-30) : INFINITY);
    }
  }
  return worst;
}

}  // namespace hart::bench
