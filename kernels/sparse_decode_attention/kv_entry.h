// File: kernels/sparse_decode_attention/kv_entry.h — the 584-byte FP8 KV entry
// every attention KV pool stores (window KV and compressed CSA/HCA KV), the
// FlashMLA FP8 sparse layout (serving-notes.md, "584 B"):
//   bytes [0, 448)    e4m3 codes of the 448 NoPE dims
//   bytes [448, 576)  the 64 RoPE dims as bf16 (little-endian)
//   bytes [576, 583)  7 ue8m0 scale codes, one per 64 NoPE dims (s = 2^(code-127))
//   byte  583         padding (0)
// Encoding applies the reference's window-KV rule (v4-model.md §4: QDQ_fp8 of
// the NoPE dims, block 64, power-of-two scale; RoPE dims rounded to bf16), so
// decode(encode(v)) equals act_quant_fp8_qdq on the NoPE part, bitwise.
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart {

inline constexpr int64_t kv_entry_dim = 512;
inline constexpr int64_t kv_entry_nope = 448;
inline constexpr int64_t kv_entry_rope = 64;
inline constexpr int64_t kv_entry_scale_block = 64;
inline constexpr int64_t kv_entry_n_scales = kv_entry_nope / kv_entry_scale_block;        // 7
inline constexpr int64_t kv_entry_rope_offset = kv_entry_nope;                            // 448
inline constexpr int64_t kv_entry_scale_offset = kv_entry_nope + 2 * kv_entry_rope;       // 576
inline constexpr int64_t kv_entry_bytes = kv_entry_scale_offset + kv_entry_n_scales + 1;  // 584

/// A paged pool of entries: slot s lives at
///   base + (s / entries_per_page) * page_bytes + (s % entries_per_page) * kv_entry_bytes.
/// page_bytes >= entries_per_page * 584 (FlashMLA pads pages to a multiple of 576).
struct kv_entry_pool {
  const uint8_t* base = nullptr;
  int64_t entries_per_page = 1;
  int64_t page_bytes = kv_entry_bytes;
};

/// v: 512 floats (NoPE then RoPE) → one entry. Non-finite values in a scale
/// block make that block NaN, as act_quant_fp8_qdq does.
status kv_entry_encode(const float* v, uint8_t* entry);

/// entry → 512 floats, exact (e4m3 · 2^k and bf16 are fp32-representable).
void kv_entry_decode(const uint8_t* entry, float* v);

/// Many rows at once (the engine's KV writes): row i, 512 floats at
/// src + src_off[i] (i·512 when src_off is null), is encoded into the bytes at
/// dst + dst_off[i] floats; a negative dst_off[i] skips the row. Offsets count
/// floats because the engine's pool addresses its rows in floats. The CUDA path
/// needs source rows 16-byte aligned and entries 8-byte aligned.
struct kv_entry_rows_params {
  const float* src = nullptr;
  const int64_t* src_off = nullptr;
  float* dst = nullptr;
  const int64_t* dst_off = nullptr;
  int64_t n_rows = 0;
};

/// Host pointers: kv_entry_encode per row.
status kv_entry_encode_rows_cpu(const kv_entry_rows_params& p);

/// Address of slot `s` in `pool` (no bounds check: the caller owns the slot).
inline const uint8_t* kv_entry_at(const kv_entry_pool& pool, int64_t s) {
  return pool.base + (s / pool.entries_per_page) * pool.page_bytes +
         (s % pool.entries_per_page) * kv_entry_bytes;
}

}  // namespace hart

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {
/// Same contract with device pointers (one block per row, bit-exact with the
/// host encoder); no allocation, no synchronisation.
status kv_entry_encode_rows_cuda(const kv_entry_rows_params& p, CUstream_st* stream);
}  // namespace hart
#endif
