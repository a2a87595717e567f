// CUDA rms_norm: one 256-thread block per row, fp32 sum of squares reduced in
// shared memory. The first CUDA op: it keeps the sm_90a build path exercised.
#include "kernels/rms_norm/rms_norm.h"

#include <cuda_runtime.h>

namespace hart {
namespace {

constexpr int k_threads = 256;

__global__ void rms_norm_kernel(rms_norm_params p, int64_t xs, int64_t ys) {
  const int64_t row = blockIdx.x;
  const float* x = p.x + row * xs;
  float* y = p.y + row * ys;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) ss += x[i] * x[i];
  __shared__ float partial[k_threads];
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / float(p.dim) + p.eps);
  for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) {
    const float v = x[i] * inv;
    y[i] = p.w ? p.w[i] * v : v;
  }
}

}  // namespace

status rms_norm_cuda(const rms_norm_params& p, CUstream_st* stream) {
  if (!p.x || !p.y) return invalid_argument("rms_norm_cuda: null pointer");
  if (p.dim <= 0 || p.n_rows < 0) return invalid_argument("rms_norm_cuda: bad dim %lld", (long long)p.dim);
  if (p.n_rows == 0) return {};
  const int64_t xs = p.x_stride ? p.x_stride : p.dim;
  const int64_t ys = p.y_stride ? p.y_stride : p.dim;
  rms_norm_kernel<<<dim3(unsigned(p.n_rows)), k_threads, 0, stream>>>(p, xs, ys);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("rms_norm_cuda: %s", cudaGetErrorString(err));
  return {};
}

}  // namespace hart
