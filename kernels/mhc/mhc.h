// File: kernels/mhc/mhc.h — manifold-constrained hyper-connections (v4-model.md §5).
// The residual is n_hc streams per token. hc_pre computes, from the flattened
// streams, the collapse weights `pre`, the expansion weights `post` and the
// doubly-stochastic mixing matrix `comb` (softmax, column norm, then
// (iters-1) × (row, column) Sinkhorn), and collapses the streams;
// hc_post mixes back: X'[k] = post[k]·y + Σ_j comb[j][k]·X[j] (comb transposed);
// hc_head is the final sigmoid-weighted collapse.
#pragma once

#include "runtime/core/status.h"

#include <cstddef>
#include <cstdint>

namespace hart {

struct hc_pre_params {
  const float* x = nullptr;      // [dim, n_hc, n_tokens] residual streams
  const float* fn = nullptr;     // [n_hc*dim, (2+n_hc)*n_hc]
  const float* base = nullptr;   // [(2+n_hc)*n_hc]
  const float* scale = nullptr;  // [3]: pre, post, comb
  float* collapsed = nullptr;    // [dim, n_tokens] = Σ_i pre[i]·X[i]
  float* post = nullptr;         // [n_hc, n_tokens]
  float* comb = nullptr;         // [n_hc (out k), n_hc (in j), n_tokens], comb[j][k] at j*n_hc+k
  int64_t n_tokens = 0;
  int64_t n_hc = 4;
  int64_t dim = 0;
  int64_t sinkhorn_iters = 20;
  float norm_eps = 1e-6f;  // rsqrt(mean(x^2) + norm_eps) over all n_hc*dim values
  float hc_eps = 1e-6f;
  /// CUDA only, optional: hc_pre_workspace_bytes(n_tokens, n_hc, dim) of device
  /// scratch, which lets a few tokens' dot products spread over many blocks.
  double* workspace = nullptr;
  /// The official inference's fp32 order for the mean square (sum_squares_torch_order).
  bool official = false;
  /// The official inference's bf16 activations: `official` (implied), and `collapsed`
  /// rounded to bf16 (RNE); post and comb stay fp32.
  bool bf16 = false;
};

struct hc_post_params {
  const float* x = nullptr;     // [dim, n_hc, n_tokens] streams before the sublayer
  const float* y = nullptr;     // [dim, n_tokens] sublayer output
  const float* post = nullptr;  // [n_hc, n_tokens]
  const float* comb = nullptr;  // as hc_pre_params::comb
  float* out = nullptr;         // [dim, n_hc, n_tokens]; must not alias x
  int64_t n_tokens = 0;
  int64_t n_hc = 4;
  int64_t dim = 0;
  bool official = false;  // as hc_pre_params::official: post·y + (Σ_j comb·x), the sum first
  bool bf16 = false;      // `official` (implied), and `out` (the new streams) rounded to bf16 (RNE)
};

struct hc_head_params {
  const float* x = nullptr;      // [dim, n_hc, n_tokens]
  const float* fn = nullptr;     // [n_hc*dim, n_hc]
  const float* base = nullptr;   // [n_hc]
  const float* scale = nullptr;  // [1]
  float* out = nullptr;          // [dim, n_tokens]
  int64_t n_tokens = 0;
  int64_t n_hc = 4;
  int64_t dim = 0;
  float norm_eps = 1e-6f;
  float hc_eps = 1e-6f;
  bool official = false;  // as hc_pre_params::official
  bool bf16 = false;      // `official` (implied), and `out` rounded to bf16 (RNE)
};

status hc_pre_cpu(const hc_pre_params& p);
status hc_post_cpu(const hc_post_params& p);
status hc_head_cpu(const hc_head_params& p);

}  // namespace hart

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {
/// Same contracts as the _cpu functions with device pointers; one block per
/// token, no allocation, no synchronisation; n_hc <= 64 for pre and head.
/// hc_post is bit-identical to hc_post_cpu; pre/head differ only in the fp64
/// summation order of the dot products and (without official / bf16) in expf's
/// last bits: with them, all else is the CPU's arithmetic bit for bit (glibc's expf).
/// Device scratch hc_pre_cuda can use for these sizes (0: none helps).
size_t hc_pre_workspace_bytes(int64_t n_tokens, int64_t n_hc, int64_t dim);
status hc_pre_cuda(const hc_pre_params& p, CUstream_st* stream);
status hc_post_cuda(const hc_post_params& p, CUstream_st* stream);
status hc_head_cuda(const hc_head_params& p, CUstream_st* stream);
}  // namespace hart
#endif
