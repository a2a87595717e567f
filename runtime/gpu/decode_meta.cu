#include "runtime/gpu/decode_meta.h"

#include <cuda_runtime.h>

namespace hart::gpu {
namespace {

__global__ void decode_meta_kernel(const decode_meta_params p) {
  const kv_layer_addr& L = p.layer;
  const int64_t r = blockIdx.x, t = p.pos[r], P = L.page_size, W = p.window;
  const int32_t* swa = p.swa_pages + r * p.stride;
  const int32_t* full = p.full_pages + r * p.stride;
  // Index list: window rows oldest first from column 0 (column i holds position
  // max(0, t − W + 1) + i; the official slot layout, whose softmax blocks start
  // there), −1 past t; then HCA entries.
  const int64_t n_entries = p.hca ? (t + 1) / L.rate : 0, first = t - W + 1 > 0 ? t - W + 1 : 0;
  for (int64_t i = threadIdx.x; i < p.n_idx; i += blockDim.x) {
    int32_t row = -1;
    if (i < W) {
      const int64_t q = first + i;
      if (q <= t) row = L.window_index(swa[q / P], q % P);
    } else if (i - W < n_entries) {
      const int64_t e = (i - W) * L.rate;
      row = L.entry_index(full[e / P], e % P);
    }
    p.idx[r * p.n_idx + i] = row;
  }
  if (threadIdx.x == 0) {
    p.win_dst[r] = L.window(swa[t / P], t % P);
    p.win_src[r] = r * L.hd;
    if (p.page_base) p.page_base[r] = int32_t(r * p.stride);
    if (p.lengths) p.lengths[r] = int32_t((t + 1) / L.csa_rate);
  }
}

}  // namespace

status decode_meta_cuda(const decode_meta_params& p, CUstream_st* stream) {
  if (!p.pos || !p.swa_pages || !p.full_pages || !p.win_dst || !p.win_src || !p.idx) {
    return invalid_argument("decode_meta_cuda: null pointer");
  }
  if (p.n_tokens < 0 || p.n_tokens > 2147483647 || p.stride <= 0 || p.n_idx < p.window ||
      (p.hca && p.layer.rate <= 0)) {
    return invalid_argument("decode_meta_cuda: bad sizes (tokens %lld, stride %lld, n_idx %lld, window %lld)",
                            (long long)p.n_tokens, (long long)p.stride, (long long)p.n_idx,
                            (long long)p.window);
  }
  if (p.n_tokens == 0) return {};
  decode_meta_kernel<<<unsigned(p.n_tokens), 128, 0, stream>>>(p);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return internal_error("decode_meta_cuda: launch failed: %s", cudaGetErrorString(e));
  return {};
}

}  // namespace hart::gpu
