#include "runtime/gpu/weight_requant.h"

namespace hart::gpu {
namespace {

__global__ void count_bit_mismatch_kernel(const uint32_t* a, const uint32_t* b, int64_t n, uint32_t* count) {
  uint32_t local = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    local += a[i] != b[i];
  }
  // Warp sum, then one atomic per warp.
  for (int o = 16; o > 0; o >>= 1) local += __shfl_down_sync(0xffffffffu, local, o);
  if ((threadIdx.x & 31) == 0 && local) atomicAdd(count, local);
}

}  // namespace

status count_bit_mismatch_cuda(const float* a, const float* b, int64_t n, uint32_t* count, cudaStream_t stream) {
  if (n <= 0) return {};
  // A grid-stride loop: 4 blocks per SM of 256 threads keep HBM busy on an H200 (132 SMs).
  constexpr int k_threads = 256;
  const int64_t want = (n + k_threads - 1) / k_threads;
  const int blocks = int(want < 132 * 4 ? want : 132 * 4);
  count_bit_mismatch_kernel<<<blocks, k_threads, 0, stream>>>(reinterpret_cast<const uint32_t*>(a),
                                                               reinterpret_cast<const uint32_t*>(b), n, count);
  return cuda_status(cudaGetLastError(), "count_bit_mismatch_cuda");
}

}  // namespace hart::gpu
