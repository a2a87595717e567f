// kv_entry_encode_rows_cuda: one block of 128 threads per row, four dims per
// thread (a 64-dim scale block is 16 lanes of one warp), the codes written by
// kv_entry_dev::store4, bit-exact with kv_entry_encode.
#include "kernels/sparse_decode_attention/kv_entry.h"
#include "kernels/sparse_decode_attention/kv_entry_device.cuh"

#include <cuda_runtime.h>

namespace hart {
namespace {

__global__ void __launch_bounds__(128)
    kv_entry_rows_kernel(const float* __restrict__ src, const int64_t* __restrict__ src_off, float* dst,
                         const int64_t* __restrict__ dst_off) {
  const int64_t i = blockIdx.x;
  const int64_t d = dst_off[i];
  if (d < 0) return;  // the whole block: no lane is left in the shuffles below
  const int ch = 4 * int(threadIdx.x);
  const float4 v = *reinterpret_cast<const float4*>(src + (src_off ? src_off[i] : i * kv_entry_dim) + ch);
  const float x[4] = {v.x, v.y, v.z, v.w};
  float amax = fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3])));
#pragma unroll
  for (int o = 8; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  kv_entry_dev::store4(x, ch, amax, reinterpret_cast<uint8_t*>(dst + d));
}

}  // namespace

status kv_entry_encode_rows_cuda(const kv_entry_rows_params& p, CUstream_st* stream) {
  if (p.n_rows < 0) return invalid_argument("kv_entry_encode_rows_cuda: negative row count");
  if (p.n_rows == 0) return {};
  if (!p.src || !p.dst || !p.dst_off) return invalid_argument("kv_entry_encode_rows_cuda: null pointer");
  if (reinterpret_cast<uintptr_t>(p.src) % 16 || reinterpret_cast<uintptr_t>(p.dst) % 8)
    return invalid_argument("kv_entry_encode_rows_cuda: src must be 16-byte aligned, dst 8-byte");
  if (p.n_rows > INT32_MAX)
    return invalid_argument("kv_entry_encode_rows_cuda: %lld rows", (long long)p.n_rows);
  kv_entry_rows_kernel<<<unsigned(p.n_rows), 128, 0, stream>>>(p.src, p.src_off, p.dst, p.dst_off);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("kv_entry_encode_rows_cuda: %s", cudaGetErrorString(err));
  return {};
}

}  // namespace hart
