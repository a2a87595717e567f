// File: cli/device_executor.h
// What `hart serve --device` and `hart worker --device` need to run the model
// on the GPU: a startup check that the device can be used (before anything is
// loaded), the context the GPU engine is sized for, and the in-process GPU
// executor over a KV pool of the cache's pages (runtime/worker/gpu_executor).
// The CPU device keeps the CPU engine and its worker (cmd_serve, cmd_worker).
#pragma once

#include "cli/cli_common.h"
#include "runtime/cache/shadow_radix.h"
#include "runtime/model/config.h"
#include "runtime/model/weight_target.h"
#include "runtime/sched/step_executor.h"

#include <memory>
#include <string>

namespace hart::cli {

/// ok for `cpu`; for `cuda` failed_precondition in a build without CUDA or on
/// a machine without a visible device; invalid_argument for any other name.
status device_usable(const std::string& device);

/// The longest prompt + generation the GPU engine is sized for: `requested`
/// when > 0, else the GPU engine's default capped by max_position_embeddings
/// (its activation arena and index lists grow with the context).
int64_t gpu_max_context(const model_config& cfg, int64_t requested);

/// Sizes of the GPU engine a server runs.
struct gpu_serving_sizes {
  int64_t max_context = 0;       // gpu_max_context
  int64_t max_running = 1;       // sequences decoding at once (the memory plan's SWA pages)
  int64_t max_batch_tokens = 0;  // tokens per step (the engine's pass; 0 = its default)
  double memory_fraction = 0.9;  // --gpu-memory-fraction: sizes the pages `cache` leaves at 0
};

/// Loads the GPU engine (load_gpu_engine: the checkpoint or dummy weights)
/// with a KV pool of `cache`'s pages; page counts left 0 are chosen by the
/// engine's memory plan (gpu_engine_params::memory_fraction) and written back
/// to `cache`, so the cache shard allocates exactly the pool's pages. The
/// errors of gpu_engine::load (a plan that cannot fit: resource_exhausted with
/// its numbers), failed_precondition in a build without CUDA. With `weights`,
/// also sets it to the engine's weight target (weight sync into `hart serve
/// --device cuda`: build on any thread, swap on the worker's).
status_or<std::unique_ptr<sched::step_executor>> make_gpu_executor(
    const common_options& o, cache::cache_config* cache, const gpu_serving_sizes& sizes,
    std::shared_ptr<weight_target>* weights = nullptr);

}  // namespace hart::cli
