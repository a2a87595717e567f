// File: runtime/worker/engine_factory.h
// The engine a process runs, from what its command line names (engine_source:
// the checkpoint, precision, device, load format): the CPU engine, the GPU
// engine where hart was built with CUDA (--device cuda), either behind
// forward_engine, and the GPU engine as a server's in-process executor over a
// KV pool of the cache's pages (gpu_executor.h), with the startup check that
// the device can be used before anything is loaded.
//
//   HART_RETURN_IF_ERROR(device_usable(src.device));
//   HART_ASSIGN_OR_RETURN(std::unique_ptr<forward_engine> e, load_forward_engine(src));
#pragma once

#include "runtime/cache/shadow_radix.h"
#include "runtime/gpu/gpu_engine.h"  // gpu_engine_params only, in a build without CUDA
#include "runtime/model/config.h"
#include "runtime/model/engine.h"
#include "runtime/model/forward_engine.h"
#include "runtime/model/weight_target.h"
#include "runtime/sched/step_executor.h"

#include <cstdint>
#include <memory>
#include <string>

namespace hart::worker {

/// Which model, how: the options every model command shares (the CLI's
/// common_options).
struct engine_source {
  std::string model_dir;
  std::string precision_name = "exact";  // exact or fp8
  int threads = 0;                       // the CPU engine's (0 = all cores)
  bool deterministic = false;
  bool enforce_eager = false;  // --device cuda: decode without CUDA graphs (gpu_engine_params::decode_launch)
  std::string device = "cpu";  // cpu or cuda
  std::string load_format = "auto";  // auto (the checkpoint) or dummy (dummy_model.h)
  int64_t num_layers = 0;            // with dummy: the config's first N layers (0 = all)
};

/// The CPU engine on the checkpoint in o.model_dir (engine::load, progress logged).
status_or<std::unique_ptr<engine>> load_cpu_engine(const engine_source& o);

/// The config of the model a server or worker process runs. On the CPU device
/// the engine is loaded now, into `*cpu`; with --device cuda only the config
/// is read (the dummy model's cut to o.num_layers): the GPU engine is loaded
/// once its pool size is known (make_gpu_executor).
status_or<model_config> load_served_model(const engine_source& o, std::unique_ptr<engine>* cpu);

/// failed_precondition: --device cuda in a build without CUDA.
status no_cuda_build();

/// invalid_argument for an unknown device; failed_precondition for `cuda`
/// in a build without CUDA or on a machine without a device.
status_or<std::unique_ptr<forward_engine>> load_forward_engine(const engine_source& o);

/// The GPU engine for `o` (--model, --precision, --deterministic,
/// --enforce-eager over `p`'s sizes): the checkpoint in o.model_dir, or with
/// --load-format dummy random weights made on the device for
/// dummy_model_config's shapes (routed experts MXFP4 where the release
/// format has them). failed_precondition in a build without CUDA.
status_or<std::unique_ptr<gpu_engine>> load_gpu_engine(const engine_source& o, gpu_engine_params p);

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
    const engine_source& o, cache::cache_config* cache, const gpu_serving_sizes& sizes,
    std::shared_ptr<weight_target>* weights = nullptr);

}  // namespace hart::worker
