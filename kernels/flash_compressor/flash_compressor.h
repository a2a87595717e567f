// File: kernels/flash_compressor/flash_compressor.h — the fused V4 compressor
// (issue 6 item 2, target C1; v4-model.md §4.4): from the projection outputs of
// a pass (kv = x·Wkv^T and gate = x·Wgate^T, [coff·c] per token, no position
// bias) to finished compressed entries in a paged pool, in one pass over the
// projections. Per block b of m positions that closes inside the pass:
//   candidates: CSA (overlap) the previous block's A half [0, c) + this block's
//               B half [c, 2c) (block 0: the B half only); HCA the block, [0, c);
//   out[ch]   = Σ_j softmax_j(gate_j[ch] + ape[pos_j % m][ch]) · kv_j[ch];
//   entry     = RoPE_{pos = b·m}(RMSNorm(out) · norm) on the last rope_dim dims;
//   then the quantization: none; FP8 QDQ of the first c − rope_dim dims (block
//   64, the last block may be shorter, power-of-two scale); or Hadamard (c^-0.5)
//   + FP4 QDQ (block min(32, c)) for indexer keys.
// With `bf16` (compressor_params::bf16, the official inference's roundings):
// out, the normed entry, the rotated entry and the Hadamard output are each
// rounded to bf16, and the RMSNorm is the official one (rms_norm_params::official:
// squares summed as sum_squares_torch_order sums them, rsqrt rounded once).
// Entries go to slot (b·m % P) / m of full page full_pages[seq][b·m / P], as fp32
// rows of c or as the 584-byte FP8 entry of kv_entry.h.
//
// Ring state (kv_store's layout, runtime/model/kv_store.h): position q's row
// [kv (coff·c) | gate + ape (coff·c)] lives in the ring of SWA page
// swa_pages[seq][q / P], row q % (coff·m). Candidates before a sequence's
// `start` are read from there. After a call the rings hold every row a later
// call can read: the open block at the span's end and, for CSA, the block
// before it; for CSA also the last m rows before each page edge inside the
// span (a request that continues at that edge from a shared prefix needs that
// A half). Rows no later call reads are not written.
//
// The same numbers as compressor_push (runtime/model/compressor.cpp) gives
// token by token: flash_compressor_engine_test checks it on tiny-a/tiny-c shapes.
// With bf16 the CUDA kernels give these bits too, except on ~2e-4 of entries:
// their exp and sin/cos are correctly rounded, glibc's are not always
// (flash_compressor.cu says more).
//
//   flash_compressor_params p;           // one CSA layer: main + indexer compressor
//   p.comp[0] = {...main...}; p.comp[1] = {...indexer...}; p.n_comp = 2;
//   p.start = d_pos0; p.cu_tokens = d_cu; p.full_pages = d_fp; p.swa_pages = d_sp; ...
//   HART_RETURN_IF_ERROR(flash_compressor_prefill_cuda(p, stream));
#pragma once

#include "runtime/core/status.h"

#include <cstdint>

namespace hart {

enum class flash_entry_quant { none, fp8_nope, hadamard_fp4 };
enum class flash_entry_format { f32, kv_entry };  // kv_entry: 584 B (c = 512, rope 64, fp8_nope)

/// One compressor: its inputs, weights and pools.
struct flash_compressor_desc {
  const float* kv = nullptr;        // [coff·c, n_tokens], row stride kv_stride
  const float* gate = nullptr;      // [coff·c, n_tokens], row stride gate_stride; no position bias
  int64_t kv_stride = 0;            // elements; 0 = coff·c
  int64_t gate_stride = 0;          // elements; 0 = coff·c
  const float* ape = nullptr;       // [coff·c, m] learned position bias
  const float* norm = nullptr;      // [c] RMSNorm weight
  const float* inv_freq = nullptr;  // [rope_dim / 2] the layer's compress RoPE table
  int64_t rate = 0;                 // m
  int64_t dim = 0;                  // c
  int64_t rope_dim = 0;             // trailing dims rotated (even, <= c)
  bool overlap = false;             // CSA: coff = 2, ring 2m rows; HCA: coff = 1, ring m rows
  bool bf16 = false;                // the official inference's bf16 roundings of the entry (see above)
  float eps = 1e-6f;
  flash_entry_quant quant = flash_entry_quant::none;
  flash_entry_format format = flash_entry_format::f32;
  float* ring = nullptr;         // ring of SWA page p at ring + p·ring_page_stride: [2·coff·c, coff·m]
  int64_t ring_page_stride = 0;  // elements
  void* entries = nullptr;       // full page p's slot 0 at entries + p·entry_page_stride_bytes
  int64_t entry_page_stride_bytes = 0;
};

/// A pass: n_seq spans of consecutive positions; span s has positions
/// [start[s], start[s] + n_s) at projection rows [cu_tokens[s], cu_tokens[s+1]).
/// Spans must not share an SWA page or write the same entry slot.
struct flash_compressor_params {
  flash_compressor_desc comp[2];  // e.g. a CSA layer's main and indexer compressors
  int64_t n_comp = 1;             // 1 or 2
  int64_t n_seq = 0;
  int64_t n_tokens = 0;                 // projection rows (cu_tokens[n_seq]; n_seq when cu_tokens is null)
  const int64_t* start = nullptr;       // [n_seq] first position of each span
  const int32_t* cu_tokens = nullptr;   // [n_seq + 1]; null = one token per sequence, row s (decode)
  const int32_t* full_pages = nullptr;  // [pages_stride, n_seq] full page of position q: [s][q / P]
  const int32_t* swa_pages = nullptr;   // [pages_stride, n_seq] SWA page of position q: [s][q / P]
  int64_t pages_stride = 0;             // elements
  int64_t page_size = 0;                // P, a multiple of every rate
};

/// Entry row size in bytes for a compressor's format.
int64_t flash_compressor_entry_bytes(const flash_compressor_desc& d);

/// Reference (host pointers): for every span in order, every token in order,
/// compressor_push's steps composed of compress_pool_cpu, rms_norm_cpu,
/// rope_cpu and the quant ops (kv_entry_encode for kv_entry).
status flash_compressor_cpu(const flash_compressor_params& p);

}  // namespace hart

#ifdef HART_CUDA
struct CUstream_st;
namespace hart {

/// ok when the CUDA kernels run this configuration; otherwise unimplemented
/// naming what they lack (c a power of two in [32, 512], rope_dim % 4 == 0,
/// Hadamard only for c <= 128) or invalid_argument for a bad field.
status flash_compressor_cuda_supports(const flash_compressor_params& p);

/// Prefill path, device pointers: two launches (entries of every closing block,
/// then the ring rows, so no block reads a ring row the pass overwrites). Plans
/// (which spans, blocks and ring rows) are derived on the device from start /
/// cu_tokens; the grids depend only on n_tokens, n_seq and the shapes, so the
/// call can be captured in a CUDA graph. No allocation, no synchronisation.
status flash_compressor_prefill_cuda(const flash_compressor_params& p, CUstream_st* stream);

/// Decode path: one token per sequence (cu_tokens must be null; token s is
/// row s), one launch for all n_comp compressors: each sequence writes its ring
/// row and emits the entry when its block closes.
status flash_compressor_decode_cuda(const flash_compressor_params& p, CUstream_st* stream);

}  // namespace hart
#endif
