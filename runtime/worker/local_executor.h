// File: runtime/worker/local_executor.h
// The in-process step_executor: a cpu_worker over a kv_store it owns, sized
// from the cache config the scheduler's cache shard hands pages out of.
//
//   HART_ASSIGN_OR_RETURN(auto ex, local_executor::create(eng, params.cache));
//   status_or<step_result> r = ex->execute(plan);
#pragma once

#include "runtime/cache/shadow_radix.h"
#include "runtime/model/engine.h"
#include "runtime/sched/step_executor.h"
#include "runtime/worker/cpu_worker.h"

#include <memory>

namespace hart::sched {

class local_executor : public step_executor {
 public:
  /// `eng` must outlive the executor; pages are allocated for cfg's pools.
  static status_or<std::unique_ptr<local_executor>> create(const engine& eng, const cache::cache_config& cfg);

  status_or<step_result> execute(const step_plan& plan) override { return worker_->execute(plan); }
  kv_store& store() { return *store_; }

 private:
  local_executor() = default;
  std::unique_ptr<kv_store> store_;
  std::unique_ptr<cpu_worker> worker_;
};

}  // namespace hart::sched
