// File: runtime/gpu/gpu_engine_impl.h — internal to runtime/gpu: the engine's
// device state, the arena's named buffers, one pass's host metadata and the
// layer functions (gpu_attention.cpp, gpu_moe.cpp) the forward composes.
#pragma once

#include "kernels/linear/linear.h"
#include "kernels/rms_norm/rms_norm.h"
#include "runtime/cache/memory_plan.h"
#include "runtime/gpu/device_memory.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/gpu/gpu_weights.h"
#include "runtime/gpu/graph_cache.h"
#include "runtime/gpu/kv_pool.h"
#include "runtime/model/kv_store.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

namespace hart::gpu {

/// Activation and metadata buffers, [.., T] with T = max_batch_tokens unless noted.
struct arena_buffers {
  int32_t* ids = nullptr;                                         // [T]
  int64_t* pos = nullptr;                                         // [T]
  float *x = nullptr, *xn = nullptr;                              // [D, n_hc, T] residual streams
  float *collapsed = nullptr, *normed = nullptr, *out = nullptr;  // [D, T]
  float *post = nullptr, *comb = nullptr;                         // [n_hc, T], [n_hc, n_hc, T]
  // attention
  float *qr = nullptr, *q = nullptr, *kv = nullptr, *o = nullptr, *u = nullptr;
  float *comp_a = nullptr, *comp_z = nullptr, *index_a = nullptr, *index_z = nullptr;
  float *index_q = nullptr, *index_w = nullptr;
  double* hc_workspace = nullptr;   // hc_pre's split mix (few tokens)
  char* attn_workspace = nullptr;   // sparse attention's slices (few tokens)
  char* entry_workspace = nullptr;  // A1's splits (kv_entries), k_entry_attention_queries at a time
  size_t entry_workspace_bytes = 0;
  float* scores = nullptr;   // [C/m_csa, T]
  int32_t* picks = nullptr;  // [k_top, T]
  // A layer's host-built metadata (window and ring writes, index and page lists,
  // compressor plans, indexer lengths), packed by meta_batch: meta_layout_bytes.
  char* meta = nullptr;
  size_t meta_bytes = 0;
  // A decode pass's page tables, [T, pass::page_stride] (decode_meta.h builds the metadata from them).
  int32_t *dec_swa = nullptr, *dec_full = nullptr;
  // MoE
  float *route_logits = nullptr, *route_w = nullptr;  // [E, T], [K, T]
  int32_t *experts = nullptr, *hash = nullptr;        // [K, T]
  // [R] routed rows of one MoE chunk (moe_rows), sorted by expert (moe_dispatch.h)
  float *xe = nullptr, *g = nullptr, *up = nullptr, *h = nullptr, *ye = nullptr;  // [D or I, R]
  uint8_t* moe_codes = nullptr;                   // [max(D, I), R] e4m3 inputs of the tensor-core experts
  float* moe_scales = nullptr;                    // [max(D, I) / 128, R] their scales
  int64_t *moe_src = nullptr, *iota_d = nullptr;  // [R]: token row offsets, i·D
  float* moe_w = nullptr;                         // [R]
  int32_t* moe_slot = nullptr;                    // [R] (t, k) → sorted row
  int32_t *tile_group = nullptr, *tile_row0 = nullptr, *tile_rows = nullptr, *n_tiles = nullptr;
  // head
  float* rows = nullptr;    // [D, T]
  float* logits = nullptr;  // [V, T]
  float* qdq = nullptr;     // [max_linear_in, T] inputs of QDQ-input linears
  // The side stream's own scratch (branch_run): QDQ inputs and the shared expert's hidden rows.
  float* side_qdq = nullptr;                                             // [max_linear_in, k_branch_tokens]
  float *shared_g = nullptr, *shared_up = nullptr, *shared_h = nullptr;  // [I · n_shared, k_branch_tokens]
};

/// Passes of at most this many tokens run independent chains (KV, compressor
/// and indexer projections beside the query's; the shared expert beside the
/// routed ones) on a side stream: each kernel alone leaves most of the GPU idle.
constexpr int64_t k_branch_tokens = 64;

/// Queries per launch of the FP8-entry attention (kv_entries): bounds its
/// split workspace (67 MB for 64 heads over 640 entries, 572 MB over 1M's
/// 8320); a decode pass up to this many tokens is one launch, and from 132
/// queries (the H200's SMs) A1 takes its 64-head blocks.
constexpr int64_t k_entry_attention_queries = 256;

/// One device pass: the host's view of its tokens.
struct pass {
  struct span {
    sequence_state* seq = nullptr;
    int64_t row0 = 0, n = 0, p0 = 0;  // rows [row0, row0+n) at positions p0..
  };
  std::vector<int32_t> ids;
  std::vector<int64_t> pos;
  std::vector<span> spans;
  /// A decode pass (one token per span, every row's logits) whose metadata the
  /// device builds from the arena's page tables (decode_meta.h). Its kernels are
  /// sized for `len_bucket` positions, not the pass's own lengths, so one captured
  /// graph serves every pass of the same (tokens, len_bucket).
  bool device_meta = false;
  int64_t len_bucket = 0, page_stride = 0;
  int64_t n_tokens() const { return int64_t(ids.size()); }
};

struct engine_state {
  ~engine_state();  // waits for and destroys the streams and events
  gpu_engine_params params;
  model_config cfg;
  uint64_t id = 0;
  cudaStream_t stream = nullptr;
  std::unique_ptr<linear_cuda_context> lin;
  device_weights w;
  kv_pool pool;
  std::unique_ptr<cache::memory_plan> plan;  // what sized the pool (params.memory_fraction > 0)
  device_buffer arena_mem;
  arena_buffers a;
  std::unique_ptr<kv_store> page_ids;  // page-id allocator only (no KV storage; see gpu_engine.cpp)
  /// Whose page ids the pool has served: set by the first forward, then fixed.
  enum class page_owner { none, engine, cache } pages_from = page_owner::none;
  int64_t swa_keep = 0;
  int64_t max_entries = 0;  // C / csa_rate: indexer keys per sequence
  int64_t n_idx_max = 0;
  int64_t pages_per_seq = 0;
  /// gpu_engine_params::fp8_kv_entries in effect: window KV and main compressed
  /// entries are 584-byte FP8 entries packed in their pool sections (kv_pool.h).
  bool kv_entries = false;
  /// engine_params::bf16_activations(): the official inference's bf16
  /// activations (docs/precision.md): its rounding points and summation orders.
  bool bf16 = false;

  pinned_staging staging;    // host side of upload(); reset when a pass starts
  pinned_readback readback;  // logits back to the host
  graph_cache graphs;        // decode passes (gpu_engine_params::decode_launch::graphs)
  // The side stream (branch_run): its own linear context, and the events that order it with `stream`.
  cudaStream_t side = nullptr;
  std::unique_ptr<linear_cuda_context> side_lin;
  cudaEvent_t fork_event = nullptr, join_event = nullptr;
  bool side_pending = false;  // branch work the main stream has not joined yet

  /// Copies `v` to dst in stream order through the pinned staging (the host
  /// does not wait); when the staging is full, waits for the stream and starts over.
  template <class T>
  status upload(T* dst, const std::vector<T>& v) {
    if (v.empty()) return {};
    const size_t bytes = v.size() * sizeof(T);
    void* h = staging.take(bytes);
    if (!h && bytes <= staging.capacity()) {
      HART_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "gpu engine: upload"));
      staging.reset();
      h = staging.take(bytes);
    }
    if (!h)
      return cuda_status(cudaMemcpyAsync(dst, v.data(), bytes, cudaMemcpyHostToDevice, stream),
                         "gpu engine: upload");
    std::memcpy(h, v.data(), bytes);
    return cuda_status(cudaMemcpyAsync(dst, h, bytes, cudaMemcpyHostToDevice, stream), "gpu engine: upload");
  }
  /// Copies n values back and waits for the stream (v1: host-side step metadata).
  template <class T>
  status download(std::vector<T>* dst, const T* src, int64_t n) {
    dst->resize(size_t(n));
    if (n == 0) return {};
    HART_RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(dst->data(), src, size_t(n) * sizeof(T), cudaMemcpyDeviceToHost, stream),
                    "gpu engine: download"));
    return cuda_status(cudaStreamSynchronize(stream), "gpu engine: step");
  }
};

/// One layer's host-built metadata on its way to the device: each add() packs a
/// vector at the next 16-byte offset of the pinned staging and returns the
/// address it will have at the same offset of the arena's `meta` region;
/// flush() copies the lot with one cudaMemcpyAsync (was one per vector: each
/// small copy sat on the stream's critical path). The stream orders the copy
/// after the previous layer's kernels, the region's last readers. A vector past
/// the staging goes on its own (pageable) copy.
class meta_batch {
 public:
  explicit meta_batch(engine_state& s) : s_(s) {}
  /// Device address of v's copy (null for an empty v); errors surface in flush().
  template <class T>
  T* add(const std::vector<T>& v) {
    if (v.empty() || !st_.ok()) return nullptr;
    return static_cast<T*>(add_bytes(v.data(), v.size() * sizeof(T)));
  }
  /// Device space for n values that a kernel fills (decode_meta.h): no copy.
  template <class T>
  T* reserve(int64_t n) {
    if (n <= 0 || !st_.ok()) return nullptr;
    return static_cast<T*>(reserve_bytes(size_t(n) * sizeof(T)));
  }
  status flush();

 private:
  void* add_bytes(const void* src, size_t n);
  void* reserve_bytes(size_t n);
  engine_state& s_;
  status st_;
  char* host_ = nullptr;  // the pending segment in the staging
  size_t host_used_ = 0, dev_start_ = 0, dev_used_ = 0;
};

/// Runs `fn`'s work on the side stream when the pass has at most k_branch_tokens
/// tokens (else on the main stream, in order): it starts after everything the
/// main stream holds so far and overlaps what the main stream gets next, until
/// branch_join. Inside fn, s.stream, s.lin and the arena's qdq are the side's.
/// Captured into a decode graph as a parallel branch.
status branch_run(engine_state& s, int64_t T, const std::function<status()>& fn);
/// The main stream waits for the side's work so far (nothing when none is pending).
status branch_join(engine_state& s);

/// The `meta` region a layer's metadata needs at T tokens (one meta_batch's worth).
size_t meta_layout_bytes(const engine_state& s, int64_t T);

/// Routed rows one MoE chunk holds: the arena's T tokens' worth, at least one
/// token's K, at most what one device plan sorts.
int64_t moe_rows(const engine_state& s);

/// Empties a caller's trace before a call (the CPU engine overwrites its fields per call).
void trace_reset(forward_trace* t);
/// Appends one pass's capture to the call's: hidden, final_hidden, topk and
/// experts are [.., T] per pass, so the call's trace is the passes' concatenation
/// (the layout one pass over all the call's tokens would give).
void trace_append(forward_trace* t, forward_trace&& part);

/// y [out, n] = x [in, n] · W^T by the weight's kind (fp32, bf16, FP8 codes, QDQ'd input).
status linear_run(engine_state& s, const device_linear& w, const float* x, int64_t n, float* y,
                  int64_t x_stride = 0, int64_t y_stride = 0);
/// linear_run for the linears whose outputs the official inference keeps in
/// bf16 (all but the compressors', the router's and the head's): under s.bf16
/// the output is rounded to bf16.
status linear_run_activation(engine_state& s, const device_linear& w, const float* x, int64_t n, float* y);
/// A weighted RMS norm (and its fused RoPE) as the official inference computes
/// it under s.bf16: torch's reduction order, outputs rounded to bf16.
inline rms_norm_params official_norm(const engine_state& s, rms_norm_params p) {
  p.official = s.bf16;
  p.bf16 = s.bf16;
  return p;
}
/// y [out, n] for W's `groups` equal groups of output rows, group g applied to
/// x's g-th slice of w.in channels (x rows of x_stride): wo_a. One launch when W
/// is codes on raw inputs, else one per group.
status linear_run_groups(engine_state& s, const device_linear& w, int64_t groups, const float* x, int64_t n,
                         int64_t x_stride, float* y);
/// The same for W's output rows [row0, row0 + rows) only (y [rows, n]): wo_a's groups.
status linear_run_rows(engine_state& s, const device_linear& w, int64_t row0, int64_t rows, const float* x,
                       int64_t n, float* y, int64_t x_stride = 0, int64_t y_stride = 0);
/// attention_forward on the device: y [D, T] from normed x [D, T]; fills the
/// layer's window KV, compressor rings and entries of the pass's sequences.
status attention_run(engine_state& s, const pass& p, int64_t il, const float* x, float* y,
                     std::vector<int32_t>* topk);

/// ok when the flash compressor's CUDA kernels take every compressor of the
/// model (gpu_attention.cpp); otherwise why not (checked at load).
status compressors_supported(const engine_state& s);
/// moe_forward on the device: y [D, T] from x [D, T].
status moe_run(engine_state& s, const pass& p, int64_t il, const float* x, float* y,
               std::vector<int32_t>* experts);

}  // namespace hart::gpu

namespace hart {
struct gpu_engine::state : gpu::engine_state {};
}  // namespace hart
