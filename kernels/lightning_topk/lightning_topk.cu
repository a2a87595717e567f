// CUDA Lightning top-k: exact radix select over fp32 keys, one thread-block cluster
// of C CTAs per row (C = 1, 2, 4, 8 or 16 picked on the host from row_stride and batch,
// shapes only; everything that depends on the data — lengths, which path a row takes —
// is decided on the device, so a launch can be captured in a CUDA graph). Measured
// versions and what bounds the kernel: docs/perf-notes.md, "Lightning top-k (T1)".
//
// Key: the fp32 bit pattern made order-preserving as a uint32 (-0 folded into +0,
// NaN mapped to 0 = "never selected"; -inf maps to 0x007fffff, so 0 is free).
// Digits: bits 31..20 (4096 bins), 19..10 (1024), 9..0 (1024).
//
// Per row (cluster), each CTA owns a contiguous chunk [s, e) of the row:
//   len <= k        : trivial — every valid entry is selected, no histogram.
//   P1 (one HBM read): histogram of digit 1; when the chunk fits in shared memory
//                     (RES), the keys are kept there (the "resident" path), else the
//                     later passes re-read the row (L2) — the "streaming" path.
//   cluster reduce  : every CTA sums the C histograms over distributed shared memory
//                     and finds the same threshold bin (suffix scan).
//   fast finish     : (the common case) when the selections above the bin plus the whole
//                     bin fit rank 0's 2048-entry stage, P2 below collects the bin and every
//                     CTA flushes selections + candidates to rank 0, which runs levels 2-3
//                     on them with block barriers only, keeps the entries >= K* and sorts
//                     them (3 cluster barriers instead of 7, no tie pass: the (key, ~index)
//                     composites are unique). Otherwise (or on 16-CTA clusters with
//                     k > LT_FAST_RANKOUT_K) the cluster-wide path below runs.
//   P2 (filter)     : entries above the bin are selected at once; entries in the bin go
//                     to a per-CTA candidate buffer (overflow -> rescan the chunk), and
//                     feed the digit-2 histogram.
//   P3              : digit-3 histogram over the candidates -> exact threshold key K*
//                     and `need`, how many entries equal to K* are taken.
//   gather          : candidates > K* are selected; if all entries == K* are needed they
//                     are taken too, else (a tie across the boundary) each CTA takes its
//                     quota in index order (lower ranks own lower indices), so the lowest
//                     indices win.
//   final           : each CTA's selections (collected locally) are flushed once over
//                     DSMEM; with C = 16 every CTA gets the whole list and writes the
//                     outputs of a 1/C share by counting ranks, else rank 0 sorts them
//                     (bitonic, registers + shuffles) by (key desc, index asc); indices
//                     are page-translated, -1 padded.
#include "kernels/cuda_device.h"
#include "kernels/lightning_topk/lightning_topk.h"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace hart {
namespace {

namespace cg = cooperative_groups;

constexpr int k_threads = 512;  // 16 warps: enough loads in flight per SM for one CTA to stream its chunk
constexpr int k_warps = k_threads / 32;
constexpr int k_bins1 = 4096;
constexpr int k_bins23 = 1024;
// Build knobs for A/B runs (scripts/gpu/bench_lightning_topk.sh builds both settings).
#ifndef LT_BULK
#define LT_BULK 1  // resident float4 path: first read by bulk async copies (TMA engine)
#endif
#ifndef LT_MAX_CLUSTER
#define LT_MAX_CLUSTER 16  // rows > 128K use a 16-CTA (non-portable) cluster where the GPU can place one
#endif
#ifndef LT_HCOPIES
#define LT_HCOPIES 4  // copies of the digit-1 histogram (lane % copies) to cut same-address atomic conflicts
#endif
#ifndef LT_RANK_OUT
#define LT_RANK_OUT 1  // allow the rank-counting output (16-CTA clusters); 0: always the bitonic sort
#endif
#ifndef LT_FAST
#define LT_FAST 1  // finish on rank 0 after level 1 when the threshold bin is small (0: always levels 2-3)
#endif
#ifndef LT_FAST_RANKOUT_K
#define LT_FAST_RANKOUT_K \
  512  // largest k for the fast finish on clusters that rank-count (C = 16); measured: k = 1024 lost 1.7 us
#endif
#ifndef LT_UNROLL
#define LT_UNROLL 8  // float4 loads in flight per thread in streaming passes
#endif
constexpr int k_unroll = LT_UNROLL;
constexpr int k_pieces = 8;          // bulk copies (one mbarrier each) per resident chunk
constexpr int k_res_cap = 32768;     // largest chunk (elements) kept resident: 128 KB of keys
constexpr int k_cand_res = 4096;     // candidate buffer entries when resident
constexpr int k_cand_stream = 8192;  // ... when streaming (the keys buffer is not needed)

struct launch_args {
  const float* scores;
  const int32_t* lengths;
  const int32_t* page_table;
  int32_t* out;
  int64_t row_stride;
  int64_t pt_stride;
  int k;
  int page_bits;
  int chunk_cap;  // resident keys capacity (elements), 0 when streaming
  int hcopies;    // digit-1 histogram copies in dynamic smem (1: the static one)
  int rank_out;   // 1: every CTA ranks a share of the selections; 0: rank 0 sorts them
  int cand_cap;   // candidate buffer capacity (entries)
};

struct alignas(16) smem_t {
  int hist1[k_bins1];
  int hist2[k_bins23];
  int hist3[k_bins23];
  unsigned long long stage[k_lightning_topk_max_k];  // rank 0: selected (key << 32 | ~index)
  int stage_cnt;                                     // rank 0: entries in stage
  int sel_cnt;                                       // entries in this CTA's selection list
  int sel_base;                                      // where they go in rank 0's stage
  int my_eq;  // tie path: this CTA's entries equal to the threshold key
  int cand_cnt;
  int warp_tmp[k_warps];
  int sel_bin, sel_kk, sel_eq, total;
  unsigned long long mbar[k_pieces];
};

__device__ __forceinline__ uint32_t to_key(float x) {
  uint32_t b = __float_as_uint(x);
  if (x != x) return 0u;  // NaN: never selected
  if (x == 0.f) b = 0u;   // -0 == +0
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

template <int C>
__device__ __forceinline__ void csync() {
  if constexpr (C == 1) {
    __syncthreads();
  } else {
    cg::this_cluster().sync();
  }
}

template <int C, typename T>
__device__ __forceinline__ T* peer(T* p, int r) {
  if constexpr (C == 1) {
    return p;
  } else {
    return cg::this_cluster().map_shared_rank(p, r);
  }
}

// Exclusive prefix sum of v over the block (thread order); `total` gets the sum.
__device__ __forceinline__ int block_excl_sum(int v, int* warp_tmp, int& total) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warp_tmp[w] = x;
  __syncthreads();
  int before = 0, tot = 0;
#pragma unroll
  for (int i = 0; i < k_warps; ++i) {
    const int t = warp_tmp[i];
    before += i < w ? t : 0;
    tot += t;
  }
  __syncthreads();
  total = tot;
  return before + x - v;
}

// Cluster-wide histogram + threshold bin. Called right after a cluster barrier that
// follows the histogram build. Rank r owns bins [r*NB/C, (r+1)*NB/C): it sums that
// slice over the C CTAs (coalesced 16-byte DSMEM reads) and writes the sums in place
// (no peer reads rank r's copy of its own slice, so this is race-free); after a second
// barrier every CTA reads the reduced histogram from the owners (coalesced again) and
// finds the bin holding the kk-th largest: sel_bin, sel_kk (rank inside the bin),
// sel_eq (bin count), total (all counts). (v1 read the C histograms with 4-byte strided
// DSMEM loads: 32 transactions per warp load, tens of microseconds.)
template <int C, int NB>
__device__ __forceinline__ void select_bin(int* hist, int kk, smem_t& S) {
  constexpr int SLICE = NB / C;        // >= 128 bins
  constexpr int PER = NB / k_threads;  // 8 or 2 consecutive bins per thread
  if constexpr (C > 1) {
    const int rank = int(cg::this_cluster().block_rank());
    for (int q = threadIdx.x; q < SLICE / 4; q += k_threads) {
      int4 acc = make_int4(0, 0, 0, 0);
#pragma unroll
      for (int r = 0; r < C; ++r) {
        const int4 v = reinterpret_cast<const int4*>(peer<C>(hist, r) + rank * SLICE)[q];
        acc.x += v.x;
        acc.y += v.y;
        acc.z += v.z;
        acc.w += v.w;
      }
      reinterpret_cast<int4*>(hist + rank * SLICE)[q] = acc;
    }
    csync<C>();
  }
  // Thread t holds bins [t*PER, t*PER + PER) of the reduced histogram.
  const int b0 = int(threadIdx.x) * PER;
  const int* src = peer<C>(hist, b0 / SLICE);
  int h[PER];
  if constexpr (PER == 8) {
    const int4 u = reinterpret_cast<const int4*>(src + b0)[0];
    const int4 w = reinterpret_cast<const int4*>(src + b0)[1];
    h[0] = u.x;
    h[1] = u.y;
    h[2] = u.z;
    h[3] = u.w;
    h[4] = w.x;
    h[5] = w.y;
    h[6] = w.z;
    h[7] = w.w;
  } else {
    static_assert(PER == 2, "bins per thread");
    const int2 u = reinterpret_cast<const int2*>(src + b0)[0];
    h[0] = u.x;
    h[1] = u.y;
  }
  int sum = 0;
#pragma unroll
  for (int j = 0; j < PER; ++j) sum += h[j];
  int total;
  const int below = block_excl_sum(sum, S.warp_tmp, total);
  int above = total - below - sum;  // entries in bins above this thread's range
#pragma unroll
  for (int j = PER - 1; j >= 0; --j) {
    if (above < kk && above + h[j] >= kk) {
      S.sel_bin = b0 + j;
      S.sel_kk = kk - above;
      S.sel_eq = h[j];
    }
    above += h[j];
  }
  if (threadIdx.x == 0) S.total = total;
  __syncthreads();
}

__device__ __forceinline__ unsigned long long pack(uint32_t key, int idx) {
  return (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(idx));
}

// Warp-aggregated append of the lanes with `pred` to this CTA's selection list (all
// lanes call). Flushed to rank 0 once at the end (v1 appended to rank 0 directly: one
// remote same-address atomic per warp and hit, serialised across the cluster).
__device__ __forceinline__ void emit(bool pred, uint32_t key, int idx, unsigned long long* stage0, int* cnt0,
                                     int k) {
  const unsigned m = __ballot_sync(0xffffffffu, pred);
  if (!m) return;
  const int lane = threadIdx.x & 31, leader = __ffs(m) - 1;
  int base = 0;
  if (lane == leader) base = atomicAdd(cnt0, __popc(m));
  base = __shfl_sync(0xffffffffu, base, leader);
  const int slot = base + __popc(m & ((1u << lane) - 1u));
  if (pred && slot < k) stage0[slot] = pack(key, idx);
}

// Warp-aggregated append to this CTA's candidate buffer (all lanes call).
__device__ __forceinline__ void add_cand(bool pred, uint32_t key, int idx, uint32_t* ck, int32_t* ci,
                                         int* cnt, int cap) {
  const unsigned m = __ballot_sync(0xffffffffu, pred);
  if (!m) return;
  const int lane = threadIdx.x & 31, leader = __ffs(m) - 1;
  int base = 0;
  if (lane == leader) base = atomicAdd(cnt, __popc(m));
  base = __shfl_sync(0xffffffffu, base, leader);
  const int slot = base + __popc(m & ((1u << lane) - 1u));
  if (pred && slot < cap) {
    ck[slot] = key;
    ci[slot] = idx;
  }
}

// Calls f(valid, key, idx) for every element of [s, e) read from global memory, all lanes
// converged; WRITE stores the keys (0 past e) to keys_s[i - s] (RES path, first pass).
// Groups of 4 (or 1) elements in which no lane of the warp has a key >= lo are skipped
// without calling f (the filter passes touch ~1% of the entries; lo = 0 calls f always).
template <bool VEC, bool WRITE, typename F>
__device__ __forceinline__ void scan_global(const float* x, int s, int e, uint32_t* keys_s, uint32_t lo,
                                            F&& f) {
  const int n = e - s;
  if constexpr (VEC) {
    for (int off0 = 0; off0 < n; off0 += 4 * k_threads * k_unroll) {
      float4 v[k_unroll];
#pragma unroll
      for (int u = 0; u < k_unroll; ++u) {
        const int off = off0 + (u * k_threads + int(threadIdx.x)) * 4;
        if (off + 3 < n) {
          v[u] = __ldg(reinterpret_cast<const float4*>(x + s + off));
        } else {
          const float nan = __int_as_float(0x7fc00000);
          v[u].x = off + 0 < n ? x[s + off + 0] : nan;
          v[u].y = off + 1 < n ? x[s + off + 1] : nan;
          v[u].z = off + 2 < n ? x[s + off + 2] : nan;
          v[u].w = off + 3 < n ? x[s + off + 3] : nan;
        }
      }
#pragma unroll
      for (int u = 0; u < k_unroll; ++u) {
        const int off = off0 + (u * k_threads + int(threadIdx.x)) * 4;
        const uint4 kq = make_uint4(to_key(v[u].x), to_key(v[u].y), to_key(v[u].z), to_key(v[u].w));
        if constexpr (WRITE) {
          if (off < n) *reinterpret_cast<uint4*>(keys_s + off) = kq;
        }
        const uint32_t mx = max(max(kq.x, kq.y), max(kq.z, kq.w));
        if (__any_sync(0xffffffffu, mx >= lo)) {
          f(off + 0 < n, kq.x, s + off + 0);
          f(off + 1 < n, kq.y, s + off + 1);
          f(off + 2 < n, kq.z, s + off + 2);
          f(off + 3 < n, kq.w, s + off + 3);
        }
      }
    }
  } else {
    for (int off0 = 0; off0 < n; off0 += k_threads * k_unroll) {
      float v[k_unroll];
#pragma unroll
      for (int u = 0; u < k_unroll; ++u) {
        const int off = off0 + u * k_threads + int(threadIdx.x);
        v[u] = off < n ? x[s + off] : __int_as_float(0x7fc00000);
      }
#pragma unroll
      for (int u = 0; u < k_unroll; ++u) {
        const int off = off0 + u * k_threads + int(threadIdx.x);
        const uint32_t key = to_key(v[u]);
        if constexpr (WRITE) {
          if (off < n) keys_s[off] = key;
        }
        if (__any_sync(0xffffffffu, key >= lo)) f(off < n, key, s + off);
      }
    }
  }
}

// Same over the resident keys (RES path): keys_s[0, n) plus zero padding to a multiple of 4.
template <typename F>
__device__ __forceinline__ void scan_resident(const uint32_t* keys_s, int s, int e, uint32_t lo, F&& f) {
  const int n = e - s;
  for (int off0 = 0; off0 < n; off0 += 4 * k_threads) {
    const int off = off0 + int(threadIdx.x) * 4;
    uint4 kq = make_uint4(0, 0, 0, 0);
    if (off < n) kq = *reinterpret_cast<const uint4*>(keys_s + off);
    // Past n the keys may be stale: they only reach f with v = false.
    const uint32_t mx = off < n ? max(max(kq.x, kq.y), max(kq.z, kq.w)) : 0u;
    if (!__any_sync(0xffffffffu, mx >= lo)) continue;
    f(off + 0 < n, kq.x, s + off + 0);
    f(off + 1 < n, kq.y, s + off + 1);
    f(off + 2 < n, kq.z, s + off + 2);
    f(off + 3 < n, kq.w, s + off + 3);
  }
}

#if LT_BULK
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_wait(unsigned long long* bar, uint32_t parity) {
  const uint32_t a = smem_addr(bar);
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, "
        "p;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  }
}

// First pass of the resident float4 path: the chunk arrives by bulk async copies
// (k_pieces pieces, one mbarrier each), so all of it is in flight at once instead of
// what 512 threads' registers can hold; each piece is turned into keys in place and
// counted as soon as it lands. The last < 4 elements come by plain loads.
template <typename F>
__device__ __forceinline__ void load_resident_bulk(const float* x, int s, int e, uint32_t* keys_s,
                                                   unsigned long long* mbar, F&& f) {
  const int n = e - s;
  const int n_al = n & ~3;
  const int piece = ((n_al + k_pieces - 1) / k_pieces + 3) & ~3;
  if (threadIdx.x == 0) {
    for (int i = 0; i < k_pieces; ++i)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&mbar[i])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    for (int i = 0; i < k_pieces; ++i) {
      const int p0 = min(i * piece, n_al), p1 = min(p0 + piece, n_al);
      const uint32_t bytes = uint32_t(p1 - p0) * 4u;
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&mbar[i])),
                   "r"(bytes)
                   : "memory");
      if (bytes) {
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                smem_addr(keys_s + p0)),
            "l"(x + s + p0), "r"(bytes), "r"(smem_addr(&mbar[i]))
            : "memory");
      }
    }
  }
  __syncthreads();  // barriers initialised before anyone waits
  for (int i = 0; i < k_pieces; ++i) {
    const int p0 = min(i * piece, n_al), p1 = min(p0 + piece, n_al);
    mbar_wait(&mbar[i], 0);
    for (int off0 = p0; off0 < p1; off0 += 4 * k_threads) {
      const int off = off0 + int(threadIdx.x) * 4;
      const bool v = off < p1;  // p0, p1 are multiples of 4: all four or none
      uint4 kq = make_uint4(0, 0, 0, 0);
      if (v) {
        const uint4 raw = *reinterpret_cast<const uint4*>(keys_s + off);
        kq = make_uint4(to_key(__uint_as_float(raw.x)), to_key(__uint_as_float(raw.y)),
                        to_key(__uint_as_float(raw.z)), to_key(__uint_as_float(raw.w)));
        *reinterpret_cast<uint4*>(keys_s + off) = kq;
      }
      f(v, kq.x, s + off + 0);
      f(v, kq.y, s + off + 1);
      f(v, kq.z, s + off + 2);
      f(v, kq.w, s + off + 3);
    }
  }
  {
    const int off = n_al + int(threadIdx.x);
    const bool v = off < n;
    const uint32_t key = v ? to_key(x[s + off]) : 0u;
    if (v) keys_s[off] = key;
    f(v, key, s + off);
  }
}

#endif  // LT_BULK

__device__ __forceinline__ void cmp_keep(unsigned long long& v, unsigned long long w, bool keep_max) {
  v = keep_max ? (v > w ? v : w) : (v < w ? v : w);
}

// Bitonic sort of st[0, E*k_threads) into descending order; element i lives in thread
// i % k_threads, register i / k_threads. Strides >= k_threads swap registers, strides
// of 32..k_threads/2 go through shared memory, strides < 32 use warp shuffles.
template <int E>
__device__ __forceinline__ void bitonic_desc(unsigned long long* st) {
  constexpr int N = E * k_threads;
  unsigned long long v[E];
#pragma unroll
  for (int e = 0; e < E; ++e) v[e] = st[threadIdx.x + e * k_threads];
  for (int size = 2; size <= N; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      if (stride >= k_threads) {
        // Partner in the same thread: registers e and e + stride / k_threads.
        auto cswap = [&](unsigned long long& lo, unsigned long long& hi, int e) {
          const bool desc = ((int(threadIdx.x) + e * k_threads) & size) == 0;
          const unsigned long long x = lo, y = hi;
          const bool sw = desc ? (x < y) : (x > y);
          lo = sw ? y : x;
          hi = sw ? x : y;
        };
        if constexpr (E >= 2) {
          if (stride == k_threads) {
#pragma unroll
            for (int q = 0; q < E / 2; ++q) cswap(v[2 * q], v[2 * q + 1], 2 * q);
          }
        }
        if constexpr (E >= 4) {
          if (stride == 2 * k_threads) {
            cswap(v[0], v[2], 0);
            cswap(v[1], v[3], 1);
          }
        }
      } else if (stride >= 32) {
#pragma unroll
        for (int e = 0; e < E; ++e) st[threadIdx.x + e * k_threads] = v[e];
        __syncthreads();
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const int i = int(threadIdx.x) + e * k_threads;
          const int j = i ^ stride;
          cmp_keep(v[e], st[j], (i < j) == ((i & size) == 0));
        }
        __syncthreads();
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const int i = int(threadIdx.x) + e * k_threads;
          const unsigned long long w = __shfl_xor_sync(0xffffffffu, v[e], stride);
          cmp_keep(v[e], w, ((i & stride) == 0) == ((i & size) == 0));
        }
      }
    }
  }
#pragma unroll
  for (int e = 0; e < E; ++e) st[threadIdx.x + e * k_threads] = v[e];
  __syncthreads();
}

template <int C, bool RES, bool VEC>
__global__ void __launch_bounds__(k_threads, 1) lightning_topk_kernel(launch_args a) {
  extern __shared__ __align__(16) unsigned char dyn[];
  __shared__ smem_t S;
  int rank = 0;
  if constexpr (C > 1) rank = int(cg::this_cluster().block_rank());
  const int64_t b = blockIdx.x / C;
  const int k = a.k;
  int len = a.lengths ? a.lengths[b] : int(a.row_stride);
  len = len < 0 ? 0 : (int64_t(len) > a.row_stride ? int(a.row_stride) : len);
  const float* x = a.scores + b * a.row_stride;

  for (int i = threadIdx.x; i < k_bins1; i += k_threads) S.hist1[i] = 0;
  for (int i = threadIdx.x; i < k_bins23; i += k_threads) {
    S.hist2[i] = 0;
    S.hist3[i] = 0;
  }
  if (a.hcopies > 1) {
    for (int i = threadIdx.x; i < k_bins1 * a.hcopies / 4; i += k_threads)
      reinterpret_cast<int4*>(dyn)[i] = make_int4(0, 0, 0, 0);
  }
  if (threadIdx.x == 0) {
    S.stage_cnt = 0;
    S.sel_cnt = 0;
    S.cand_cnt = 0;
  }
  __syncthreads();

  // My chunk of the row: contiguous, a multiple of 4 long (float4 alignment), rank order = index order.
  const int rchunk = int(((int64_t(len) + C - 1) / C + 3) & ~int64_t(3));
  const int s = min(rank * rchunk, len);
  const int e = min(s + rchunk, len);
  const int hc = a.hcopies;
  int* h4 = reinterpret_cast<int*>(dyn);  // [k_bins1][hc] when hc > 1
  uint32_t* keys_s = reinterpret_cast<uint32_t*>(dyn) + (hc > 1 ? k_bins1 * hc : 0);
  uint32_t* ck = keys_s + a.chunk_cap;
  int32_t* ci = reinterpret_cast<int32_t*>(ck + a.cand_cap);
  unsigned long long* lsel = reinterpret_cast<unsigned long long*>(ci + a.cand_cap);  // [k] local selections
  unsigned long long* stage0 = lsel;
  int* cnt0 = &S.sel_cnt;

  // Every pass over "the source" (resident keys or the row in global memory).
  auto scan_src = [&](uint32_t lo, auto&& f) {
    if constexpr (RES) {
      scan_resident(keys_s, s, e, lo, f);
    } else {
      scan_global<VEC, false>(x, s, e, nullptr, lo, f);
    }
  };

  // Fast finish (cluster-uniform): after level 1, every CTA sends its selections above the
  // threshold bin and its candidates in the bin to rank 0, which sorts them all and keeps
  // the first k (the composites are unique and ordered like "better", and everything
  // below the bin ranks under all of them) -- no levels 2-3, no tie pass.
  bool fast = false;
  uint32_t fb1 = 0u;  // fast: the level-1 threshold bin and the rank wanted inside it
  int fkk = 0;
  if (len <= k) {
    // Trivial path: all valid entries are selected.
    csync<C>();  // rank 0's stage counter is zeroed (and every CTA runs) before the flush
    scan_global<VEC, false>(x, s, e, nullptr, 1u, [&](bool v, uint32_t key, int idx) {
      emit(v && key != 0u, key, idx, stage0, cnt0, k);
    });
  } else {
    // P1: digit-1 histogram (+ keys kept resident).
    const int lane_copy = int(threadIdx.x) & (hc - 1);
    auto count1 = [&](bool v, uint32_t key, int) {
      if (v && key != 0u) {
        if (hc > 1) {  // block-uniform; two direct shared addresses keep the atomics ATOMS
          atomicAdd(&h4[int(key >> 20) * hc + lane_copy], 1);
        } else {
          atomicAdd(&S.hist1[key >> 20], 1);
        }
      }
    };
#if LT_BULK
    if constexpr (RES && VEC) {
      load_resident_bulk(x, s, e, keys_s, S.mbar, count1);
    } else {
      scan_global<VEC, RES>(x, s, e, keys_s, 0u, count1);
    }
#else
    scan_global<VEC, RES>(x, s, e, keys_s, 0u, count1);
#endif
    if (hc > 1) {
      __syncthreads();
      for (int bn = threadIdx.x; bn < k_bins1; bn += k_threads) {
        int sum = 0;
        if (hc == 4) {
          const int4 q = reinterpret_cast<const int4*>(h4)[bn];
          sum = q.x + q.y + q.z + q.w;
        } else {
          for (int c = 0; c < hc; ++c) sum += h4[bn * hc + c];
        }
        S.hist1[bn] = sum;
      }
    }
    csync<C>();
    select_bin<C, k_bins1>(S.hist1, k, S);
    if (S.total <= k) {
      // Fewer than k valid (NaN) entries: take them all.
      scan_src(1u, [&](bool v, uint32_t key, int idx) { emit(v && key != 0u, key, idx, stage0, cnt0, k); });
    } else {
      const uint32_t b1 = uint32_t(S.sel_bin);
      int kk = S.sel_kk;
      const int cap = a.cand_cap;
      // Selections above the bin (k - kk) plus the whole bin (sel_eq) fit rank 0's stage;
      // then no CTA holds more than k_lightning_topk_max_k <= cap candidates either.
      fast = LT_FAST && (k - kk) + S.sel_eq <= int(k_lightning_topk_max_k) &&
             (!a.rank_out || k <= LT_FAST_RANKOUT_K);
      fb1 = b1;
      fkk = kk;
      // P2: select above the bin, collect the bin, digit-2 histogram (not when fast).
      scan_src(b1 << 20, [&](bool v, uint32_t key, int idx) {
        const bool ok = v && key != 0u;
        const uint32_t d1 = key >> 20;
        emit(ok && d1 > b1, key, idx, stage0, cnt0, k);
        const bool in = ok && d1 == b1;
        if (in && !fast) atomicAdd(&S.hist2[(key >> 10) & 1023u], 1);
        add_cand(in, key, idx, ck, ci, &S.cand_cnt, cap);
      });
      if (!fast) {
        csync<C>();
        select_bin<C, k_bins23>(S.hist2, kk, S);
        const uint32_t p2 = (b1 << 10) | uint32_t(S.sel_bin);
        kk = S.sel_kk;
        const int ncand = S.cand_cnt;
        const bool overflow = ncand > cap;  // block-uniform
        // Every pass over this CTA's entries of bin b1 (candidates, or the chunk filtered).
        auto scan_bin = [&](auto&& f) {
          if (!overflow) {
            for (int j0 = 0; j0 < ncand; j0 += k_threads) {
              const int j = j0 + int(threadIdx.x);
              const bool v = j < ncand;
              f(v, v ? ck[j] : 0u, v ? ci[j] : 0);
            }
          } else {
            scan_src(b1 << 20, [&](bool v, uint32_t key, int idx) {
              f(v && key != 0u && (key >> 20) == b1, key, idx);
            });
          }
        };
        // P3: digit-3 histogram.
        scan_bin([&](bool v, uint32_t key, int) {
          if (v && (key >> 10) == p2) atomicAdd(&S.hist3[key & 1023u], 1);
        });
        csync<C>();
        select_bin<C, k_bins23>(S.hist3, kk, S);
        const uint32_t kstar = (p2 << 10) | uint32_t(S.sel_bin);
        const int need = S.sel_kk;
        const bool take_all_eq = need == S.sel_eq;
        // Gather: the bin's entries above K* (and the ties when all are needed).
        scan_bin([&](bool v, uint32_t key, int idx) {
          emit(v && (key > kstar || (take_all_eq && key == kstar)), key, idx, stage0, cnt0, k);
        });
        if (!take_all_eq) {
          // A tie crosses the boundary: CTA r takes the lowest-index entries == K* after
          // the lower ranks' ones, in index order.
          int my_eq = 0;
          scan_bin([&](bool v, uint32_t key, int) { my_eq += (v && key == kstar) ? 1 : 0; });
          int tot_eq;
          block_excl_sum(my_eq, S.warp_tmp, tot_eq);
          if (threadIdx.x == 0) S.my_eq = tot_eq;
          csync<C>();
          int before = 0;
          for (int r = 0; r < rank; ++r) before += *peer<C>(&S.my_eq, r);
          int quota = need - before;
          quota = quota < 0 ? 0 : (quota > tot_eq ? tot_eq : quota);
          int taken = 0;
          const int n = e - s;
          for (int off0 = 0; off0 < n && taken < quota; off0 += 4 * k_threads) {
            const int off = off0 + int(threadIdx.x) * 4;
            uint32_t kq[4];
            int c = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              uint32_t key = 0u;
              if (off + j < n) key = RES ? keys_s[off + j] : to_key(x[s + off + j]);
              kq[j] = key;
              c += key == kstar;
            }
            int tot;
            int ord = taken + block_excl_sum(c, S.warp_tmp, tot);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              if (kq[j] == kstar) {
                if (ord < quota) {
                  const int slot = atomicAdd(&S.sel_cnt, 1);
                  if (slot < k) lsel[slot] = pack(kstar, s + off + j);
                }
                ++ord;
              }
            }
            taken += tot;
          }
        }
      }  // !fast
    }
  }

  if (a.rank_out && !fast) {
    // Flush: rank 0's counter hands out each CTA's range (one remote atomic per CTA);
    // the CTA then bumps every other rank's counter and writes its entries into every
    // rank's stage, so after one barrier each CTA holds the whole list and its count and
    // no DSMEM access follows the barrier. Each CTA then ranks a 1/C share of the list
    // by counting larger entries (the composites are unique) and writes those outputs:
    // no sort, and the work is spread over the cluster.
    __syncthreads();
    const int nsel = min(S.sel_cnt, k);
    if (threadIdx.x == 0) {
      S.sel_base = nsel ? atomicAdd(peer<C>(&S.stage_cnt, 0), nsel) : 0;
      for (int r = 1; r < C; ++r)
        if (nsel) atomicAdd(peer<C>(&S.stage_cnt, r), nsel);
    }
    __syncthreads();
    {
      const int base = S.sel_base;
      for (int r = 0; r < C; ++r) {
        unsigned long long* st = peer<C>(S.stage, r);
        for (int i = threadIdx.x; i < nsel; i += k_threads)
          if (base + i < k) st[base + i] = lsel[i];
      }
    }
    csync<C>();
    const int m = min(S.stage_cnt, k);
    int32_t* out = a.out + b * k;
    const int64_t mask = (int64_t(1) << a.page_bits) - 1;
    {
      const int per = (m + C - 1) / C;
      const int j0 = rank * per, j1 = min(j0 + per, m);
      const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
      for (int j = j0 + warp; j < j1; j += k_warps) {
        const unsigned long long cj = S.stage[j];
        int cnt = 0;
        for (int i = lane; i < m; i += 32) cnt += S.stage[i] > cj ? 1 : 0;
        cnt = __reduce_add_sync(0xffffffffu, cnt);
        if (lane == 0) {
          const int64_t i = int64_t(0xffffffffu - uint32_t(cj & 0xffffffffull));
          int32_t o = int32_t(i);
          if (a.page_table) {
            const int64_t page = a.page_table[b * a.pt_stride + (i >> a.page_bits)];
            o = int32_t((page << a.page_bits) | (i & mask));
          }
          out[cnt] = o;
        }
      }
      for (int j = m + rank * k_threads + int(threadIdx.x); j < k; j += C * k_threads) out[j] = -1;
    }
    return;
  }
  // Flush: one remote atomic per CTA reserves its range in rank 0's stage, then
  // coalesced remote stores. Rank 0's stage_cnt was zeroed before the first barrier
  // (every path passes at least one csync before this point).
  // Fast finish: the CTA's candidates follow its selections (the stage holds
  // k_lightning_topk_max_k entries, enough by the fast condition).
  __syncthreads();
  const int nsel = min(S.sel_cnt, k);
  const int ncf = fast ? S.cand_cnt : 0;
  const int lim = fast ? int(k_lightning_topk_max_k) : k;
  if (threadIdx.x == 0) S.sel_base = (nsel + ncf) ? atomicAdd(peer<C>(&S.stage_cnt, 0), nsel + ncf) : 0;
  __syncthreads();
  {
    unsigned long long* st0 = peer<C>(S.stage, 0);
    const int base = S.sel_base;
    for (int i = threadIdx.x; i < nsel; i += k_threads)
      if (base + i < lim) st0[base + i] = lsel[i];
    for (int i = threadIdx.x; i < ncf; i += k_threads)
      if (base + nsel + i < lim) st0[base + nsel + i] = pack(ck[i], ci[i]);
  }
  csync<C>();  // all selections are in rank 0's stage; no more DSMEM traffic after this
  if (rank != 0) return;

  int m = min(S.stage_cnt, lim);
  unsigned long long* fin = S.stage;
  if (fast) {
    // Levels 2-3 over the candidates (key in bin fb1) inside this CTA: block barriers
    // only. Then keep every entry >= K* (the selections, the bin above K*, all ties at
    // K*: >= k entries, <= m) in the candidate buffer (free now) and sort those.
    for (int i = threadIdx.x; i < m; i += k_threads) {
      const uint32_t key = uint32_t(S.stage[i] >> 32);
      if ((key >> 20) == fb1) atomicAdd(&S.hist2[(key >> 10) & 1023u], 1);
    }
    __syncthreads();
    select_bin<1, k_bins23>(S.hist2, fkk, S);
    const uint32_t p2 = (fb1 << 10) | uint32_t(S.sel_bin);
    const int kk2 = S.sel_kk;
    for (int i = threadIdx.x; i < m; i += k_threads) {
      const uint32_t key = uint32_t(S.stage[i] >> 32);
      if ((key >> 10) == p2) atomicAdd(&S.hist3[key & 1023u], 1);
    }
    if (threadIdx.x == 0) S.cand_cnt = 0;
    __syncthreads();
    select_bin<1, k_bins23>(S.hist3, kk2, S);
    const uint32_t kstar = (p2 << 10) | uint32_t(S.sel_bin);
    fin = reinterpret_cast<unsigned long long*>(ck);  // ck, ci: 8 * cand_cap bytes >= the stage
    for (int j0 = 0; j0 < m; j0 += k_threads) {
      const int j = j0 + int(threadIdx.x);
      const unsigned long long c = j < m ? S.stage[j] : 0ull;
      const uint32_t key = uint32_t(c >> 32);
      emit(j < m && key >= kstar, key, int(0xffffffffu - uint32_t(c)), fin, &S.cand_cnt, lim);
    }
    __syncthreads();
    m = min(S.cand_cnt, lim);
  }
  const int N = m <= k_threads ? k_threads : m <= 2 * k_threads ? 2 * k_threads : 4 * k_threads;
  for (int i = m + int(threadIdx.x); i < N; i += k_threads) fin[i] = 0ull;
  __syncthreads();
  if (N == k_threads) {
    bitonic_desc<1>(fin);
  } else if (N == 2 * k_threads) {
    bitonic_desc<2>(fin);
  } else {
    bitonic_desc<4>(fin);
  }
  int32_t* out = a.out + b * k;
  const int64_t mask = (int64_t(1) << a.page_bits) - 1;
  for (int j = threadIdx.x; j < k; j += k_threads) {
    int32_t o = -1;
    if (j < m) {  // fast: m >= k (the bin holds >= kk entries)
      const int64_t i = int64_t(0xffffffffu - uint32_t(fin[j] & 0xffffffffull));
      if (a.page_table) {
        const int64_t page = a.page_table[b * a.pt_stride + (i >> a.page_bits)];
        o = int32_t((page << a.page_bits) | (i & mask));
      } else {
        o = int32_t(i);
      }
    }
    out[j] = o;
  }
}

using kernel_fn = void (*)(launch_args);

template <int C>
kernel_fn pick(bool res, bool vec) {
  if (res) return vec ? lightning_topk_kernel<C, true, true> : lightning_topk_kernel<C, true, false>;
  return vec ? lightning_topk_kernel<C, false, true> : lightning_topk_kernel<C, false, false>;
}

// Whether a 16-CTA cluster of the largest configuration (resident, ~200 KB of shared
// memory per CTA) can be resident on this GPU; asked once (host-side, no stream work).
bool cluster16_ok() {
  static const bool ok = [] {
    const int dyn_max =
        k_res_cap * 4 + k_cand_res * 8 + int(k_lightning_topk_max_k) * 8;  // = the largest layout
    bool all = true;
    for (bool res : {false, true}) {
      for (bool vec : {false, true}) {
        kernel_fn fn = pick<16>(res, vec);
        if (cudaFuncSetAttribute(reinterpret_cast<const void*>(fn),
                                 cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess ||
            cudaFuncSetAttribute(reinterpret_cast<const void*>(fn),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, dyn_max) != cudaSuccess) {
          all = false;
          continue;
        }
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(16);
        cfg.blockDim = dim3(k_threads);
        cfg.dynamicSmemBytes = size_t(dyn_max);
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 16;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        int n_clusters = 0;
        if (cudaOccupancyMaxActiveClusters(&n_clusters, reinterpret_cast<const void*>(fn), &cfg) !=
                cudaSuccess ||
            n_clusters < 1)
          all = false;
      }
    }
    cudaGetLastError();  // clear a refusal; the launcher then uses 8
    return all;
  }();
  return ok;
}

}  // namespace

status lightning_topk_cuda(const lightning_topk_params& p, CUstream_st* stream) {
  if (p.batch < 0) return invalid_argument("lightning_topk_cuda: batch=%lld < 0", (long long)p.batch);
  if (p.k < 1 || p.k > k_lightning_topk_max_k)
    return invalid_argument("lightning_topk_cuda: k=%lld outside [1, %lld]", (long long)p.k,
                            (long long)k_lightning_topk_max_k);
  if (p.row_stride < 0 || p.row_stride >= (int64_t(1) << 31))
    return invalid_argument("lightning_topk_cuda: row_stride=%lld outside [0, 2^31)",
                            (long long)p.row_stride);
  if (p.page_table && (p.page_bits < 0 || p.page_bits > 30))
    return invalid_argument("lightning_topk_cuda: page_bits=%d outside [0, 30]", p.page_bits);
  if (p.batch == 0) return {};
  if (p.batch * 16 >= (int64_t(1) << 31))
    return invalid_argument("lightning_topk_cuda: batch=%lld too large", (long long)p.batch);
  if (!p.out || !p.scores) return invalid_argument("lightning_topk_cuda: null scores/out");

  // Cluster size from the row capacity: ~8K elements per CTA at least, at most 8 CTAs
  // (the portable cluster size). Rows of up to 8 * k_res_cap = 256K stay resident.
  const int64_t n = p.row_stride;
  int C = n <= 8192 ? 1 : n <= 16384 ? 2 : n <= 32768 ? 4 : 8;
  // 16-CTA clusters only while the grid stays within ~2 waves of them (few rows): at
  // batch 64, n = 256K they ran 1.6x slower than 8-CTA clusters (fewer co-resident).
  if (LT_MAX_CLUSTER >= 16 && n > 131072 && p.batch * 16 <= 2 * cuda_sm_count() && cluster16_ok()) C = 16;
  const int64_t chunk = ((n + C - 1) / C + 3) & ~int64_t(3);
  const bool res = chunk <= k_res_cap;
  const bool vec = (reinterpret_cast<uintptr_t>(p.scores) % 16 == 0) && (p.row_stride % 4 == 0);
  launch_args a;
  a.scores = p.scores;
  a.lengths = p.lengths;
  a.page_table = p.page_table;
  a.out = p.out;
  a.row_stride = p.row_stride;
  a.pt_stride = p.page_table_stride;
  a.k = int(p.k);
  a.page_bits = p.page_table ? p.page_bits : 0;
  a.chunk_cap = res ? int(chunk) : 0;
  a.cand_cap = res ? k_cand_res : k_cand_stream;
  // Digit-1 histogram copies (LT_HCOPIES, lane % copies) in dynamic shared memory.
  // Streaming rows only: measured neutral-to-worse (+0.7 us) on resident chunks, -1.6 us at
  // n = 1M.
  a.hcopies = res ? 1 : LT_HCOPIES;
  // Rank-counting output only on 16-CTA clusters (batch-1 long rows): there it saved
  // 3 us at k = 1024/2048; with C <= 8 its m^2/C comparisons lost to the bitonic sort.
  a.rank_out = (LT_RANK_OUT && C == 16) ? 1 : 0;
  // Dynamic shared memory: histogram copies + resident keys (chunk_cap) + candidate keys
  // and indices + the CTA's selection list (k entries). At most 176 KB, + 41 KB static.
  const size_t dyn = (a.hcopies > 1 ? size_t(k_bins1) * a.hcopies * 4 : 0) + size_t(a.chunk_cap) * 4 +
                     size_t(a.cand_cap) * 8 + size_t(p.k) * 8;

  kernel_fn fn = C == 1   ? pick<1>(res, vec)
                 : C == 2 ? pick<2>(res, vec)
                 : C == 4 ? pick<4>(res, vec)
                 : C == 8 ? pick<8>(res, vec)
                          : pick<16>(res, vec);
  // Raise the kernel's dynamic shared-memory limit once per size (not a stream op; safe under capture).
  static std::atomic<int> smem_set[20];
  const int slot = (C == 1 ? 0 : C == 2 ? 4 : C == 4 ? 8 : C == 8 ? 12 : 16) + (res ? 2 : 0) + (vec ? 1 : 0);
  cudaError_t err = cudaSuccess;
  if (smem_set[slot].load(std::memory_order_relaxed) < int(dyn)) {
    err = cudaFuncSetAttribute(reinterpret_cast<const void*>(fn), cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(dyn));
    if (err != cudaSuccess)
      return internal_error("lightning_topk_cuda: smem attribute: %s", cudaGetErrorString(err));
    smem_set[slot].store(int(dyn), std::memory_order_relaxed);
  }

  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(p.batch * C));
  cfg.blockDim = dim3(k_threads);
  cfg.dynamicSmemBytes = dyn;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(C);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  err = cudaLaunchKernelEx(&cfg, fn, a);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("lightning_topk_cuda: launch: %s", cudaGetErrorString(err));
  return {};
}

}  // namespace hart
