// File: runtime/worker/gpu_executor.h
// The GPU engine as an in-process step executor (built with HART_CUDA): an
// engine_executor over a gpu_engine whose KV pool has exactly the cache
// config's pages, so the ShadowRadix page ids of a plan index the device pool
// directly (the layout is kv_store's, docs/gpu-engine.md "Memory"); each item
// is bound to its pages by gpu_engine::bind_pages. gpu_weight_target is the
// engine's weight updates (build on any thread, swap between execute calls),
// for weight sync into a GPU server.
//
//   gpu_engine_params p;  p.base.model_dir = dir;  p.max_context = 8192;
//   HART_ASSIGN_OR_RETURN(std::shared_ptr<gpu_engine> eng, gpu_engine_for_cache(p, serving.cache));
//   std::unique_ptr<engine_executor> ex = gpu_executor(eng);
//   status_or<step_result> r = ex->execute(plan);
#pragma once

#include "runtime/cache/shadow_radix.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/model/weight_target.h"
#include "runtime/worker/engine_executor.h"

#include <memory>

namespace hart::worker {

/// Loads a gpu_engine whose pool has `cache`'s page size and pools (they
/// replace those of `params`). The gpu_engine::load errors (no device:
/// failed_precondition; no room: resource_exhausted; a bad checkpoint) come
/// back unchanged.
status_or<std::unique_ptr<gpu_engine>> gpu_engine_for_cache(gpu_engine_params params,
                                                            const cache::cache_config& cache);

/// The executor over `eng` (its pool's pages are the cache's); shares it.
std::unique_ptr<engine_executor> gpu_executor(std::shared_ptr<gpu_engine> eng);

/// The engine's weight updates (gpu_engine::build_weights / swap_weights);
/// shares the engine. Swap only between execute calls (the worker actor's
/// thread does both).
std::shared_ptr<weight_target> gpu_weight_target(std::shared_ptr<gpu_engine> eng);

}  // namespace hart::worker
