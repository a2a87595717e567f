#include "kernels/sparse_decode_attention/kv_entry.h"

#include "kernels/quant/quant.h"
#include "runtime/core/codecs.h"

#include <cmath>
#include <cstring>

namespace hart {

status kv_entry_encode(const float* v, uint8_t* entry) {
  if (!v || !entry) return invalid_argument("kv_entry_encode: null pointer");
  float scales[kv_entry_n_scales];
  HART_RETURN_IF_ERROR(act_quant_fp8(v, kv_entry_nope, kv_entry_scale_block, entry, scales));
  for (int64_t i = 0; i < kv_entry_rope; ++i) {
    const uint16_t b = bf16_from_f32(v[kv_entry_nope + i]);
    std::memcpy(entry + kv_entry_rope_offset + 2 * i, &b, 2);
  }
  for (int64_t b = 0; b < kv_entry_n_scales; ++b) {
    // Scales are powers of two (or inf for a block holding inf): code = exponent + 127.
    int e = 0;
    if (std::isinf(scales[b])) {
      entry[kv_entry_scale_offset + b] = 0xff;
      continue;
    }
    std::frexp(scales[b], &e);
    entry[kv_entry_scale_offset + b] = e8m0_from_exponent(e - 1);
  }
  entry[kv_entry_bytes - 1] = 0;
  return {};
}

status kv_entry_encode_rows_cpu(const kv_entry_rows_params& p) {
  if (p.n_rows < 0) return invalid_argument("kv_entry_encode_rows: negative row count");
  if (p.n_rows > 0 && (!p.src || !p.dst || !p.dst_off))
    return invalid_argument("kv_entry_encode_rows: null pointer");
  for (int64_t i = 0; i < p.n_rows; ++i) {
    if (p.dst_off[i] < 0) continue;
    const float* row = p.src + (p.src_off ? p.src_off[i] : i * kv_entry_dim);
    HART_RETURN_IF_ERROR(kv_entry_encode(row, reinterpret_cast<uint8_t*>(p.dst + p.dst_off[i])));
  }
  return {};
}

void kv_entry_decode(const uint8_t* entry, float* v) {
  for (int64_t i = 0; i < kv_entry_nope; ++i) {
    v[i] = f32_from_e4m3(entry[i]) * f32_from_e8m0(entry[kv_entry_scale_offset + i / kv_entry_scale_block]);
  }
  for (int64_t i = 0; i < kv_entry_rope; ++i) {
    uint16_t b;
    std::memcpy(&b, entry + kv_entry_rope_offset + 2 * i, 2);
    v[kv_entry_nope + i] = f32_from_bf16(b);
  }
}

}  // namespace hart
