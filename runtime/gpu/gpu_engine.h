// File: runtime/gpu/gpu_engine.h
// The DeepSeek-V4 engine on one CUDA device, with the CPU engine's contract
// (runtime/model/engine.h, forward_engine.h): forward(batch, logits, trace)
// over sequence_state, prefill chunks of any length, batched decode of
// different lengths, logits none / last / all. Everything is allocated at
// load: the weights (fp32 for `exact`; e4m3 + 128×128 scales for `fp8`), the
// KV pool (kv_pool.h) and one activation arena sized for `max_batch_tokens`
// tokens per pass and `max_context` positions per sequence; a forward call
// with more tokens runs as consecutive passes (same logits: chunking does not
// change results). A prefill pass's metadata (page offsets, index lists,
// compressor plans) is built on the host and copied once per layer; a decode
// pass's is built on the device from its positions and page tables, and the
// pass runs as a CUDA graph captured once per (tokens, context bucket)
// (decode_launch below).
// docs/gpu-engine.md has the memory layout and what runs where.
//
//   gpu_engine_params p;
//   p.base.model_dir = "tests/data/tiny-a";
//   HART_ASSIGN_OR_RETURN(auto eng, gpu_engine::load(p));
//   sequence_state s = eng->new_sequence();
//   HART_RETURN_IF_ERROR(eng->forward({{&s, prompt, logits_request::last}}, &logits));
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/forward_engine.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace hart {

struct gpu_built_weights;
class tensor_source;

namespace gpu {
struct device_weights;
}  // namespace gpu
namespace cache {
struct memory_plan;
}  // namespace cache

struct gpu_engine_params {
  engine_params base;  // model_dir, prec, page_size, deterministic (row-invariant linears)
  int device = 0;
  int64_t max_batch_tokens = 1024;  // tokens per device pass (the arena's size)
  int64_t max_context = 8192;       // positions per sequence
  int64_t full_pages =
      0;  // KV pool pages; 0 = from memory_fraction, or enough for 8 sequences of max_context
  int64_t swa_pages = 0;
  /// > 0: the memory planner (runtime/cache/memory_plan.h) sizes the KV pool
  /// at load, after the weights and every workspace are allocated: SWA pages
  /// for max_running sequences and one pass, full pages from what this
  /// fraction of the device leaves. Page counts given above are checked
  /// against the same budget instead. A configuration that cannot fit is
  /// refused with the plan's numbers (resource_exhausted), before the weights
  /// load when the checkpoint alone is larger than the budget.
  double memory_fraction = 0;
  int64_t max_running = 1;
  /// FP8 linears of >= 2 rows (linear_fp8_tc_cuda; from 2 rows it beats the
  /// CUDA-core dot on every V4 shape, perf-notes G1 v3) and the routed experts
  /// (linear_grouped_tc_cuda) on tensor cores; false keeps every FP8 linear on
  /// CUDA cores (bitwise the CPU's fp8 sums).
  bool fp8_tensor_cores = true;
  /// With fp8_tensor_cores, FP8 linears of at least this many rows (prefill
  /// chunks) go through cuBLASLt's block-scaled FP8 GEMM (linear_fp8_lt_cuda:
  /// 6-9x the mma.sync kernel there, perf-notes G2 v1); 0 = never. Off by
  /// default: Hopper's FP8 wgmma sums each block with ~2^-12 of Σ|x·w| error
  /// where mma.sync's sums are exact, which flips bf16 roundings and moves the
  /// logits ~3% (median) off DeepSeek's official FP8 (docs/precision.md).
  /// Off under base.deterministic, like every tensor-core path.
  int64_t fp8_cublaslt_rows = 0;
  /// In fp8 mode with V4's attention shape (head_dim 512 = 448 NoPE + 64
  /// RoPE, heads a multiple of 16): window KV and compressed entries are kept
  /// as 584-byte FP8 entries (kv_entry.h: the reference's QDQ, RoPE dims in
  /// bf16) and attention reads them with sparse_decode_attention_cuda (A1:
  /// tensor cores, queries rounded to bf16). false keeps fp32 rows and the
  /// fp32 gathered kernel. Off under base.deterministic (A1's splits follow
  /// the batch) and for other shapes.
  bool fp8_kv_entries = true;
  /// How decode passes run (one token per sequence, every row's logits; prefill
  /// passes and traced calls always take host_metadata):
  ///   graphs        metadata built on the device, the pass captured as a CUDA graph
  ///                 once per (tokens, context bucket) and replayed after;
  ///   eager         the same device metadata, kernels launched one by one (--enforce-eager);
  ///   host_metadata metadata built on the host per layer, as prefill passes.
  /// graphs and eager enqueue the same kernels (bitwise the same logits).
  enum class decode_launch { graphs, eager, host_metadata };
  decode_launch decode = decode_launch::graphs;

  status validate() const;
};

/// Whether an engine with these params keeps `cfg`'s window KV and compressed
/// entries as FP8 entries (gpu_engine_params::fp8_kv_entries's rule).
bool gpu_kv_entries(const gpu_engine_params& p, const model_config& cfg);

/// True when a CUDA device is usable (for a clear error before loading).
bool gpu_device_available();

class gpu_engine final : public forward_engine {
 public:
  /// failed_precondition without a device; resource_exhausted when weights, pool or
  /// arena do not fit; the CPU engine's load errors for a bad checkpoint.
  static status_or<std::unique_ptr<gpu_engine>> load(const gpu_engine_params& params);
  /// As load(params), with the config and the device weights given instead of
  /// read from params.base.model_dir (which then only names the model): `hart
  /// bench` builds a random model on the device (bench_model.h).
  static status_or<std::unique_ptr<gpu_engine>> load(const gpu_engine_params& params, const model_config& cfg,
                                                     gpu::device_weights weights);
  ~gpu_engine() override;

  const model_config& config() const override;
  const gpu_engine_params& params() const;
  /// Engine-owned pages (from the device pool); freed when the sequence dies.
  sequence_state new_sequence() const override;
  /// A sequence on pages a cache owns (engine::bind_pages for the device pool):
  /// page ids index this engine's pool (full < full_pages, swa < swa_pages, so
  /// size the pool as the cache's pools), positions p < full.size()·P live in
  /// full[p / P] / swa[p / P], and `n_computed` positions hold valid KV. forward
  /// checks the pages (failed_precondition when not reserved or not live,
  /// invalid_argument outside the pool) and never frees them. One engine runs
  /// either its own sequences or bound ones, never both: their page ids would
  /// collide in the one pool (forward answers failed_precondition).
  sequence_state bind_pages(const std::vector<int32_t>& full, const std::vector<int32_t>& swa,
                            int64_t n_computed) const;
  /// As engine::forward. Also out_of_range past max_context, resource_exhausted
  /// when the pool has no free page (no state changes then). `trace` is
  /// captured over every pass of the call, laid out as one pass would.
  status forward(const std::vector<batch_item>& batch, std::vector<float>* logits,
                 forward_trace* trace = nullptr) const override;
  /// Device bytes held by weights, KV pool and arena.
  size_t device_bytes() const;
  /// The plan the KV pool was sized by (params().memory_fraction > 0), else null.
  const cache::memory_plan* memory_plan() const;
  /// Pages of the KV pool (what a cache over this engine must use).
  int64_t full_pages() const;
  int64_t swa_pages() const;
  /// Decode graphs captured so far, and how many passes replayed one.
  size_t decode_graphs() const;
  uint64_t decode_graph_replays() const;
  /// Overwrites the whole KV pool (entries, indexer keys, window KV, compressor
  /// rings) with random values in [-1, 1) (window KV and entries as valid FP8
  /// entries of such values when the pool holds them): `hart bench` binds
  /// sequences at long lengths without computing their KV (gpu_engine_bench.cpp).
  status kv_fill_random(uint64_t seed) const;

  // -- weight updates (gpu_weight_swap.h; as engine::build_weights / swap_weights) ---

  /// Stages `src` on the host (validated exactly like a load), uploads it into
  /// new device buffers on a stream of its own and, in fp8 precision,
  /// re-quantizes it there: bitwise what a fresh load of the same tensors
  /// holds. Reads the serving weights only for their layout, so it may run on
  /// another thread while forward() runs; the device holds both sets until the swap.
  status_or<std::unique_ptr<gpu_built_weights>> build_weights(const tensor_source& src) const;
  /// Replaces the weights with `w` (from this engine's build_weights) and frees
  /// the old ones. Not concurrent with forward() or build_weights(): the caller
  /// swaps between forward calls. failed_precondition unless `version` >
  /// weight_version(); nothing changes on error. Sequences keep their KV.
  status swap_weights(std::unique_ptr<gpu_built_weights> w, uint64_t version);
  /// As engine::relabel_weights: the serving weights become `version`, unchanged.
  status relabel_weights(uint64_t version);
  /// 0 for the weights loaded from params().base.model_dir.
  uint64_t weight_version() const;

  struct state;

 private:
  explicit gpu_engine(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

}  // namespace hart
