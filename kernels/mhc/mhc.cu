// CUDA mHC: one 256-thread block per token.
//   hc_pre / hc_head: the warps share the (2+n)*n (or n) dot products with fn and
//   the sum of squares, each in fp64 like the CPU (lane-strided, then a shuffle
//   tree: only the summation order differs); one thread then runs the tiny fp32
//   gate / softmax / Sinkhorn math exactly as hc_pre_cpu writes it; the collapse
//   is spread over the channels.
//   hc_post: elementwise over (stream, channel); the same fp32 operations in the
//   same order as hc_post_cpu, so it is bit-identical.
// Every fp32 a*b+c is written with __fmul_rn/__fadd_rn: nvcc would otherwise fuse
// it into an FMA, which the CPU build (no -mfma) never does.
#include "kernels/mhc/mhc.h"

#include <cuda_runtime.h>

#include <climits>

namespace hart {
namespace {

constexpr int k_threads = 256;
constexpr int k_warps = k_threads / 32;

__device__ float sigmoid(float v) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-v))); }

// a * s + b, rounded twice as on the CPU
__device__ float mul_add(float a, float s, float b) { return __fadd_rn(__fmul_rn(a, s), b); }

// mix[o] = float(x · fn[o]) * rsqrt(mean(x^2) + eps) for o < n_out (shared memory);
// fp64 partial sums per lane, reduced by shuffles.
__device__ void hc_mix(const float* x, const float* fn, int64_t n_out, int64_t width, float eps, float* mix,
                       float* r_out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t o = warp - 1; o < n_out; o += k_warps) {  // o = -1: the sum of squares
    const float* w = o < 0 ? x : fn + o * width;
    double acc = 0;
    for (int64_t i = lane; i < width; i += 32) acc += double(x[i]) * double(w[i]);
    for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
    if (lane == 0) {
      if (o < 0) {
        *r_out = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(float(acc / double(width)), eps)));
      } else {
        mix[o] = float(acc);
      }
    }
  }
  __syncthreads();
  for (int64_t o = threadIdx.x; o < n_out; o += blockDim.x) mix[o] = __fmul_rn(mix[o], *r_out);
  __syncthreads();
}

// out[d] = Σ_i g[i] * x[i*dim + d], accumulated in stream order from 0
__device__ void collapse(const float* x, const float* g, int64_t n, int64_t dim, float* out) {
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    float acc = 0;
    for (int64_t i = 0; i < n; ++i) acc = __fadd_rn(acc, __fmul_rn(g[i], x[i * dim + d]));
    out[d] = acc;
  }
}

// shared memory: mix[(2+n)*n], pre[n], r
__global__ void hc_pre_kernel(hc_pre_params p) {
  extern __shared__ float sm[];
  const int64_t n = p.n_hc, width = n * p.dim, n_mix = (2 + n) * n;
  float* mix = sm;
  float* pre = mix + n_mix;
  float* r = pre + n;
  const int64_t t = blockIdx.x;
  const float* x = p.x + t * width;
  hc_mix(x, p.fn, n_mix, width, p.norm_eps, mix, r);
  if (threadIdx.x == 0) {
    for (int64_t i = 0; i < n; ++i) {
      pre[i] = __fadd_rn(sigmoid(mul_add(mix[i], p.scale[0], p.base[i])), p.hc_eps);
      p.post[t * n + i] = __fmul_rn(2.0f, sigmoid(mul_add(mix[n + i], p.scale[1], p.base[n + i])));
    }
    float* c = p.comb + t * n * n;  // c[j*n + k]: input stream j -> output stream k
    for (int64_t j = 0; j < n; ++j) {
      float mx = -INFINITY;
      for (int64_t k = 0; k < n; ++k) {
        c[j * n + k] = mul_add(mix[2 * n + j * n + k], p.scale[2], p.base[2 * n + j * n + k]);
        mx = fmaxf(mx, c[j * n + k]);
      }
      float sum = 0;
      for (int64_t k = 0; k < n; ++k) sum = __fadd_rn(sum, c[j * n + k] = expf(__fsub_rn(c[j * n + k], mx)));
      for (int64_t k = 0; k < n; ++k) c[j * n + k] = __fadd_rn(__fdiv_rn(c[j * n + k], sum), p.hc_eps);
    }
    for (int64_t it = 0; it < p.sinkhorn_iters; ++it) {
      if (it > 0) {  // rows, then columns; the first pass normalises columns only
        for (int64_t j = 0; j < n; ++j) {
          float s = 0;
          for (int64_t k = 0; k < n; ++k) s = __fadd_rn(s, c[j * n + k]);
          for (int64_t k = 0; k < n; ++k) c[j * n + k] = __fdiv_rn(c[j * n + k], __fadd_rn(s, p.hc_eps));
        }
      }
      for (int64_t k = 0; k < n; ++k) {
        float s = 0;
        for (int64_t j = 0; j < n; ++j) s = __fadd_rn(s, c[j * n + k]);
        for (int64_t j = 0; j < n; ++j) c[j * n + k] = __fdiv_rn(c[j * n + k], __fadd_rn(s, p.hc_eps));
      }
    }
  }
  __syncthreads();
  collapse(x, pre, n, p.dim, p.collapsed + t * p.dim);
}

// shared memory: mix[n], r
__global__ void hc_head_kernel(hc_head_params p) {
  extern __shared__ float sm[];
  const int64_t n = p.n_hc, width = n * p.dim;
  float* mix = sm;
  float* r = mix + n;
  const int64_t t = blockIdx.x;
  const float* x = p.x + t * width;
  hc_mix(x, p.fn, n, width, p.norm_eps, mix, r);
  if (threadIdx.x == 0) {
    for (int64_t i = 0; i < n; ++i) mix[i] = __fadd_rn(sigmoid(mul_add(mix[i], p.scale[0], p.base[i])), p.hc_eps);
  }
  __syncthreads();
  collapse(x, mix, n, p.dim, p.out + t * p.dim);
}

__global__ void hc_post_kernel(hc_post_params p) {
  const int64_t n = p.n_hc, t = blockIdx.x;
  const float* x = p.x + t * n * p.dim;
  const float* y = p.y + t * p.dim;
  const float* c = p.comb + t * n * n;
  float* o = p.out + t * n * p.dim;
  for (int64_t e = threadIdx.x; e < n * p.dim; e += blockDim.x) {
    const int64_t k = e / p.dim, d = e % p.dim;
    float acc = __fmul_rn(p.post[t * n + k], y[d]);
    for (int64_t j = 0; j < n; ++j) acc = __fadd_rn(acc, __fmul_rn(c[j * n + k], x[j * p.dim + d]));
    o[e] = acc;
  }
}

status launched(const char* op) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return internal_error("%s: launch failed: %s", op, cudaGetErrorString(err));
  return {};
}

status check_tokens(const char* op, int64_t n_tokens) {
  if (n_tokens < 0 || n_tokens > INT_MAX) return invalid_argument("%s: n_tokens=%lld", op, (long long)n_tokens);
  return {};
}

}  // namespace

status hc_pre_cuda(const hc_pre_params& p, CUstream_st* stream) {
  if (!p.x || !p.fn || !p.base || !p.scale || !p.collapsed || !p.post || !p.comb) {
    return invalid_argument("hc_pre_cuda: null pointer");
  }
  if (p.n_hc <= 0 || p.n_hc > 64 || p.dim <= 0 || p.sinkhorn_iters < 1) {
    return invalid_argument("hc_pre_cuda: bad sizes (n_hc=%lld in [1, 64], dim=%lld, sinkhorn_iters=%lld)",
                            (long long)p.n_hc, (long long)p.dim, (long long)p.sinkhorn_iters);
  }
  HART_RETURN_IF_ERROR(check_tokens("hc_pre_cuda", p.n_tokens));
  if (p.n_tokens == 0) return {};
  const size_t smem = size_t((2 + p.n_hc) * p.n_hc + p.n_hc + 1) * sizeof(float);  // n_hc <= 64: < 18 KB
  hc_pre_kernel<<<unsigned(p.n_tokens), k_threads, smem, stream>>>(p);
  return launched("hc_pre_cuda");
}

status hc_post_cuda(const hc_post_params& p, CUstream_st* stream) {
  if (!p.x || !p.y || !p.post || !p.comb || !p.out) return invalid_argument("hc_post_cuda: null pointer");
  if (p.out == p.x) return invalid_argument("hc_post_cuda: out must not alias x");
  if (p.n_hc <= 0 || p.dim <= 0) {
    return invalid_argument("hc_post_cuda: bad sizes (n_hc=%lld, dim=%lld)", (long long)p.n_hc, (long long)p.dim);
  }
  HART_RETURN_IF_ERROR(check_tokens("hc_post_cuda", p.n_tokens));
  if (p.n_tokens == 0) return {};
  hc_post_kernel<<<unsigned(p.n_tokens), k_threads, 0, stream>>>(p);
  return launched("hc_post_cuda");
}

status hc_head_cuda(const hc_head_params& p, CUstream_st* stream) {
  if (!p.x || !p.fn || !p.base || !p.scale || !p.out) return invalid_argument("hc_head_cuda: null pointer");
  if (p.n_hc <= 0 || p.n_hc > 64 || p.dim <= 0) {
    return invalid_argument("hc_head_cuda: bad sizes (n_hc=%lld in [1, 64], dim=%lld)", (long long)p.n_hc,
                            (long long)p.dim);
  }
  HART_RETURN_IF_ERROR(check_tokens("hc_head_cuda", p.n_tokens));
  if (p.n_tokens == 0) return {};
  hc_head_kernel<<<unsigned(p.n_tokens), k_threads, size_t(p.n_hc + 1) * sizeof(float), stream>>>(p);
  return launched("hc_head_cuda");
}

}  // namespace hart
