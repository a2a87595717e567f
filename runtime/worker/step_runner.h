// File: runtime/worker/step_runner.h
// A worker's side of the step path, whatever carries the plans (the worker
// actor, the single-thread serving_loop): runs each plan on a step_executor
// and turns what happened into a step_outcome. A plan made ahead of the one
// before it (its tokens are placeholders) is filled from that step's sampled
// tokens, or handed back unrun when that step failed; a plan made for pages
// the executor lost while idle (check_idle) is handed back unrun with the
// pages lost, so the scheduler retracts and recomputes.
//
//   step_runner r(executor.get());
//   step_outcome o = r.run(plan);        // plans in the order they were made
#pragma once

#include "runtime/sched/step_executor.h"
#include "runtime/sched/step_pipeline.h"

#include <cstdint>
#include <memory>
#include <string>

namespace hart::worker {

class step_runner {
 public:
  /// `executor` outlives the runner.
  explicit step_runner(sched::step_executor* executor) : executor_(executor) {}

  /// Runs `plan` (or hands it back unrun, above); `weight_version` is stamped on the outcome.
  std::shared_ptr<const sched::step_outcome> run(const sched::step_plan& plan, uint64_t weight_version = 0);
  /// Between steps (at the executor's idle_check_ms): notes pages lost while idle.
  void check_idle();

 private:
  sched::step_outcome execute(const sched::step_plan& plan, uint64_t weight_version);

  sched::step_executor* executor_;
  /// Non-empty: the executor lost its KV pages while idle (why).
  std::string lost_idle_;
  /// The last outcome: its sampled tokens feed a step planned ahead. Null before the first.
  std::shared_ptr<const sched::step_outcome> last_;
};

}  // namespace hart::worker
