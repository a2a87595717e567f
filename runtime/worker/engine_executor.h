// File: runtime/worker/engine_executor.h
// The in-process step_executor, over either engine (forward_engine): binds
// every item of a plan to its cache pages, runs one forward over the whole
// batch, and samples each item that asks for it from its last row (sampler
// seeded with the plan's per-step seed), with the log-probabilities of that
// distribution. Keeps no per-sequence state, so the same plan gives the same
// result anywhere, and a prefix-cache hit reads the KV an earlier request left
// in the pages. The GPU engine's factory is gpu_executor.h (HART_CUDA builds).
//
//   HART_ASSIGN_OR_RETURN(auto ex, engine_executor::on_cpu(eng, params.cache));
//   status_or<step_result> r = ex->execute(plan);
#pragma once

#include "runtime/cache/shadow_radix.h"
#include "runtime/model/forward_engine.h"
#include "runtime/sched/step_executor.h"

#include <functional>
#include <memory>
#include <vector>

namespace hart::worker {

class engine_executor final : public sched::step_executor {
 public:
  /// A sequence of the engine on a plan item's cache pages, with the item's
  /// n_computed positions already in them.
  using page_binder = std::function<sequence_state(const sched::step_item&)>;

  /// The CPU engine over KV pages the executor allocates for `cache`'s pools
  /// (the pages the scheduler's cache shard hands out). `eng` must outlive it.
  static status_or<std::unique_ptr<engine_executor>> on_cpu(const engine& eng,
                                                            const cache::cache_config& cache);
  /// An engine whose own pool holds the cache's pages (the GPU engine).
  static std::unique_ptr<engine_executor> over(std::shared_ptr<const forward_engine> eng, page_binder bind);

  /// A failed forward (bad token id, pages not reserved) comes back as
  /// result.error; nothing is sampled then.
  status_or<sched::step_result> execute(const sched::step_plan& plan) override;

  /// The CPU engine's pages (on_cpu), for a prefill/decode hand-off to export
  /// from or import into between steps (runtime/pd); null over an engine's own pool.
  kv_store* cpu_store() const { return store_.get(); }

 private:
  engine_executor() = default;
  std::shared_ptr<const forward_engine> eng_;
  std::unique_ptr<kv_store> store_;  // the CPU engine's pages (null over an engine's own pool)
  page_binder bind_;
  std::vector<float> logits_;  // [vocab, rows] reused across steps
};

}  // namespace hart::worker
