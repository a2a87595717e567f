// The grouped linear on the device: one warp per 1-2 output features, one CTA
// per (8 warps' features, tile); CTAs past *n_tiles exit at once, so the grid can be
// sized by a bound while a device-side plan decides the work (MoE experts
// without a host round-trip). Codes use linear_fp8_cuda's dot product.
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_fp8_device.cuh"

#include <climits>

namespace hart {
namespace {

constexpr int k_warps = 8;
constexpr int MT = int(linear_grouped_tile_rows);

template <int R, bool VEC>
__global__ void __launch_bounds__(k_warps * 32) grouped_kernel(linear_grouped_params p) {
  const int tile = blockIdx.y;
  if (tile >= *p.n_tiles) return;
  const int lane = threadIdx.x % 32;
  const int64_t o0 = (int64_t(blockIdx.x) * k_warps + threadIdx.x / 32) * R;
  if (o0 >= p.out) return;
  const int nr = int(min(int64_t(R), p.out - o0));
  const linear_group_weight gw = p.groups[p.tile_group[tile]];
  const int64_t r0 = p.tile_row0[tile];
  const int mt = p.tile_rows[tile];
  const float* x = p.x + r0 * p.in;
  float acc[R][MT];
  if (gw.w_scale) {
    const int64_t n_kb = (p.in + linear_dev::k_block - 1) / linear_dev::k_block;
    linear_dev::fp8_dot_rows<MT, R, VEC>(static_cast<const uint8_t*>(gw.w) + o0 * p.in, nr,
                                         gw.w_scale + (o0 / linear_dev::k_block) * n_kb, x, p.in, p.in, mt,
                                         lane, acc);
  } else {
    linear_dev::f32_dot_rows<MT, R, VEC>(static_cast<const float*>(gw.w) + o0 * p.in, nr, x, p.in, mt, lane,
                                         acc);
  }
  linear_dev::warp_sum(acc);
  if (lane == 0) linear_dev::store_rows(acc, p.y, p.out, r0, o0, nr, mt, false);
}

template <int R>
void launch(const linear_grouped_params& p, cudaStream_t stream) {
  const dim3 grid{unsigned((p.out + k_warps * R - 1) / (k_warps * R)), unsigned(p.max_tiles)};
  if (p.in % 16 == 0) {
    grouped_kernel<R, true><<<grid, k_warps * 32, 0, stream>>>(p);
  } else {
    grouped_kernel<R, false><<<grid, k_warps * 32, 0, stream>>>(p);
  }
}

}  // namespace

status linear_grouped_cuda(const linear_grouped_params& p, CUstream_st* stream) {
  if (!p.x || !p.y || !p.groups || !p.tile_group || !p.tile_row0 || !p.tile_rows || !p.n_tiles) {
    return invalid_argument("linear_grouped_cuda: null pointer");
  }
  if (p.in <= 0 || p.out <= 0 || p.n_rows < 0 || p.n_groups < 0 || p.max_tiles < 0) {
    return invalid_argument("linear_grouped_cuda: bad sizes in=%lld out=%lld n_rows=%lld", (long long)p.in,
                            (long long)p.out, (long long)p.n_rows);
  }
  if (p.w_mxfp4)
    return unimplemented("linear_grouped_cuda: MXFP4 groups run on tensor cores (linear_grouped_tc_cuda)");
  if (p.max_tile_rows < 1 || p.max_tile_rows > MT) {
    return unimplemented(
        "linear_grouped_cuda: tiles of up to %lld rows (max_tile_rows; wide tiles are "
        "linear_grouped_tc_cuda's)",
        (long long)p.max_tile_rows);
  }
  if ((p.out + k_warps - 1) / k_warps > INT_MAX || p.max_tiles > 65535) {
    return invalid_argument("linear_grouped_cuda: out=%lld / max_tiles=%lld exceed the grid",
                            (long long)p.out, (long long)p.max_tiles);
  }
  if (p.max_tiles == 0) return {};
  // VEC needs every group's weights 16-byte aligned: device allocations are
  // (256 bytes), and in % 16 == 0 keeps each row's start aligned.
  // Two output rows per warp once one tile's CTAs cover half the SMs (the
  // tiles in use are known only on the device, and MoE has top-k >= 2 of
  // them per token; every R gives the same result).
  if (linear_dev::rows_per_warp(p.out, 1, MT, k_warps, cuda_sm_count() / 2) >= 2) {
    launch<2>(p, stream);
  } else {
    launch<1>(p, stream);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return internal_error("linear_grouped_cuda: %s", cudaGetErrorString(e));
  return {};
}

}  // namespace hart
