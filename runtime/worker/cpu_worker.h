// File: runtime/worker/cpu_worker.h
// Executes a step_plan on the CPU engine: binds every item's cache pages to a
// fresh sequence_state, runs one engine::forward over the whole batch, and
// samples each item that asks for it from its last row (sampler seeded with the
// plan's per-step seed), with the log-probabilities of that distribution. Keeps
// no per-sequence state, so the same plan gives the same result anywhere.
//
//   cpu_worker w(*eng, *store);
//   sched::step_result r = w.execute(plan);
#pragma once

#include "runtime/model/engine.h"
#include "runtime/sched/step.h"

#include <vector>

namespace hart::sched {

class cpu_worker {
 public:
  /// `eng` and `store` (the pages the scheduler's cache hands out) must outlive it.
  cpu_worker(const engine& eng, kv_store& store) : eng_(eng), store_(store) {}

  /// A failed forward (bad token id, ...) comes back as result.error; nothing is sampled then.
  step_result execute(const step_plan& plan);

 private:
  const engine& eng_;
  kv_store& store_;
  std::vector<float> logits_;  // [vocab, rows] reused across steps
};

}  // namespace hart::sched
