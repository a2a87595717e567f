// CUDA swiglu: 256-thread blocks over (row, channels), each thread one channel
// of decode-sized rows (a strided run for wide ones; coalesced). Elementwise, so the only difference from
// swiglu_cpu is expf's rounding (CUDA expf is within 2 ulp; see the parity test's tolerance).
#include "kernels/swiglu/swiglu.h"

#include <climits>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace hart {
namespace {

constexpr int k_threads = 256;

// grid (rows, blocks over the row): a block per row looping over 2048 channels
// was ~6 µs of load latency at batch 1.
__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

__global__ void swiglu_kernel(swiglu_params p, int64_t in_stride) {
  const int64_t r = blockIdx.x;
  const float w = p.row_weight ? p.row_weight[r] : 1.0f;
  const float* gate = p.gate + r * in_stride;
  const float* up = p.up + r * in_stride;
  float* out = p.out + r * p.dim;
  for (int64_t i = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; i < p.dim;
       i += int64_t(gridDim.y) * blockDim.x) {
    float g = gate[i], u = up[i];
    if (p.bf16) {
      g = round_bf16(g);
      u = round_bf16(u);
    }
    if (p.limit > 0) {
      // std::min / std::clamp semantics (NaN passes through), not fminf's
      g = p.limit < g ? p.limit : g;
      u = u < -p.limit ? -p.limit : (p.limit < u ? p.limit : u);
    }
    // same association as the CPU: ((g / (1 + e^-g)) * u) * w, no FMA to contract
    const float h = __fmul_rn(__fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u), w);
    out[i] = p.bf16 ? round_bf16(h) : h;
  }
}

}  // namespace

status swiglu_cuda(const swiglu_params& p, CUstream_st* stream) {
  if (!p.gate || !p.up || !p.out) return invalid_argument("swiglu_cuda: null pointer");
  if (p.dim <= 0 || p.n_rows < 0 || p.limit < 0) {
    return invalid_argument("swiglu_cuda: bad sizes or limit (dim=%lld n_rows=%lld limit=%g)",
                            (long long)p.dim, (long long)p.n_rows, double(p.limit));
  }
  if (p.n_rows > INT_MAX)
    return invalid_argument("swiglu_cuda: n_rows=%lld exceeds the grid", (long long)p.n_rows);
  if (p.n_rows == 0) return {};
  const int64_t in_stride = p.in_stride ? p.in_stride : p.dim;
  const int64_t col_blocks = std::min<int64_t>((p.dim + k_threads - 1) / k_threads, 65535);
  swiglu_kernel<<<dim3(unsigned(p.n_rows), unsigned(col_blocks)), k_threads, 0, stream>>>(p, in_stride);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("swiglu_cuda: launch failed: %s", cudaGetErrorString(err));
  return {};
}

}  // namespace hart
