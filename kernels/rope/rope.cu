// CUDA rope: blocks of 256 threads over (row, (head, pair) slots), one slot per
// thread (a row's slots over several blocks, so a decode row is not one
// block's serial loop); each thread rotates its slot in place, taking cos/sin of the same fp32 angle
// float(pos) * inv_freq[i] as rope_cpu (CUDA cosf/sinf are within 2 ulp, with
// full range reduction, so positions up to 2^20 and beyond stay accurate).
#include "kernels/rope/rope.h"
#include "kernels/rope/rope_device.cuh"

#include <climits>
#include <cuda_runtime.h>

#include <algorithm>

namespace hart {
namespace {

constexpr int k_threads = 256;

__global__ void rope_kernel(rope_params p, int64_t stride) {
  const int64_t r = blockIdx.x;
  const int64_t half = p.rope_dim / 2;
  const float pos = float(p.pos[r]);
  float* row = p.x + r * stride + (p.head_dim - p.rope_dim);
  for (int64_t e = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; e < p.n_heads * half;
       e += int64_t(gridDim.y) * blockDim.x) {
    const int64_t h = e / half, i = e % half;
    float* v = row + h * p.head_dim + 2 * i;
    rope_rotate_pair(v[0], v[1], pos, p.inv_freq[i], p.attention_factor, p.inverse, p.bf16);
  }
}

}  // namespace

status rope_cuda(const rope_params& p, CUstream_st* stream) {
  if (!p.x || !p.pos || !p.inv_freq) return invalid_argument("rope_cuda: null pointer");
  if (p.rope_dim <= 0 || p.rope_dim % 2 || p.rope_dim > p.head_dim) {
    return invalid_argument("rope_cuda: rope_dim %lld must be even and <= head_dim %lld",
                            (long long)p.rope_dim, (long long)p.head_dim);
  }
  if (p.n_rows < 0 || p.n_heads < 0) {
    return invalid_argument("rope_cuda: n_rows=%lld n_heads=%lld", (long long)p.n_rows, (long long)p.n_heads);
  }
  if (p.n_rows > INT_MAX)
    return invalid_argument("rope_cuda: n_rows=%lld exceeds the grid", (long long)p.n_rows);
  if (p.n_rows == 0 || p.n_heads == 0) return {};
  const int64_t stride = p.row_stride ? p.row_stride : p.n_heads * p.head_dim;
  const int64_t slot_blocks =
      std::min<int64_t>((p.n_heads * (p.rope_dim / 2) + k_threads - 1) / k_threads, 65535);
  rope_kernel<<<dim3(unsigned(p.n_rows), unsigned(slot_blocks)), k_threads, 0, stream>>>(p, stride);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("rope_cuda: launch failed: %s", cudaGetErrorString(err));
  return {};
}

}  // namespace hart
