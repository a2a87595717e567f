// File: kernels/sparse_decode_attention/kv_entry_device.cuh — the device side
// of kv_entry_encode (kv_entry.h): one thread's four consecutive dims of an
// entry, with the 64-dim block's |x| maximum reduced by the caller (16 lanes).
// Bit-exact with the host encoder; the flash compressor and the engine's KV
// writes (kv_entry_encode_rows_cuda) share it.
#pragma once

#include "kernels/quant/quant_codecs.cuh"
#include "kernels/sparse_decode_attention/kv_entry.h"

#include <cstdint>

namespace hart::kv_entry_dev {

/// Dims [ch, ch + 4) of `x` (ch a multiple of 4) into `entry`. block_amax: max
/// |x| over the 64-dim NoPE block holding ch (ignored for the RoPE dims).
__device__ __forceinline__ void store4(const float (&x)[4], int ch, float block_amax, uint8_t* entry) {
  namespace qd = quant_dev;
  if (ch < int(kv_entry_nope)) {
    const int e = qd::pow2_scale_exponent(fmaxf(block_amax, 1e-4f), 448.0f);
    const float s = ldexpf(1.0f, e);
    uint32_t codes = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      codes |= uint32_t(qd::e4m3_from_f32(qd::clamp_q(x[k] / s, 448.0f))) << (8 * k);
    *reinterpret_cast<uint32_t*>(entry + ch) = codes;
    if (ch % int(kv_entry_scale_block) == 0)
      entry[kv_entry_scale_offset + ch / kv_entry_scale_block] = e >= 128 ? 0xff : qd::e8m0_from_exponent(e);
  } else {
    // bf16 round-to-nearest-even; NaN stays a quiet NaN.
    uint32_t bf[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t u = __float_as_uint(x[k]);
      bf[k] = (u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u) & 0xffffu
                                              : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    }
    *reinterpret_cast<uint2*>(entry + kv_entry_rope_offset + 2 * (ch - kv_entry_nope)) =
        make_uint2(bf[0] | (bf[1] << 16), bf[2] | (bf[3] << 16));
    if (ch == int(kv_entry_dim) - 4) entry[kv_entry_bytes - 1] = 0;
  }
}

}  // namespace hart::kv_entry_dev
