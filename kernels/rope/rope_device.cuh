// File: kernels/rope/rope_device.cuh — the device side of one RoPE rotation,
// shared by rope_kernel and the RMS norm's fused rotation so both round alike.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace hart {

/// x rounded to the nearest bf16 (RNE), as fp32: runtime/core/codecs.h's round_to_bf16.
__device__ __forceinline__ float bf16_round(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

/// Rotates the pair (a, b) by pos · inv_freq (its negation with `inverse`),
/// cos/sin scaled by `factor`, with rope_cpu's roundings (a·c − b·s, no FMA);
/// `bf16` rounds the rotated pair to bf16 (rope_params::bf16).
__device__ __forceinline__ void rope_rotate_pair(float& a, float& b, float pos, float inv_freq, float factor,
                                                 bool inverse, bool bf16) {
  const float angle = __fmul_rn(pos, inv_freq);
  const float c = __fmul_rn(cosf(angle), factor);
  const float s = __fmul_rn(__fmul_rn(sinf(angle), factor), inverse ? -1.0f : 1.0f);
  const float a0 = a, b0 = b;
  a = __fsub_rn(__fmul_rn(a0, c), __fmul_rn(b0, s));
  b = __fadd_rn(__fmul_rn(b0, c), __fmul_rn(a0, s));
  if (bf16) {
    a = bf16_round(a);
    b = bf16_round(b);
  }
}

}  // namespace hart
