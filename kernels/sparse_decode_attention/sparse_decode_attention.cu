// CUDA sparse decode attention over 584-byte FP8 KV entries (issue 6, A1), v1.
//
// Kernel 1, grid (split, head group, query): a block takes 32 entries of the
// query's concatenated entry list (window then extra) and G heads. It decodes
// the entries into shared memory as fp32 (e4m3 × 2^k, bf16 RoPE), computes the
// G×32 logits (a warp per head pair, lanes across the 512 dims), the chunk's
// softmax partials (max, sum) and the unnormalised G×512 partial output.
// Kernel 2, grid (head, query): merges the splits with the sink into bf16.
// SIMT fp32 throughout: batch-1 latency is what this version is for; batch
// >= 128 needs the tensor-core version (docs/perf-notes.md, A1).
#include "kernels/sparse_decode_attention/sparse_decode_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/sparse_decode_attention/sparse_decode_attention_split.h"

namespace hart {
namespace {

constexpr int k_threads = 256;
constexpr int k_warps = k_threads / 32;
constexpr int k_dim = int(kv_entry_dim);
constexpr int k_chunk = int(sda_chunk);
constexpr int k_nope_words = int(kv_entry_nope / 8);    // 56
constexpr int k_rope_words = int(2 * kv_entry_rope / 8);  // 16

struct pool_view {
  const uint8_t* base;
  long long per_page;
  long long page_bytes;
};

__device__ __forceinline__ float e8m0_to_float(unsigned code) {
  if (code == 0) return __int_as_float(0x00400000);  // 2^-127, subnormal
  if (code == 255) return __int_as_float(0x7fc00000);
  return __int_as_float(int(code) << 23);
}

__device__ __forceinline__ float2 e4m3x2_to_float2(unsigned short two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two), __NV_E4M3);
  return __half22float2(__half2(h));
}

__device__ __forceinline__ float bf16_bits_to_float(unsigned bits) { return __uint_as_float(bits << 16); }

template <int G>
struct smem_layout {
  float q[G][k_dim];
  float kv[k_chunk][k_dim];
  float p[G][k_chunk];
  float m[G];
  float l[G];
};

template <int G>
__global__ void __launch_bounds__(k_threads) sda_partial_kernel(const uint16_t* __restrict__ q,
                                                                pool_view pool0, const int32_t* __restrict__ idx0,
                                                                int n_idx0, pool_view pool1,
                                                                const int32_t* __restrict__ idx1, int n_idx1,
                                                                int n_heads, float scale, float* __restrict__ ws_o,
                                                                float* __restrict__ ws_ml) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto& s = *reinterpret_cast<smem_layout<G>*>(smem_raw);
  const int split = blockIdx.x, n_splits = gridDim.x;
  const int h0 = blockIdx.y * G;
  const int t = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // q for G heads: bf16 → fp32, 8 values per 16-byte load.
  const uint4* qv = reinterpret_cast<const uint4*>(q + (size_t(t) * n_heads + h0) * k_dim);
  for (int i = tid; i < G * k_dim / 8; i += k_threads) {
    const uint4 w = qv[i];
    float* dst = &s.q[0][0] + i * 8;
    const unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      dst[2 * k] = bf16_bits_to_float(u[k] & 0xffffu);
      dst[2 * k + 1] = bf16_bits_to_float(u[k] >> 16);
    }
  }

  // Entries: warp w decodes entries w, w + 8, ...; lanes split each entry's 73 words.
  for (int e = warp; e < k_chunk; e += k_warps) {
    const int j = split * k_chunk + e;
    long long slot = -1;
    const uint8_t* entry = nullptr;
    if (j < n_idx0) {
      slot = idx0[size_t(t) * n_idx0 + j];
      if (slot >= 0) entry = pool0.base + (slot / pool0.per_page) * pool0.page_bytes + (slot % pool0.per_page) * kv_entry_bytes;
    } else if (j < n_idx0 + n_idx1) {
      slot = idx1[size_t(t) * n_idx1 + (j - n_idx0)];
      if (slot >= 0) entry = pool1.base + (slot / pool1.per_page) * pool1.page_bytes + (slot % pool1.per_page) * kv_entry_bytes;
    }
    float* row = s.kv[e];
    if (!entry) {
      for (int d = lane; d < k_dim; d += 32) row[d] = 0.f;
      continue;
    }
    const uint2* words = reinterpret_cast<const uint2*>(entry);
    const uint2 sc = words[k_nope_words + k_rope_words];  // 7 scale codes + pad
    for (int i = lane; i < k_nope_words + k_rope_words; i += 32) {
      const uint2 w = words[i];
      if (i < k_nope_words) {
        const int blk = i / 8;  // 64 NoPE dims per scale
        const unsigned code = ((blk < 4 ? sc.x >> (8 * blk) : sc.y >> (8 * (blk - 4)))) & 0xffu;
        const float f = e8m0_to_float(code);
        const float2 a = e4m3x2_to_float2(w.x & 0xffff), b = e4m3x2_to_float2(w.x >> 16);
        const float2 c = e4m3x2_to_float2(w.y & 0xffff), d = e4m3x2_to_float2(w.y >> 16);
        float4* dst = reinterpret_cast<float4*>(row + 8 * i);
        dst[0] = make_float4(a.x * f, a.y * f, b.x * f, b.y * f);
        dst[1] = make_float4(c.x * f, c.y * f, d.x * f, d.y * f);
      } else {
        const int r = i - k_nope_words;  // 4 RoPE dims per word
        float4* dst = reinterpret_cast<float4*>(row + kv_entry_nope + 4 * r);
        dst[0] = make_float4(bf16_bits_to_float(w.x & 0xffffu), bf16_bits_to_float(w.x >> 16),
                             bf16_bits_to_float(w.y & 0xffffu), bf16_bits_to_float(w.y >> 16));
      }
    }
  }
  __syncthreads();

  // Logits: warp w owns heads w·HPW ..; lanes hold 16 dims of each head's q.
  constexpr int HPW = G / k_warps;
  float qr[HPW][k_dim / 32];
#pragma unroll
  for (int hh = 0; hh < HPW; ++hh)
#pragma unroll
    for (int k = 0; k < k_dim / 32; ++k) qr[hh][k] = s.q[warp * HPW + hh][lane + 32 * k];
  const int n_total = n_idx0 + n_idx1;
  for (int e = 0; e < k_chunk; ++e) {
    float acc[HPW];
#pragma unroll
    for (int hh = 0; hh < HPW; ++hh) acc[hh] = 0.f;
#pragma unroll
    for (int k = 0; k < k_dim / 32; ++k) {
      const float kv = s.kv[e][lane + 32 * k];
#pragma unroll
      for (int hh = 0; hh < HPW; ++hh) acc[hh] = fmaf(qr[hh][k], kv, acc[hh]);
    }
#pragma unroll
    for (int hh = 0; hh < HPW; ++hh) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[hh] += __shfl_xor_sync(0xffffffffu, acc[hh], o);
    }
    if (lane == 0) {
      const int j = split * k_chunk + e;
      bool valid = j < n_total;
      if (valid) valid = (j < n_idx0 ? idx0[size_t(t) * n_idx0 + j] : idx1[size_t(t) * n_idx1 + (j - n_idx0)]) >= 0;
#pragma unroll
      for (int hh = 0; hh < HPW; ++hh) s.p[warp * HPW + hh][e] = valid ? acc[hh] * scale : -INFINITY;
    }
  }
  __syncwarp();

  // Chunk softmax partials: lane = entry.
#pragma unroll
  for (int hh = 0; hh < HPW; ++hh) {
    const int h = warp * HPW + hh;
    const float x = s.p[h][lane];
    float m = x;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float pe = m == -INFINITY ? 0.f : expf(x - m);
    float l = pe;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    s.p[h][lane] = pe;
    if (lane == 0) {
      s.m[h] = m;
      s.l[h] = l;
    }
  }
  __syncthreads();

  // Partial outputs: thread owns dims tid and tid + 256 of every head.
  float acc[G][2];
#pragma unroll
  for (int h = 0; h < G; ++h) acc[h][0] = acc[h][1] = 0.f;
  for (int e = 0; e < k_chunk; ++e) {
    const float k0 = s.kv[e][tid], k1 = s.kv[e][tid + k_threads];
#pragma unroll
    for (int h = 0; h < G; ++h) {
      const float pe = s.p[h][e];
      acc[h][0] = fmaf(pe, k0, acc[h][0]);
      acc[h][1] = fmaf(pe, k1, acc[h][1]);
    }
  }
  const size_t base = (size_t(t) * n_splits + split) * n_heads + h0;
#pragma unroll
  for (int h = 0; h < G; ++h) {
    ws_o[(base + h) * k_dim + tid] = acc[h][0];
    ws_o[(base + h) * k_dim + tid + k_threads] = acc[h][1];
  }
  if (tid < G) {
    ws_ml[(base + tid) * 2] = s.m[tid];
    ws_ml[(base + tid) * 2 + 1] = s.l[tid];
  }
}

// One block per (head, query); thread owns 4 dims.
__global__ void __launch_bounds__(128) sda_merge_kernel(const float* __restrict__ ws_o, const float* __restrict__ ws_ml,
                                                        const float* __restrict__ sink, int n_splits, int n_heads,
                                                        uint16_t* __restrict__ out) {
  const int h = blockIdx.x, t = blockIdx.y;
  const float sk = sink[h];
  float mx = sk;
  for (int s = 0; s < n_splits; ++s) mx = fmaxf(mx, ws_ml[((size_t(t) * n_splits + s) * n_heads + h) * 2]);
  float denom = expf(sk - mx);
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < n_splits; ++s) {
    const size_t r = (size_t(t) * n_splits + s) * n_heads + h;
    const float m = ws_ml[r * 2];
    if (m == -INFINITY) continue;
    const float w = expf(m - mx);
    denom = fmaf(ws_ml[r * 2 + 1], w, denom);
    const float4 v = reinterpret_cast<const float4*>(ws_o + r * k_dim)[threadIdx.x];
    o.x = fmaf(w, v.x, o.x);
    o.y = fmaf(w, v.y, o.y);
    o.z = fmaf(w, v.z, o.z);
    o.w = fmaf(w, v.w, o.w);
  }
  const float inv = 1.f / denom;
  const __nv_bfloat162 a = __floats2bfloat162_rn(o.x * inv, o.y * inv);
  const __nv_bfloat162 b = __floats2bfloat162_rn(o.z * inv, o.w * inv);
  uint2 packed;
  packed.x = *reinterpret_cast<const unsigned*>(&a);
  packed.y = *reinterpret_cast<const unsigned*>(&b);
  reinterpret_cast<uint2*>(out + (size_t(t) * n_heads + h) * k_dim)[threadIdx.x] = packed;
}

template <int G>
status launch_partial(const sparse_decode_attention_params& p, int n_splits, float* ws_o, float* ws_ml,
                      cudaStream_t stream) {
  // Per launch, not cached: the attribute belongs to the current device.
  const cudaError_t attr = cudaFuncSetAttribute(
      sda_partial_kernel<G>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(smem_layout<G>)));
  if (attr != cudaSuccess) return internal_error("sparse_decode_attention_cuda: %s", cudaGetErrorString(attr));
  const pool_view p0{p.pool0.base, p.pool0.entries_per_page, p.pool0.page_bytes};
  const pool_view p1{p.pool1.base, p.pool1.entries_per_page, p.pool1.page_bytes};
  const dim3 grid(unsigned(n_splits), unsigned(p.n_heads / G), unsigned(p.n_queries));
  sda_partial_kernel<G><<<grid, k_threads, sizeof(smem_layout<G>), stream>>>(
      p.q, p0, p.idx0, int(p.n_idx0), p1, p.idx1, int(p.n_idx1), int(p.n_heads), p.scale, ws_o, ws_ml);
  return {};
}

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
    return v > 0 ? v : 1;
  }();
  return n;
}

}  // namespace

status sparse_decode_attention_cuda(const sparse_decode_attention_params& p, CUstream_st* stream) {
  HART_RETURN_IF_ERROR(sparse_decode_attention_validate(p));
  if (p.n_queries == 0) return {};
  const size_t need = sparse_decode_attention_workspace_bytes(p.n_queries, p.n_heads, p.n_idx0, p.n_idx1);
  if (!p.workspace || p.workspace_bytes < need)
    return invalid_argument("sparse_decode_attention_cuda: workspace of %zu bytes, need %zu", p.workspace_bytes, need);
  auto misaligned = [](const void* ptr, uintptr_t a) { return (reinterpret_cast<uintptr_t>(ptr) % a) != 0; };
  if (misaligned(p.q, 16) || misaligned(p.out, 8) || misaligned(p.workspace, 16) ||
      (p.n_idx0 && (misaligned(p.pool0.base, 8) || p.pool0.page_bytes % 8)) ||
      (p.n_idx1 && (misaligned(p.pool1.base, 8) || p.pool1.page_bytes % 8)))
    return invalid_argument("sparse_decode_attention_cuda: q / workspace must be 16-byte aligned, out and pools 8-byte");
  const int n_splits = int(sda_n_splits(p.n_idx0 + p.n_idx1));
  float* ws_o = static_cast<float*>(p.workspace);
  float* ws_ml = ws_o + size_t(p.n_queries) * n_splits * p.n_heads * kv_entry_dim;
  // 16 heads per block once that still fills the GPU twice over; 8 otherwise.
  const bool wide = p.n_heads % 16 == 0 && int64_t(n_splits) * (p.n_heads / 16) * p.n_queries >= 2 * sm_count();
  HART_RETURN_IF_ERROR(wide ? launch_partial<16>(p, n_splits, ws_o, ws_ml, stream)
                            : launch_partial<8>(p, n_splits, ws_o, ws_ml, stream));
  sda_merge_kernel<<<dim3(unsigned(p.n_heads), unsigned(p.n_queries)), 128, 0, stream>>>(
      ws_o, ws_ml, p.sink, n_splits, int(p.n_heads), p.out);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("sparse_decode_attention_cuda: %s", cudaGetErrorString(err));
  return {};
}

}  // namespace hart
