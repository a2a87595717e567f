// CUDA Lightning top-k: exact radix select over fp32 keys, one thread-block cluster
// of C CTAs per row (C = 1, 2, 4 or 8 picked on the host from row_stride, a shape;
// everything that depends on the data — lengths, which path a row takes — is decided
// on the device, so a launch can be captured in a CUDA graph).
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
//   P2 (filter)     : entries above the bin are selected at once; entries in the bin go
//                     to a per-CTA candidate buffer (overflow -> rescan the chunk), and
//                     feed the digit-2 histogram.
//   P3              : digit-3 histogram over the candidates -> exact threshold key K*
//                     and `need`, how many entries equal to K* are taken.
//   gather          : candidates > K* are selected; if all entries == K* are needed they
//                     are taken too, else (a tie across the boundary) each CTA takes its
//                     quota in index order (lower ranks own lower indices), so the lowest
//                     indices win.
//   final           : selections land in rank 0's shared memory (DSMEM atomics); rank 0
//                     sorts them by (key desc, index asc) with a bitonic sort and writes
//                     the (page-translated) indices, -1 padded.
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
constexpr int k_unroll = 4;          // float4 loads in flight per thread in streaming passes
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
  int cand_cap;   // candidate buffer capacity (entries)
};

struct smem_t {
  int hist1[k_bins1];
  int hist2[k_bins23];
  int hist3[k_bins23];
  unsigned long long stage[k_lightning_topk_max_k];  // rank 0: selected (key << 32 | ~index)
  int stage_cnt;
  int cand_cnt;
  int warp_tmp[k_warps];
  int sel_bin, sel_kk, sel_eq, total;
};

__device__ __forceinline__ uint32_t to_key(float x) {
  uint32_t b = __float_as_uint(x);
  if (x != x) return 0u;    // NaN: never selected
  if (x == 0.f) b = 0u;     // -0 == +0
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

// Sums the C CTAs' histograms (DSMEM) and finds the bin holding the kk-th largest:
// sel_bin, sel_kk (rank inside the bin), sel_eq (bin count), total (all counts).
// Must follow a cluster barrier after the histograms were built.
template <int C, int NB>
__device__ __forceinline__ void select_bin(int* hist, int kk, smem_t& S) {
  constexpr int PER = NB / k_threads;
  int h[PER];
#pragma unroll
  for (int j = 0; j < PER; ++j) h[j] = 0;
#pragma unroll
  for (int r = 0; r < C; ++r) {
    const int* ph = peer<C>(hist, r);
#pragma unroll
    for (int j = 0; j < PER; ++j) h[j] += ph[NB - 1 - (int(threadIdx.x) * PER + j)];
  }
  int sum = 0;
#pragma unroll
  for (int j = 0; j < PER; ++j) sum += h[j];
  int total;
  int above = block_excl_sum(sum, S.warp_tmp, total);
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    if (above < kk && above + h[j] >= kk) {
      S.sel_bin = NB - 1 - (int(threadIdx.x) * PER + j);
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

// Warp-aggregated append of the lanes with `pred` to rank 0's stage (all lanes call).
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
__device__ __forceinline__ void add_cand(bool pred, uint32_t key, int idx, uint32_t* ck, int32_t* ci, int* cnt,
                                         int cap) {
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
template <bool VEC, bool WRITE, typename F>
__device__ __forceinline__ void scan_global(const float* x, int s, int e, uint32_t* keys_s, F&& f) {
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
        f(off + 0 < n, kq.x, s + off + 0);
        f(off + 1 < n, kq.y, s + off + 1);
        f(off + 2 < n, kq.z, s + off + 2);
        f(off + 3 < n, kq.w, s + off + 3);
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
        f(off < n, key, s + off);
      }
    }
  }
}

// Same over the resident keys (RES path): keys_s[0, n) plus zero padding to a multiple of 4.
template <typename F>
__device__ __forceinline__ void scan_resident(const uint32_t* keys_s, int s, int e, F&& f) {
  const int n = e - s;
  for (int off0 = 0; off0 < n; off0 += 4 * k_threads) {
    const int off = off0 + int(threadIdx.x) * 4;
    uint4 kq = make_uint4(0, 0, 0, 0);
    if (off < n) kq = *reinterpret_cast<const uint4*>(keys_s + off);
    f(off + 0 < n, kq.x, s + off + 0);
    f(off + 1 < n, kq.y, s + off + 1);
    f(off + 2 < n, kq.z, s + off + 2);
    f(off + 3 < n, kq.w, s + off + 3);
  }
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
  if (threadIdx.x == 0) {
    S.stage_cnt = 0;
    S.cand_cnt = 0;
  }
  __syncthreads();

  // My chunk of the row: contiguous, a multiple of 4 long (float4 alignment), rank order = index order.
  const int rchunk = ((len + C - 1) / C + 3) & ~3;
  const int s = min(rank * rchunk, len);
  const int e = min(s + rchunk, len);
  uint32_t* keys_s = reinterpret_cast<uint32_t*>(dyn);
  uint32_t* ck = keys_s + a.chunk_cap;
  int32_t* ci = reinterpret_cast<int32_t*>(ck + a.cand_cap);
  unsigned long long* stage0 = peer<C>(S.stage, 0);
  int* cnt0 = peer<C>(&S.stage_cnt, 0);

  // Every pass over "the source" (resident keys or the row in global memory).
  auto scan_src = [&](auto&& f) {
    if constexpr (RES) {
      scan_resident(keys_s, s, e, f);
    } else {
      scan_global<VEC, false>(x, s, e, nullptr, f);
    }
  };

  if (len <= k) {
    // Trivial path: all valid entries are selected.
    csync<C>();  // rank 0's counters are zeroed and every CTA of the cluster runs
    scan_global<VEC, false>(x, s, e, nullptr,
                            [&](bool v, uint32_t key, int idx) { emit(v && key != 0u, key, idx, stage0, cnt0, k); });
  } else {
    // P1: digit-1 histogram (+ keys kept resident).
    scan_global<VEC, RES>(x, s, e, keys_s, [&](bool v, uint32_t key, int) {
      if (v && key != 0u) atomicAdd(&S.hist1[key >> 20], 1);
    });
    csync<C>();
    select_bin<C, k_bins1>(S.hist1, k, S);
    if (S.total <= k) {
      // Fewer than k valid (NaN) entries: take them all.
      scan_src([&](bool v, uint32_t key, int idx) { emit(v && key != 0u, key, idx, stage0, cnt0, k); });
    } else {
      const uint32_t b1 = uint32_t(S.sel_bin);
      int kk = S.sel_kk;
      const int cap = a.cand_cap;
      // P2: select above the bin, collect the bin, digit-2 histogram.
      scan_src([&](bool v, uint32_t key, int idx) {
        const bool ok = v && key != 0u;
        const uint32_t d1 = key >> 20;
        emit(ok && d1 > b1, key, idx, stage0, cnt0, k);
        const bool in = ok && d1 == b1;
        if (in) atomicAdd(&S.hist2[(key >> 10) & 1023u], 1);
        add_cand(in, key, idx, ck, ci, &S.cand_cnt, cap);
      });
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
          scan_src([&](bool v, uint32_t key, int idx) { f(v && key != 0u && (key >> 20) == b1, key, idx); });
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
        const int bin3 = int(kstar & 1023u);
        int before = 0;
        for (int r = 0; r < rank; ++r) before += peer<C>(S.hist3, r)[bin3];
        int quota = need - before;
        quota = quota < 0 ? 0 : (quota > S.hist3[bin3] ? S.hist3[bin3] : quota);
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
                const int slot = atomicAdd(cnt0, 1);
                if (slot < k) stage0[slot] = pack(kstar, s + off + j);
              }
              ++ord;
            }
          }
          taken += tot;
        }
      }
    }
  }

  csync<C>();  // all selections are in rank 0's stage; no more DSMEM traffic after this
  if (rank != 0) return;

  const int m = min(S.stage_cnt, k);
  int N = 1;
  while (N < m) N <<= 1;
  for (int i = m + int(threadIdx.x); i < N; i += k_threads) S.stage[i] = 0ull;
  __syncthreads();
  // Bitonic sort, descending: (key desc, index asc).
  for (int size = 2; size <= N; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int p = threadIdx.x; p < (N >> 1); p += k_threads) {
        const int i = (p / stride) * 2 * stride + (p % stride);
        const int j = i + stride;
        const unsigned long long u = S.stage[i], w = S.stage[j];
        const bool desc = (i & size) == 0;
        if (desc ? (u < w) : (u > w)) {
          S.stage[i] = w;
          S.stage[j] = u;
        }
      }
      __syncthreads();
    }
  }
  int32_t* out = a.out + b * k;
  const int64_t mask = (int64_t(1) << a.page_bits) - 1;
  for (int j = threadIdx.x; j < k; j += k_threads) {
    int32_t o = -1;
    if (j < m) {
      const int64_t i = int64_t(0xffffffffu - uint32_t(S.stage[j] & 0xffffffffull));
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

}  // namespace

status lightning_topk_cuda(const lightning_topk_params& p, CUstream_st* stream) {
  if (p.batch < 0) return invalid_argument("lightning_topk_cuda: batch=%lld < 0", (long long)p.batch);
  if (p.k < 1 || p.k > k_lightning_topk_max_k)
    return invalid_argument("lightning_topk_cuda: k=%lld outside [1, %lld]", (long long)p.k,
                            (long long)k_lightning_topk_max_k);
  if (p.row_stride < 0 || p.row_stride >= (int64_t(1) << 31))
    return invalid_argument("lightning_topk_cuda: row_stride=%lld outside [0, 2^31)", (long long)p.row_stride);
  if (p.page_table && (p.page_bits < 0 || p.page_bits > 30))
    return invalid_argument("lightning_topk_cuda: page_bits=%d outside [0, 30]", p.page_bits);
  if (p.batch == 0) return {};
  if (p.batch * 8 >= (int64_t(1) << 31)) return invalid_argument("lightning_topk_cuda: batch=%lld too large", (long long)p.batch);
  if (!p.out || !p.scores) return invalid_argument("lightning_topk_cuda: null scores/out");

  // Cluster size from the row capacity: ~8K elements per CTA at least, at most 8 CTAs
  // (the portable cluster size). Rows of up to 8 * k_res_cap = 256K stay resident.
  const int64_t n = p.row_stride;
  const int C = n <= 8192 ? 1 : n <= 16384 ? 2 : n <= 32768 ? 4 : 8;
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
  // Dynamic shared memory: resident keys (chunk_cap) + candidate keys and indices.
  const size_t dyn = size_t(a.chunk_cap) * 4 + size_t(a.cand_cap) * 8;

  kernel_fn fn = C == 1 ? pick<1>(res, vec) : C == 2 ? pick<2>(res, vec) : C == 4 ? pick<4>(res, vec) : pick<8>(res, vec);
  // Raise the kernel's dynamic shared-memory limit once per size (not a stream op; safe under capture).
  static std::atomic<int> smem_set[16];
  const int slot = (C == 1 ? 0 : C == 2 ? 4 : C == 4 ? 8 : 12) + (res ? 2 : 0) + (vec ? 1 : 0);
  cudaError_t err = cudaSuccess;
  if (smem_set[slot].load(std::memory_order_relaxed) < int(dyn)) {
    err = cudaFuncSetAttribute(reinterpret_cast<const void*>(fn), cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(dyn));
    if (err != cudaSuccess) return internal_error("lightning_topk_cuda: smem attribute: %s", cudaGetErrorString(err));
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
