// File: runtime/worker/serving_loop.h
// The serving core in one thread: serving_core (scheduler + ShadowRadix) and
// a step_executor (the CPU worker, or a remote worker process) called in turn.
// For tests, and the reference the actor runtime (scheduler actor + worker
// actor, actors/) must behave like.
//
//   HART_ASSIGN_OR_RETURN(auto loop, serving_loop::create(*eng, {}, &tok));
//   HART_RETURN_IF_ERROR(loop->submit(req));
//   sched::event_batch ev = loop->run_until_idle();
#pragma once

#include "runtime/model/engine.h"
#include "runtime/sched/serving_core.h"
#include "runtime/sched/step_executor.h"

#include <cstdint>
#include <memory>
#include <optional>

namespace hart::sched {

/// `params` with what the model decides filled in: the cache window, the
/// vocabulary size (when 0) and EOS (when < 0, from the tokenizer, may be null).
serving_params serving_params_for(const model_config& cfg, serving_params params, const tokenizer* tok);
inline serving_params serving_params_for(const engine& eng, serving_params params, const tokenizer* tok) {
  return serving_params_for(eng.config(), std::move(params), tok);
}

class serving_loop {
 public:
  /// `eng` and `tok` (may be null) must outlive the loop. Without `executor`
  /// the loop allocates the KV pages and runs a cpu_worker in this thread;
  /// with one (a remote_worker) it only plans and leaves the pages to it.
  static status_or<std::unique_ptr<serving_loop>> create(const engine& eng, serving_params params,
                                                         const tokenizer* tok,
                                                         std::unique_ptr<step_executor> executor = nullptr);

  status submit(gen_request r) { return core_->submit(std::move(r)); }
  event_batch abort(uint64_t id) { return core_->abort(id); }
  event_batch abort_all() { return core_->abort_all(); }
  event_batch pause(pause_mode m) { return core_->pause(m); }
  void resume() { core_->resume(); }
  void flush_cache() { core_->flush_cache(); }

  /// Overlap scheduling (scheduler::schedule_ahead): each decode step plans
  /// the next one before it runs, as the actor runtime does to keep its
  /// worker busy; here, in one thread, it changes nothing but the order, so
  /// outputs must equal the plain loop's (the tests check that).
  void set_overlap(bool on) { overlap_ = on; }

  /// One scheduler step executed on the engine; returns its events (and any
  /// produced while planning). A failed executor is handled as
  /// serving_core::finish_step describes.
  event_batch step();
  /// Steps until nothing is live, or until a step makes no progress (paused,
  /// or nothing fits); at most max_steps steps.
  event_batch run_until_idle(int64_t max_steps = 1 << 30);

  bool idle() const { return core_->idle(); }
  serving_stats stats() const { return core_->stats(); }
  scheduler& sched() { return core_->sched(); }
  cache::shadow_radix& cache() { return core_->cache(); }

 private:
  serving_loop() = default;

  std::unique_ptr<serving_core> core_;
  std::unique_ptr<step_executor> executor_;
  int64_t last_exec_end_us_ = 0;  // of the previous step() that ran a plan
  bool overlap_ = false;
  std::optional<step_plan> ahead_;       // planned before the step before it ran
  std::optional<step_result> previous_;  // that step's result, for ahead_'s placeholders
};

}  // namespace hart::sched
