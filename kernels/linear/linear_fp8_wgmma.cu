// CUDA FP8 linear at prefill's row counts on Hopper's warpgroup MMA (G2):
// y [rows][out] (+)= x' · W^T with x' the fp8 mode's QDQ of x (e4m3 codes and
// one power-of-two scale per row per 128 channels) and W e4m3 codes with one
// e8m0 scale per 128×128 block.
//
// One CTA per 128×128 output tile, three warpgroups: the first issues TMA
// loads of 128×128-byte tiles of x's codes and W's codes (128-byte swizzle)
// into a ring of k_stages stages guarded by mbarriers (full: the bytes
// landed; empty: both consumers are done with the stage); the other two each
// own 64 rows of the tile. Per 128-channel block a consumer runs four
// wgmma m64n128k32 (e4m3 × e4m3 → fp32) into a block accumulator, then adds
// it to the tile's accumulator times x's row scale and W's block scale (the
// block-scaled sum, as DeepGEMM does: the tensor core's FP8 accumulation keeps
// fewer bits than fp32, so it never spans more than one block).
#include "kernels/cuda_device.h"
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_impl.h"

#include <cuda.h>
#include <cuda_runtime.h>

namespace hart {
namespace {

constexpr int k_tile = 128;     // rows, columns and channels of a tile (one scale block)
constexpr int k_stages = 5;     // 32 KB each
constexpr int k_threads = 384;  // producer + two consumer warpgroups
constexpr int k_stage_bytes = 2 * k_tile * k_tile;
constexpr int k_smem_bytes = k_stages * k_stage_bytes + 1024 /* alignment */ + 2 * k_stages * 8;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra.uni wait_%=;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// A 128 × 128-byte box at (channel c0, row c1) of `map` into shared memory.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
}

// Shared-memory matrix descriptor of a K-major tile with 128-byte rows in the
// 128-byte swizzle TMA wrote: 8-row groups 1024 bytes apart; stepping K by 32
// bytes moves the start address (the tile is 1024-byte aligned).
__device__ __forceinline__ uint64_t smem_desc(const void* p) {
  const uint64_t addr = smem_u32(p);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// d (64 fp32 per thread: a 64 × 128 tile over the warpgroup) = or += A · B^T.
__device__ __forceinline__ void wgmma_m64n128k32(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
      "%22, "
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "
      "%43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(accumulate));
#endif
}

__global__ void __launch_bounds__(k_threads, 1)
    fp8_wgmma_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                     const float* __restrict__ x_scales, const uint8_t* __restrict__ w_scales,
                     float* __restrict__ y, int n_rows, int in, int64_t y_stride, int accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* tiles = smem;  // stage s: x tile at s · k_stage_bytes, W tile 16 KB after it
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + k_stages * k_stage_bytes);
  uint64_t* empty = full + k_stages;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const int n0 = blockIdx.x * k_tile, m0 = blockIdx.y * k_tile;
  const int n_blocks = in / k_tile;
  if (threadIdx.x == 0) {
    for (int s = 0; s < k_stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 8);  // lane 0 of each consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {  // producer: one thread
    if (t == 0) {
      for (int kb = 0; kb < n_blocks; ++kb) {
        const int s = kb % k_stages;
        if (kb >= k_stages) mbar_wait(&empty[s], uint32_t((kb / k_stages - 1) & 1));
        uint8_t* st = tiles + s * k_stage_bytes;
        mbar_expect_tx(&full[s], k_stage_bytes);
        tma_load(st, &map_x, kb * k_tile, m0, &full[s]);
        tma_load(st + k_tile * k_tile, &map_w, kb * k_tile, n0, &full[s]);
      }
    }
    return;
  }

  // Consumer warpgroup c: rows m0 + 64c .. + 63; thread rows r and r + 8 of its warp's 16.
  const int c = wg - 1, warp = t / 32, lane = t % 32;
  const int r = m0 + 64 * c + 16 * warp + lane / 4;
  const uint8_t* w_sc = w_scales + int64_t(n0 / k_tile) * n_blocks;
  float acc[64], part[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  for (int kb = 0; kb < n_blocks; ++kb) {
    const int s = kb % k_stages;
    // The scales first: their loads overlap the wait for the tiles.
    const float* xs = x_scales + int64_t(kb) * n_rows;
    const float sx0 = r < n_rows ? xs[r] : 0.f, sx1 = r + 8 < n_rows ? xs[r + 8] : 0.f;
    const float sw = ldexpf(1.0f, int(w_sc[kb]) - 127);
    mbar_wait(&full[s], uint32_t((kb / k_stages) & 1));
    const uint8_t* a = tiles + s * k_stage_bytes + 64 * c * k_tile;
    const uint8_t* b = tiles + s * k_stage_bytes + k_tile * k_tile;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int k = 0; k < k_tile / 32; ++k)
      wgmma_m64n128k32(part, smem_desc(a + 32 * k), smem_desc(b + 32 * k), k > 0);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    if (lane == 0) mbar_arrive(&empty[s]);
    const float s0 = sx0 * sw, s1 = sx1 * sw;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      acc[4 * j] = fmaf(part[4 * j], s0, acc[4 * j]);
      acc[4 * j + 1] = fmaf(part[4 * j + 1], s0, acc[4 * j + 1]);
      acc[4 * j + 2] = fmaf(part[4 * j + 2], s1, acc[4 * j + 2]);
      acc[4 * j + 3] = fmaf(part[4 * j + 3], s1, acc[4 * j + 3]);
    }
  }
  // Accumulator layout (wgmma m64nN): value 4j + {0, 1} is row r, columns
  // 8j + 2·(lane % 4) + {0, 1}; 4j + {2, 3} the same columns of row r + 8.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = r + 8 * half;
    if (row >= n_rows) continue;
    float* yr = y + int64_t(row) * y_stride + n0 + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      float2 v = make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
      float2* dst = reinterpret_cast<float2*>(yr + 8 * j);
      if (accumulate) {
        const float2 old = *dst;
        v.x += old.x;
        v.y += old.y;
      }
      *dst = v;
    }
  }
#endif
}

using encode_tiled_fn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                     const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                     CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                     CUtensorMapFloatOOBfill);

// The driver's tensor-map encoder, through the runtime (cuda_driver_symbol).
encode_tiled_fn tensor_map_encoder() {
  static const encode_tiled_fn fn =
      reinterpret_cast<encode_tiled_fn>(cuda_driver_symbol("cuTensorMapEncodeTiled"));
  return fn;
}

// rows × cols bytes, row stride `stride` bytes, read in 128 × 128 boxes with the 128-byte swizzle.
status codes_map(CUtensorMap* map, const uint8_t* base, int64_t rows, int64_t cols, int64_t stride) {
  const encode_tiled_fn encode = tensor_map_encoder();
  if (!encode) return unimplemented("linear_fp8_wgmma_cuda: the driver has no cuTensorMapEncodeTiled");
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(stride)};
  const cuuint32_t box[2] = {k_tile, k_tile};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(base), dims, strides,
                            box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return internal_error("linear_fp8_wgmma_cuda: cuTensorMapEncodeTiled failed (%d)", int(r));
  return {};
}

}  // namespace

status fp8_wgmma_gemm(const uint8_t* x_codes, const float* x_scales, const uint8_t* w, const uint8_t* w_scale,
                      float* y, int64_t n_rows, int64_t in, int64_t out, int64_t ys, bool accumulate,
                      cudaStream_t stream) {
  if (n_rows == 0) return {};
  CUtensorMap map_x, map_w;
  HART_RETURN_IF_ERROR(codes_map(&map_x, x_codes, n_rows, in, in));
  HART_RETURN_IF_ERROR(codes_map(&map_w, w, out, in, in));
  // Per launch, not cached: the attribute belongs to the current device.
  cudaError_t e =
      cudaFuncSetAttribute(fp8_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, k_smem_bytes);
  if (e == cudaSuccess) {
    const dim3 grid(unsigned(out / k_tile), unsigned((n_rows + k_tile - 1) / k_tile));
    fp8_wgmma_kernel<<<grid, k_threads, k_smem_bytes, stream>>>(map_x, map_w, x_scales, w_scale, y,
                                                                int(n_rows), int(in), ys, accumulate ? 1 : 0);
    e = cudaGetLastError();
  }
  if (e != cudaSuccess) return internal_error("linear_fp8_wgmma_cuda: %s", cudaGetErrorString(e));
  return {};
}

bool linear_fp8_wgmma_supported(const linear_fp8_params& p) {
  const int64_t ys = p.y_stride ? p.y_stride : p.out;
  return linear_fp8_tc_supported(p) && ys % 2 == 0 && reinterpret_cast<uintptr_t>(p.y) % 8 == 0 &&
         reinterpret_cast<uintptr_t>(p.w) % 16 == 0;
}

status linear_fp8_wgmma_cuda(const linear_fp8_params& p, linear_cuda_context& ctx, CUstream_st* stream) {
  linear_cuda_context::impl& s = ctx.state();
  HART_RETURN_IF_ERROR(block_scaled_fp8_check("linear_fp8_wgmma_cuda", p, linear_fp8_wgmma_supported(p), s));
  if (p.n_rows == 0) return {};
  block_major_input x;
  HART_RETURN_IF_ERROR(quantize_block_major(p, p.n_rows, s, stream, &x));
  return fp8_wgmma_gemm(x.codes, x.scales, p.w, p.w_scale, p.y, p.n_rows, p.in, p.out,
                        p.y_stride ? p.y_stride : p.out, p.accumulate, stream);
}

}  // namespace hart
