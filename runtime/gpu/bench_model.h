// File: runtime/gpu/bench_model.h — the random-weight model `hart bench` runs:
// device_weights for any V4 config, made directly on the device in the formats
// the engine keeps after loading a checkpoint (gpu_weights.h): in `fp8`, every
// linear the reference runs in FP8 (attention wq_a/wq_b/wkv/wo_b, indexer
// wq_b, shared and routed experts) and wo_a (FP8 values, unquantized
// inputs) is e4m3 codes + 128×128 e8m0 scales (routed experts MXFP4 on request); compressors, indexer
// weights_proj, router and head bf16; the rest (embedding, mHC, norms) fp32.
// In `exact` the FP8 linears are fp32 (experts) or bf16 (the others).
//
// NOTE(bench): not through a checkpoint and device_weights_load: writing a
// random V4-Flash checkpoint costs ~1.5 min per layer on 2 cores (3.4 GB of
// MXFP4 experts each) and the disk to hold it; generated here, 4 layers take
// seconds. The layout and formats are the ones device_weights_load produces
// from a real FP8 checkpoint.
//
//   HART_ASSIGN_OR_RETURN(gpu::device_weights w, gpu::bench_weights_make(cfg, precision::fp8, 1));
//   HART_ASSIGN_OR_RETURN(auto eng, gpu_engine::load(params, cfg, std::move(w)));
#pragma once

#include "runtime/core/status.h"
#include "runtime/gpu/gpu_weights.h"
#include "runtime/model/config.h"
#include "runtime/model/weights.h"

#include <cstdint>

namespace hart::gpu {

/// Random weights of `cfg`'s shapes (values: bench_fill.h; hash-routing tables
/// with K distinct experts per token). `mxfp4_experts` (fp8, dims multiples of
/// 128): the routed experts as the release checkpoints ship them, e2m1 pairs +
/// per-32 scales (what device_weights_upload keeps of such a checkpoint).
/// resource_exhausted when they do not fit.
status_or<device_weights> bench_weights_make(const model_config& cfg, precision prec, uint64_t seed,
                                             bool mxfp4_experts = false);

}  // namespace hart::gpu
