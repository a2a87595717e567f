// File: cli/bench_floor.h — what a V4 step must move at least, for
// `hart bench`: weight bytes in the checkpoint's formats and KV bytes in the
// FP8 cache layout, over the measured copy bandwidth (perf-targets.md).
// Pure arithmetic on the config; no device.
//
//   const bench_model_bytes m = bench_model_bytes_of(cfg);
//   double floor_us = bench_floor_us(m.dense_bytes + 7 * m.expert_bytes + m.head_bytes + kv, launch_us);
#pragma once

#include "runtime/model/config.h"

#include <cstdint>

namespace hart::cli {

/// Measured device-to-device copy bandwidth of the lent H200 (perf-targets.md).
inline constexpr double k_h200_copy_bytes_per_s = 4.15e12;
/// FP8 dense tensor-core rate of the H200 (datasheet; not measured here yet).
inline constexpr double k_h200_fp8_flop_per_s = 1979e12;
/// FP8 KV layout (runtime/cache/cache_plan.h): a 512-dim entry is 448 e4m3 +
/// 64 bf16 RoPE dims + 8 scale bytes; an indexer key 128 e4m3 + an fp32 scale.
inline constexpr int64_t k_kv_entry_bytes = 584;
inline constexpr int64_t k_index_key_bytes = 132;

/// Bytes of one model's weights as a step reads them. FP8 linears (wq_a, wq_b,
/// wkv, wo_a, wo_b, indexer wq_b, experts): 1 byte + one e8m0 byte per 128×128
/// tile; compressor, indexer weights_proj, router and LM head: bf16 (their
/// checkpoint dtype; the fp32 math on bf16 values is exact); mHC mixing and
/// norms: fp32. wo_a counts as FP8: its checkpoint values are FP8.
struct bench_model_bytes {
  double dense_bytes = 0;  // every layer's attention, indexer, compressors, router, shared expert, mHC, norms
  double expert_bytes = 0;   // one routed expert (w1, w3, w2)
  double head_bytes = 0;     // the LM head [vocab, D]
  double dense_params = 0;   // matmul parameters every token runs (dense part, all layers)
  double expert_params = 0;  // one routed expert's
  double head_params = 0;
};

/// `mxfp4_experts`: routed experts as e2m1 pairs + one e8m0 per 32 (the
/// release checkpoints' form: 0.53 bytes per parameter).
bench_model_bytes bench_model_bytes_of(const model_config& cfg, bool mxfp4_experts = false);

/// KV bytes one query at `n_ctx` earlier positions reads, all layers: window
/// min(n, W) entries each layer; CSA: top-k min(k, n/4) entries + every one of
/// the n/4 indexer keys; HCA: all n/128 entries. Compressor state is not counted.
double bench_kv_read_bytes(const model_config& cfg, int64_t n_ctx);

/// bytes / copy bandwidth + the launch floor, in µs.
double bench_floor_us(double bytes, double launch_us);

}  // namespace hart::cli
