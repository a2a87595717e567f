// CUDA sparse decode attention over 584-byte FP8 KV entries (issue 6, A1), v4:
// tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate).
//
// Kernel 1, grid (split, head group, query): a block owns 16 heads (8 warps;
// small batches) or 64 heads (16 warps; large batches, so a query's entries are
// decoded once for all its heads) and walks a run of up to 16 chunks of 32
// entries of the query's concatenated entry list (window then extra). Per chunk:
// cp.async stages the raw 584-byte entries of the NEXT chunk while this one is
// decoded into bf16 rows (exact: e4m3 × 2^k and the bf16 RoPE dims are bf16
// values); S = q·kvᵀ per (16-head tile, 8 entries, K slice) per warp; an online
// softmax per head in fp32; O += P·kv with P split into bf16 hi + lo parts so
// the weights keep ~16 bits, each warp owning a 16-head tile × a slice of dims.
// Kernel 2, grid (head, query), launched programmatically dependent on kernel 1,
// merges the splits with the sink into bf16 (or fp32). Products are exact and sums fp32,
// so the result differs from the fp32 reference only in summation order and the
// 2^-17 relative truncation of P.
//
// bf16 (the official numerics, sparse_attention_cpu's bf16 branch): P = expf(l − m)
// rounded to bf16 with m the running max over whole 64-slot blocks of the list,
// which a split cannot know from its own entries. So kernel 1 runs twice: first
// (pass::chunk_max) only S, writing each 32-entry chunk's max logit per head to
// the workspace; then (pass::bf16, programmatically dependent on the first) with
// its running max per chunk taken from those maxima (the same logits bit for
// bit: same code, same block shape) and P as one bf16 part. The merge then adds
// e^{sink − m} to the sum outside the max, divides, and rounds to bf16.
#include "kernels/cuda_device.h"
#include "kernels/sparse_decode_attention/sparse_decode_attention.h"
#include "kernels/sparse_decode_attention/sparse_decode_attention_split.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace hart {
namespace {

constexpr int k_dim = int(kv_entry_dim);
constexpr int k_chunk = int(sda_chunk);                   // 32 entries: 4 MMA n-tiles
constexpr int k_max_chunks = 16;                          // chunks per block, bounds the slot stage
constexpr int k_words = int(kv_entry_bytes / 8);          // 73 8-byte words per entry
constexpr int k_nope_words = int(kv_entry_nope / 8);      // 56
constexpr int k_rope_words = int(2 * kv_entry_rope / 8);  // 16
// Row pitches (bf16 elements) padded by 16 bytes so ldmatrix rows hit distinct banks.
constexpr int k_row = k_dim + 8;
constexpr int k_prow = k_chunk + 8;

struct pool_view {
  const uint8_t* base;
  long long per_page;
  long long page_bytes;
};

// The block shape for HB heads per block: 16 (one MMA M-tile; small batches,
// where blocks must split the heads to fill the GPU) or 64 (4 M-tiles; large
// batches, where decoding a query's entries once for all its heads matters).
template <int HB>
struct shape {
  static constexpr int warps = HB == 16 ? 8 : 16;
  static constexpr int threads = 32 * warps;
  static constexpr int m_tiles = HB / 16;
  static constexpr int k_split = warps / (4 * m_tiles);      // S: K split per (m, n) tile
  static constexpr int rows_per_warp = HB / warps;           // softmax
  static constexpr int pv_dims = k_dim / (warps / m_tiles);  // P·kv: output dims per warp
};

// What kernel 1 computes: fp32 (the fp32 reference), the bf16 mode's chunk maxima
// (S only), or the bf16 mode itself.
enum class pass { fp32, chunk_max, bf16 };

template <int HB>
struct smem_layout {
  __nv_bfloat16 q[HB][k_row];
  __nv_bfloat16 kv[k_chunk][k_row];
  __nv_bfloat16 p_hi[HB][k_prow];
  __nv_bfloat16 p_lo[HB][k_prow];
  uint2 raw[2][k_chunk][k_words];  // cp.async stage, double-buffered
  float s[shape<HB>::k_split][HB][k_chunk + 1];
  float m[HB];
  float l[HB];
  float corr[HB];
  const uint2* entry[k_max_chunks * k_chunk];  // nullptr = no entry
};

// The bf16 pass adds its running maxima; the fp32 pass keeps its smaller layout.
template <int HB>
struct smem_layout_bf16 : smem_layout<HB> {
  float m_run[k_max_chunks][HB];  // per chunk: max logit through the end of its 64-slot block
  float red[shape<HB>::threads];  // per thread: its part of the max before the split's first block
};

__device__ __forceinline__ float e8m0_to_float(unsigned code) {
  if (code == 0) return __int_as_float(0x00400000);  // 2^-127, subnormal
  if (code == 255) return __int_as_float(0x7fc00000);
  return __int_as_float(int(code) << 23);
}

__device__ __forceinline__ float2 e4m3x2_to_float2(unsigned two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two), __NV_E4M3);
  return __half22float2(__half2(h));
}

__device__ __forceinline__ unsigned pack_bf16(float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const unsigned*>(&v);
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return unsigned(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n");
}
__device__ __forceinline__ void cp_async_wait_all_but_one() {
  asm volatile("cp.async.wait_group 1;\n");
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a · b for one m16n8k16 tile (a: 4 regs, b: 2 regs, c: 4 fp32).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Address of a slot's entry; computed once per entry (64-bit division is slow on the GPU).
__device__ __forceinline__ const uint2* entry_words(const pool_view& pool, int slot) {
  const int per_page = int(pool.per_page);
  return reinterpret_cast<const uint2*>(pool.base + (slot / per_page) * pool.page_bytes +
                                        (slot % per_page) * kv_entry_bytes);
}

// Queues the raw bytes of block-relative chunk c into stage buffer `buf`.
template <int HB>
__device__ __forceinline__ void stage_chunk(smem_layout<HB>& s, int buf, int c) {
  for (int i = threadIdx.x; i < k_chunk * k_words; i += shape<HB>::threads) {
    const int e = i / k_words, w = i % k_words;
    const uint2* src = s.entry[c * k_chunk + e];
    if (src) cp_async8(&s.raw[buf][e][w], src + w);
  }
}

// Raw entries of stage `buf` → bf16 rows of s.kv (zero rows for empty slots).
template <int HB>
__device__ __forceinline__ void decode_chunk(smem_layout<HB>& s, int buf, int c) {
  for (int i = threadIdx.x; i < k_chunk * (k_nope_words + k_rope_words); i += shape<HB>::threads) {
    const int e = i / (k_nope_words + k_rope_words), w = i % (k_nope_words + k_rope_words);
    const bool valid = s.entry[c * k_chunk + e] != nullptr;
    if (w < k_nope_words) {
      uint4 out = make_uint4(0, 0, 0, 0);
      if (valid) {
        const uint2 v = s.raw[buf][e][w];
        const uint2 sc = s.raw[buf][e][k_nope_words + k_rope_words];
        const int blk = w / 8;  // 64 NoPE dims per scale
        const float f = e8m0_to_float((blk < 4 ? sc.x >> (8 * blk) : sc.y >> (8 * (blk - 4))) & 0xffu);
        const float2 a = e4m3x2_to_float2(v.x & 0xffffu), b = e4m3x2_to_float2(v.x >> 16);
        const float2 c2 = e4m3x2_to_float2(v.y & 0xffffu), d = e4m3x2_to_float2(v.y >> 16);
        out = make_uint4(pack_bf16(a.x * f, a.y * f), pack_bf16(b.x * f, b.y * f),
                         pack_bf16(c2.x * f, c2.y * f), pack_bf16(d.x * f, d.y * f));
      }
      *reinterpret_cast<uint4*>(&s.kv[e][8 * w]) = out;
    } else {
      const int r = w - k_nope_words;  // 4 RoPE dims per word, already bf16
      *reinterpret_cast<uint2*>(&s.kv[e][kv_entry_nope + 4 * r]) =
          valid ? s.raw[buf][e][w] : make_uint2(0, 0);
    }
  }
}

// s.m_run for the block's chunks c0 .. c0 + n_chunks − 1 of the list: the max of
// every chunk of the whole 64-slot blocks up to chunk c's (the second chunk of
// the last block may belong to the next split). cmax: this query's chunk maxima
// [n_all][n_heads], offset to the block's first head. Ends synchronised.
template <int HB>
__device__ __forceinline__ void fill_running_max(smem_layout_bf16<HB>& s, const float* cmax, int n_heads,
                                                 int c0, int n_chunks, int n_all) {
  constexpr int threads = shape<HB>::threads, per_head = threads / HB;
  const int h = threadIdx.x % HB;
  float m = -INFINITY;
  for (int k = threadIdx.x / HB; k < (c0 & ~1); k += per_head) m = fmaxf(m, cmax[size_t(k) * n_heads + h]);
  s.red[threadIdx.x] = m;
  for (int i = threadIdx.x; i < n_chunks * HB; i += threads) {
    const int c = i / HB, hh = i % HB, first = (c0 + c) & ~1;
    float bm = cmax[size_t(first) * n_heads + hh];
    if (first + 1 < n_all) bm = fmaxf(bm, cmax[size_t(first + 1) * n_heads + hh]);
    s.m_run[c][hh] = bm;
  }
  __syncthreads();
  if (threadIdx.x < HB) {
    for (int k = 1; k < per_head; ++k) m = fmaxf(m, s.red[k * HB + h]);
    for (int c = 0; c < n_chunks; ++c) s.m_run[c][h] = m = fmaxf(m, s.m_run[c][h]);
  }
  __syncthreads();
}

template <int HB, pass P>
__global__ void __launch_bounds__(shape<HB>::threads)
    sda_partial_kernel(const uint16_t* __restrict__ q, const float* __restrict__ q_f32, pool_view pool0,
                       const int32_t* __restrict__ idx0, int n_idx0, pool_view pool1,
                       const int32_t* __restrict__ idx1, int n_idx1, int stride0, int stride1, int n_heads,
                       float scale, int chunks_per_block, float* __restrict__ ws_o, float* __restrict__ ws_ml,
                       float* ws_cmax) {
  using sh = shape<HB>;
  using layout = std::conditional_t<P == pass::bf16, smem_layout_bf16<HB>, smem_layout<HB>>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  layout& s = *reinterpret_cast<layout*>(smem_raw);
  const int split = blockIdx.x, n_splits = gridDim.x;
  const int h0 = blockIdx.y * HB;
  const int t = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tq = lane & 3;  // MMA fragment row group and column pair
  const int n_total = n_idx0 + n_idx1;
  const int j0 = split * chunks_per_block * k_chunk;
  const int n_chunks = min(chunks_per_block, (n_total - j0 + k_chunk - 1) / k_chunk);
  const int n_all_chunks = (n_total + k_chunk - 1) / k_chunk;
  // This query's chunk maxima [n_all_chunks][n_heads], from this block's first head.
  float* cmax = ws_cmax + size_t(t) * n_all_chunks * n_heads + h0;
#if __CUDA_ARCH__ >= 900
  cudaTriggerProgrammaticLaunchCompletion();  // the next kernel may launch; it waits for our writes
#endif

  for (int i = tid; i < n_chunks * k_chunk; i += sh::threads) {
    const int j = j0 + i;
    const int slot = j < n_idx0    ? idx0[size_t(t) * stride0 + j]
                     : j < n_total ? idx1[size_t(t) * stride1 + (j - n_idx0)]
                                   : -1;
    s.entry[i] = slot < 0 ? nullptr : entry_words(j < n_idx0 ? pool0 : pool1, slot);
  }
  if (q) {
    const uint4* qv = reinterpret_cast<const uint4*>(q + (size_t(t) * n_heads + h0) * k_dim);
    for (int i = tid; i < HB * k_dim / 8; i += sh::threads)
      *reinterpret_cast<uint4*>(&s.q[i / (k_dim / 8)][(i % (k_dim / 8)) * 8]) = qv[i];
  } else {
    const float4* qv = reinterpret_cast<const float4*>(q_f32 + (size_t(t) * n_heads + h0) * k_dim);
    for (int i = tid; i < HB * k_dim / 8; i += sh::threads) {
      const float4 a = qv[2 * i], b = qv[2 * i + 1];
      *reinterpret_cast<uint4*>(&s.q[i / (k_dim / 8)][(i % (k_dim / 8)) * 8]) =
          make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
    }
  }
  if (tid < HB) {
    s.m[tid] = -INFINITY;
    s.l[tid] = 0.f;
  }
  __syncthreads();
  stage_chunk(s, 0, 0);
  cp_async_commit();
  if constexpr (P == pass::bf16) {
#if __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();  // the chunk_max pass's maxima are written
#endif
    fill_running_max(s, cmax, n_heads, j0 / k_chunk, n_chunks, n_all_chunks);
  }

  // S work: warp → (m-tile, n-tile of 8 entries, K slice); P·kv work: warp → (m-tile, output dims).
  const int s_job = warp % (sh::m_tiles * 4), s_ks = warp / (sh::m_tiles * 4);
  const int s_m = s_job / 4, s_n = s_job % 4;
  constexpr int s_kw = k_dim / sh::k_split;
  const int pv_m = warp / (sh::warps / sh::m_tiles);
  const int pv_d0 = (warp % (sh::warps / sh::m_tiles)) * sh::pv_dims;
  constexpr int pv_nt = sh::pv_dims / 8;
  float o[pv_nt][4];  // rows 16·pv_m + g (+8), dims pv_d0 + 8·nt + 2·tq (+1)
#pragma unroll
  for (int nt = 0; nt < pv_nt; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;

  for (int c = 0; c < n_chunks; ++c) {
    if (c + 1 < n_chunks) stage_chunk(s, (c + 1) & 1, c + 1);
    cp_async_commit();  // (possibly empty) group for chunk c + 1
    cp_async_wait_all_but_one();
    __syncthreads();  // chunk c staged by every thread; the previous P·kv is done with s.kv
    decode_chunk(s, c & 1, c);
    __syncthreads();

    // Partial S over this warp's K slice.
    {
      float sc[4] = {0.f, 0.f, 0.f, 0.f};
      const int r = 16 * s_m;
#pragma unroll
      for (int k0 = s_ks * s_kw; k0 < (s_ks + 1) * s_kw; k0 += 32) {
        unsigned a0[4], a1[4], b[4];
        ldmatrix_x4(a0, &s.q[r + (lane & 15)][k0 + (lane >> 4) * 8]);
        ldmatrix_x4(a1, &s.q[r + (lane & 15)][k0 + 16 + (lane >> 4) * 8]);
        ldmatrix_x4(b, &s.kv[8 * s_n + (lane & 7)][k0 + (lane >> 3) * 8]);
        mma_bf16(sc, a0, b[0], b[1]);
        mma_bf16(sc, a1, b[2], b[3]);
      }
      s.s[s_ks][r + g][8 * s_n + 2 * tq] = sc[0];
      s.s[s_ks][r + g][8 * s_n + 2 * tq + 1] = sc[1];
      s.s[s_ks][r + g + 8][8 * s_n + 2 * tq] = sc[2];
      s.s[s_ks][r + g + 8][8 * s_n + 2 * tq + 1] = sc[3];
    }
    __syncthreads();

    // Online softmax: warp owns rows_per_warp heads, lane = entry.
    const bool valid = s.entry[c * k_chunk + lane] != nullptr;
#pragma unroll
    for (int hh = 0; hh < sh::rows_per_warp; ++hh) {
      const int h = warp * sh::rows_per_warp + hh;
      float dot = 0.f;
#pragma unroll
      for (int ks = 0; ks < sh::k_split; ++ks) dot += s.s[ks][h][lane];
      const float x = valid ? dot * scale : -INFINITY;
      float m_new;
      if constexpr (P == pass::bf16) {
        m_new = s.m_run[c][h];
      } else {
        float mc = x;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) mc = fmaxf(mc, __shfl_xor_sync(0xffffffffu, mc, off));
        if constexpr (P == pass::chunk_max) {
          if (lane == 0) cmax[size_t(j0 / k_chunk + c) * n_heads + h] = mc;
          continue;
        }
        m_new = fmaxf(s.m[h], mc);
      }
      const float m_old = s.m[h];
      const float pe = m_new == -INFINITY ? 0.f : expf(x - m_new);
      float l = pe;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
      const __nv_bfloat16 hi = __float2bfloat16_rn(pe);
      s.p_hi[h][lane] = hi;
      if constexpr (P == pass::fp32) s.p_lo[h][lane] = __float2bfloat16_rn(pe - __bfloat162float(hi));
      __syncwarp();
      if (lane == 0) {
        const float corr = m_old == -INFINITY ? 0.f : expf(m_old - m_new);
        s.corr[h] = corr;
        s.l[h] = s.l[h] * corr + l;
        s.m[h] = m_new;
      }
    }
    if constexpr (P == pass::chunk_max) continue;
    __syncthreads();

    // O = O·corr + (P_hi + P_lo)·kv over this warp's rows and output dims (bf16: P_hi alone).
    const int r = 16 * pv_m;
    const float c_lo = s.corr[r + g], c_hi = s.corr[r + g + 8];
#pragma unroll
    for (int nt = 0; nt < pv_nt; ++nt) {
      o[nt][0] *= c_lo;
      o[nt][1] *= c_lo;
      o[nt][2] *= c_hi;
      o[nt][3] *= c_hi;
    }
#pragma unroll
    for (int e0 = 0; e0 < k_chunk; e0 += 16) {
      unsigned ph[4], pl[4];
      ldmatrix_x4(ph, &s.p_hi[r + (lane & 15)][e0 + (lane >> 4) * 8]);
      if constexpr (P == pass::fp32) ldmatrix_x4(pl, &s.p_lo[r + (lane & 15)][e0 + (lane >> 4) * 8]);
#pragma unroll
      for (int nt = 0; nt < pv_nt; nt += 2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, &s.kv[e0 + (lane & 15)][pv_d0 + 8 * nt + (lane >> 4) * 8]);
        mma_bf16(o[nt], ph, b[0], b[1]);
        if constexpr (P == pass::fp32) mma_bf16(o[nt], pl, b[0], b[1]);
        mma_bf16(o[nt + 1], ph, b[2], b[3]);
        if constexpr (P == pass::fp32) mma_bf16(o[nt + 1], pl, b[2], b[3]);
      }
    }
  }

  if constexpr (P == pass::chunk_max) return;
  const size_t base = (size_t(t) * n_splits + split) * n_heads + h0;
  const int r = 16 * pv_m;
#pragma unroll
  for (int nt = 0; nt < pv_nt; ++nt) {
    const int d = pv_d0 + 8 * nt + 2 * tq;
    *reinterpret_cast<float2*>(&ws_o[(base + r + g) * k_dim + d]) = make_float2(o[nt][0], o[nt][1]);
    *reinterpret_cast<float2*>(&ws_o[(base + r + g + 8) * k_dim + d]) = make_float2(o[nt][2], o[nt][3]);
  }
  __syncthreads();  // s.m / s.l final
  if (tid < HB) {
    ws_ml[(base + tid) * 2] = s.m[tid];
    ws_ml[(base + tid) * 2 + 1] = s.l[tid];
  }
}

// One block per (head, query); thread owns 4 dims. The splits' (max, sum) are
// loaded in parallel into shared memory first: a serial loop of dependent global
// loads cost ~0.5 µs per split. Official (bf16): the sink stays out of the max
// and joins the sum last; the output is divided, then rounded to bf16.
template <bool Official>
__global__ void __launch_bounds__(128)
    sda_merge_kernel(const float* __restrict__ ws_o, const float* __restrict__ ws_ml,
                     const float* __restrict__ sink, int n_splits, int n_heads, uint16_t* __restrict__ out,
                     float* __restrict__ out_f32) {
  extern __shared__ float w_s[];  // [n_splits] weights e^{m_s - M}, then [n_splits] sums
#if __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
  const int h = blockIdx.x, t = blockIdx.y;
  float* l_s = w_s + n_splits;
  const size_t r0 = size_t(t) * n_splits * n_heads + h;
  for (int s = threadIdx.x; s < n_splits; s += blockDim.x) {
    const float2 ml = reinterpret_cast<const float2*>(ws_ml)[r0 + size_t(s) * n_heads];
    w_s[s] = ml.x;
    l_s[s] = ml.y;
  }
  __syncthreads();
  const float sk = sink[h];
  float mx = Official ? -INFINITY : sk;
  for (int s = 0; s < n_splits; ++s) mx = fmaxf(mx, w_s[s]);
  float denom = Official ? 0.f : expf(sk - mx);
  for (int s = 0; s < n_splits; ++s) {
    const float w = w_s[s] == -INFINITY ? 0.f : expf(w_s[s] - mx);
    denom = fmaf(l_s[s], w, denom);
  }
  if (Official) denom += expf(sk - mx);
  __syncthreads();  // every thread has read the maxima
  for (int s = threadIdx.x; s < n_splits; s += blockDim.x)
    w_s[s] = w_s[s] == -INFINITY ? 0.f : expf(w_s[s] - mx);
  __syncthreads();
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int s = 0; s < n_splits; ++s) {
    const float w = w_s[s];
    const float4 v = reinterpret_cast<const float4*>(ws_o + (r0 + size_t(s) * n_heads) * k_dim)[threadIdx.x];
    o.x = fmaf(w, v.x, o.x);
    o.y = fmaf(w, v.y, o.y);
    o.z = fmaf(w, v.z, o.z);
    o.w = fmaf(w, v.w, o.w);
  }
  const size_t row = (size_t(t) * n_heads + h) * k_dim;
  if constexpr (Official) {
    const float4 r = make_float4(o.x / denom, o.y / denom, o.z / denom, o.w / denom);
    const uint2 b = make_uint2(pack_bf16(r.x, r.y), pack_bf16(r.z, r.w));
    if (out) {
      reinterpret_cast<uint2*>(out + row)[threadIdx.x] = b;
    } else {
      reinterpret_cast<float4*>(out_f32 + row)[threadIdx.x] =
          make_float4(__uint_as_float(b.x << 16), __uint_as_float(b.x & 0xffff0000u),
                      __uint_as_float(b.y << 16), __uint_as_float(b.y & 0xffff0000u));
    }
    return;
  }
  const float inv = 1.f / denom;
  if (out) {
    reinterpret_cast<uint2*>(out + row)[threadIdx.x] =
        make_uint2(pack_bf16(o.x * inv, o.y * inv), pack_bf16(o.z * inv, o.w * inv));
  } else {
    reinterpret_cast<float4*>(out_f32 + row)[threadIdx.x] =
        make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
  }
}

// Lets a kernel launch while the previous one runs (programmatic dependent
// launch); it waits for that one's writes in cudaGridDependencySynchronize.
cudaLaunchAttribute overlap_with_previous() {
  cudaLaunchAttribute a = {};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

template <int HB, pass P>
status launch_partial(const sparse_decode_attention_params& p, int n_splits, int chunks_per_block,
                      float* ws_o, float* ws_ml, float* ws_cmax, cudaStream_t stream) {
  using layout = std::conditional_t<P == pass::bf16, smem_layout_bf16<HB>, smem_layout<HB>>;
  // Per launch, not cached: the attribute belongs to the current device.
  cudaError_t err = cudaFuncSetAttribute(sda_partial_kernel<HB, P>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(layout)));
  if (err != cudaSuccess) return internal_error("sparse_decode_attention_cuda: %s", cudaGetErrorString(err));
  const pool_view p0{p.pool0.base, p.pool0.entries_per_page, p.pool0.page_bytes};
  const pool_view p1{p.pool1.base, p.pool1.entries_per_page, p.pool1.page_bytes};
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(n_splits), unsigned(p.n_heads / HB), unsigned(p.n_queries));
  cfg.blockDim = dim3(shape<HB>::threads);
  cfg.dynamicSmemBytes = sizeof(layout);
  cfg.stream = stream;
  // The bf16 pass overlaps its prologue with the chunk_max pass it reads.
  cudaLaunchAttribute attr[1] = {overlap_with_previous()};
  cfg.attrs = attr;
  cfg.numAttrs = P == pass::bf16 ? 1 : 0;
  err = cudaLaunchKernelEx(&cfg, sda_partial_kernel<HB, P>, p.q, p.q_f32, p0, p.idx0, int(p.n_idx0), p1,
                           p.idx1, int(p.n_idx1), int(p.idx_stride ? p.idx_stride : p.n_idx0),
                           int(p.idx_stride ? p.idx_stride : p.n_idx1), int(p.n_heads), p.scale,
                           chunks_per_block, ws_o, ws_ml, ws_cmax);
  if (err != cudaSuccess) return internal_error("sparse_decode_attention_cuda: %s", cudaGetErrorString(err));
  return {};
}

// Kernel 1 for p's mode: once (fp32), or the chunk maxima then the bf16 pass.
template <int HB>
status launch_partials(const sparse_decode_attention_params& p, int n_splits, int chunks_per_block,
                       float* ws_o, float* ws_ml, float* ws_cmax, cudaStream_t stream) {
  if (!p.bf16)
    return launch_partial<HB, pass::fp32>(p, n_splits, chunks_per_block, ws_o, ws_ml, ws_cmax, stream);
  const status st =
      launch_partial<HB, pass::chunk_max>(p, n_splits, chunks_per_block, ws_o, ws_ml, ws_cmax, stream);
  if (!st.ok()) return st;
  return launch_partial<HB, pass::bf16>(p, n_splits, chunks_per_block, ws_o, ws_ml, ws_cmax, stream);
}

// How a call cuts the work: 64 heads per block once there are enough (query,
// head group) pairs to fill the GPU (entries decoded once per query); else 16,
// aiming at two blocks per SM by splitting the entry list. At most
// k_max_chunks chunks per block.
struct split_plan {
  bool wide = false;
  int64_t chunks_per_block = 1, n_splits = 1;
};

split_plan plan_splits(int64_t n_queries, int64_t n_heads, int64_t n_entries, int64_t sms) {
  split_plan sp;
  const int64_t n_chunks = sda_n_splits(n_entries);
  sp.wide = n_heads % 64 == 0 && n_queries * (n_heads / 64) >= sms;
  const int64_t groups = n_heads / (sp.wide ? 64 : 16);
  const int64_t target = (sp.wide ? 1 : 2) * sms;
  const int64_t want_splits = std::max<int64_t>(1, (target + groups * n_queries - 1) / (groups * n_queries));
  sp.chunks_per_block = std::min<int64_t>(k_max_chunks, (n_chunks + want_splits - 1) / want_splits);
  sp.n_splits = (n_chunks + sp.chunks_per_block - 1) / sp.chunks_per_block;
  return sp;
}

}  // namespace

size_t sparse_decode_attention_cuda_workspace_bytes(int64_t n_queries, int64_t n_heads, int64_t n_idx0,
                                                    int64_t n_idx1) {
  // Per (query, split, head): 512 partial outputs + running max + sum. Fewer
  // queries may take more splits each, so the most over every count.
  const int64_t sms = cuda_sm_count();
  int64_t most = 0;
  for (int64_t q = 1; q <= n_queries; ++q)
    most = std::max(most, q * plan_splits(q, n_heads, n_idx0 + n_idx1, sms).n_splits);
  return size_t(most * n_heads) * (kv_entry_dim + 2) * sizeof(float) +
         sda_chunk_max_bytes(n_queries, n_heads, n_idx0 + n_idx1);
}

status sparse_decode_attention_cuda(const sparse_decode_attention_params& p, CUstream_st* stream) {
  HART_RETURN_IF_ERROR(sparse_decode_attention_validate(p));
  if (p.n_queries == 0) return {};
  const size_t need =
      sparse_decode_attention_cuda_workspace_bytes(p.n_queries, p.n_heads, p.n_idx0, p.n_idx1);
  if (!p.workspace || p.workspace_bytes < need)
    return invalid_argument("sparse_decode_attention_cuda: workspace of %zu bytes, need %zu",
                            p.workspace_bytes, need);
  auto misaligned = [](const void* ptr, uintptr_t a) { return (reinterpret_cast<uintptr_t>(ptr) % a) != 0; };
  if (misaligned(p.q, 16) || misaligned(p.q_f32, 16) || misaligned(p.out, 8) || misaligned(p.out_f32, 16) ||
      misaligned(p.workspace, 16) || (p.n_idx0 && (misaligned(p.pool0.base, 8) || p.pool0.page_bytes % 8)) ||
      (p.n_idx1 && (misaligned(p.pool1.base, 8) || p.pool1.page_bytes % 8)))
    return invalid_argument(
        "sparse_decode_attention_cuda: q, q_f32, out_f32 and workspace must be 16-byte aligned, out and "
        "pools 8-byte");
  const split_plan sp = plan_splits(p.n_queries, p.n_heads, p.n_idx0 + p.n_idx1, cuda_sm_count());
  const int n_splits = int(sp.n_splits);
  float* ws_o = static_cast<float*>(p.workspace);
  float* ws_ml = ws_o + size_t(p.n_queries) * n_splits * p.n_heads * kv_entry_dim;
  float* ws_cmax = ws_ml + size_t(p.n_queries) * n_splits * p.n_heads * 2;
  const int cpb = int(sp.chunks_per_block);
  HART_RETURN_IF_ERROR(sp.wide ? launch_partials<64>(p, n_splits, cpb, ws_o, ws_ml, ws_cmax, stream)
                               : launch_partials<16>(p, n_splits, cpb, ws_o, ws_ml, ws_cmax, stream));
  // The merge launches while the partial kernel runs (programmatic dependent
  // launch) and waits for its results in cudaGridDependencySynchronize.
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(p.n_heads), unsigned(p.n_queries));
  cfg.blockDim = dim3(128);
  cfg.dynamicSmemBytes = 2 * sizeof(float) * size_t(n_splits);
  cfg.stream = stream;
  cudaLaunchAttribute pdl[1] = {overlap_with_previous()};
  cfg.attrs = pdl;
  cfg.numAttrs = 1;
  const float* ws_o_c = ws_o;
  const float* ws_ml_c = ws_ml;
  cudaError_t err = cudaLaunchKernelEx(&cfg, p.bf16 ? sda_merge_kernel<true> : sda_merge_kernel<false>,
                                       ws_o_c, ws_ml_c, p.sink, n_splits, int(p.n_heads), p.out, p.out_f32);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("sparse_decode_attention_cuda: %s", cudaGetErrorString(err));
  return {};
}

}  // namespace hart
