// File: runtime/worker/gpu_executor.h
// The in-process step_executor on the GPU engine (built with HART_CUDA): loads
// a gpu_engine whose KV pool has exactly the cache config's pages, so the
// ShadowRadix page ids of a plan index the device pool directly (the layout
// is kv_store's, docs/gpu-engine.md "Memory"); each step binds every item to
// its cache pages (gpu_engine::bind_pages), runs one forward over the batch
// and samples on the host like cpu_worker (step_sampling.h). Keeps no
// per-sequence state, so a prefix-cache hit reads the KV an earlier request
// left in the pool. weights() is the engine's weight_target (build on any
// thread, swap between execute calls), for weight sync into a GPU server.
//
//   gpu_engine_params p;  p.base.model_dir = dir;  p.max_context = 8192;
//   HART_ASSIGN_OR_RETURN(auto ex, gpu_executor::create(p, serving.cache));
//   status_or<step_result> r = ex->execute(plan);
#pragma once

#include "runtime/cache/shadow_radix.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/model/weight_target.h"
#include "runtime/sched/step_executor.h"

#include <memory>
#include <vector>

namespace hart::sched {

class gpu_executor : public step_executor {
 public:
  /// The page size and pool sizes of `params` are replaced by `cache`'s. The
  /// gpu_engine::load errors (no device: failed_precondition; no room:
  /// resource_exhausted; a bad checkpoint) come back unchanged.
  static status_or<std::unique_ptr<gpu_executor>> create(gpu_engine_params params,
                                                         const cache::cache_config& cache);
  /// Over an engine loaded by the caller (its pool's pages are the cache's).
  static std::unique_ptr<gpu_executor> over(std::shared_ptr<gpu_engine> eng);

  /// A failed forward (bad token id, pages not reserved) comes back as result.error.
  status_or<step_result> execute(const step_plan& plan) override;
  const gpu_engine& engine() const { return *eng_; }
  /// The engine's weight updates (gpu_engine::build_weights / swap_weights);
  /// shares the engine, so it stays valid after the executor is gone. Swap only
  /// between execute calls (the worker actor's thread does both).
  std::shared_ptr<weight_target> weights() const;

 private:
  gpu_executor() = default;
  std::shared_ptr<gpu_engine> eng_;
  std::vector<float> logits_;  // [vocab, rows] reused across steps
};

}  // namespace hart::sched
