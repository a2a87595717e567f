// File: runtime/sched/serving_core.h
// The serving state one scheduler owns: the continuous-batching scheduler and
// the step statistics. It plans steps and applies their outcomes; its cache
// shard (cache::cache_shard, the ShadowRadix index) is reached by message, and
// what carries the plans is not its business: step_pipeline drives it for
// both runtimes (the scheduler actor, the single-thread serving_loop). No
// engine, no threads, no CAF.
//
// Send take_cache_ops() to the shard after every call, then
//   auto req = core->plan_begin();   // send take_cache_ops(), then *req if any
//   step_plan p = core->plan_end(req ? &grants : nullptr);
//   auto ahead = core->reserve_ahead();  // once p is on its way: send it if any,
//   core->apply_reserved(reserved);      // and apply the answer when it comes
//   event_batch ev = core->finish_step(p, outcome, pages_lost, timing);
#pragma once

#include "runtime/cache/cache_shard.h"
#include "runtime/sched/scheduler.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace hart::sched {

struct serving_params {
  /// page_size, pool sizes, prefix cache on/off; `window` must equal the model's.
  cache::cache_config cache{128, 256, 64, 128, true};
  /// vocab_size must be set; eos_token_id < 0 = none.
  scheduler_params sched;
};

struct serving_stats {
  int64_t waiting = 0, running = 0;  // sequences
  int64_t steps = 0, preemptions = 0, finished = 0;
  int64_t steps_ahead = 0;  // of the steps, planned before the step before ran (overlap scheduling)
  int64_t generated_tokens = 0, fed_tokens = 0;
  /// Executor errors (a dead worker process: a step's plan ended with `error`)
  /// and workers lost while idle (nothing failed: lose_pages_unrun).
  int64_t worker_failures = 0;
  double tokens_per_s = 0;  // generated tokens / time from plan to applied result
  double ttft_us_mean = 0;  // over samples that produced a token
  /// Since start, seconds: time to first token, time per output token after the first (per
  /// sample with two or more), sample latency (arrival to finish), step latency (plan to applied).
  latency_histogram ttft, tpot, e2e, step;
  // Over the last k_latency_window non-empty steps:
  double step_us_mean = 0, step_us_p50 = 0, step_us_p99 = 0;  // plan made -> result applied
  double decode_step_us_p50 = 0, decode_step_us_p99 = 0;  // the same, steps feeding one token per sequence
  double decode_exec_us_mean = 0, decode_exec_us_p50 = 0,
         decode_exec_us_p99 = 0;  // the executor alone (the model step)
  /// Executor idle between two back-to-back decode steps: result hand-back,
  /// applying it, planning the next step, handing it over. The serving
  /// overhead each decode step adds on the step path (target S1).
  double decode_gap_us_mean = 0, decode_gap_us_p50 = 0, decode_gap_us_p99 = 0;
  /// The same gap split by how the next step was planned: within the pages
  /// its sequences held, or with a round trip to the shard (a page crossing
  /// not granted ahead, an admission, sequences waiting for memory).
  double decode_gap_grants_us_p50 = 0, decode_gap_grants_us_p99 = 0;
  double decode_gap_shard_us_p50 = 0, decode_gap_shard_us_p99 = 0;
  /// The same gap in its four phases (each p50 / p99): wake = the step's end
  /// to the scheduler handling its outcome (the hand-back and the thread's
  /// wake-up); apply = applying it (stop rules, events, cache bookkeeping) up
  /// to planning the next; plan = planning it (a shard round trip included)
  /// up to sending it; handoff = sent to the worker starting it.
  double decode_gap_wake_us_p50 = 0, decode_gap_wake_us_p99 = 0;
  double decode_gap_apply_us_p50 = 0, decode_gap_apply_us_p99 = 0;
  double decode_gap_plan_us_p50 = 0, decode_gap_plan_us_p99 = 0;
  double decode_gap_handoff_us_p50 = 0, decode_gap_handoff_us_p99 = 0;
  int64_t decode_steps_with_shard = 0;  // decode steps planned with the shard (since start)
  int64_t pages_granted_ahead = 0;      // pages reserved ahead of need and applied (since start)
  double cache_hit_rate = 0;            // prompt tokens served from the prefix cache
  cache::cache_metrics cache;
};

/// When a step ran, in steady-clock µs (scheduler::now_us's clock).
struct step_timing {
  int64_t planned_us = 0;     // planning began
  int64_t exec_start_us = 0;  // the executor began
  int64_t exec_end_us = 0;    // the executor finished
  /// The previous step's exec_end_us when this step was planned as soon as that
  /// one's result was applied (back to back); 0 otherwise.
  int64_t chained_from_us = 0;
  /// Back to back only: when the previous step's outcome reached the scheduler,
  /// and when this step's plan was sent to the worker (the gap's phases).
  int64_t outcome_us = 0;
  int64_t sent_us = 0;
};

class serving_core {
 public:
  /// `tok` (may be null) must outlive the core; `clock` as scheduler's (default: steady_clock).
  static status_or<std::unique_ptr<serving_core>> create(const serving_params& params, const tokenizer* tok,
                                                         std::function<int64_t()> clock = {});

  status submit(gen_request r) { return sched_->submit(std::move(r)); }
  event_batch abort(uint64_t id) { return sched_->abort(id); }
  event_batch abort_all() { return sched_->abort_all(); }
  event_batch pause(pause_mode m) { return sched_->pause(m); }
  void resume() { sched_->resume(); }
  void flush_cache() { sched_->flush_cache(); }

  /// The next step in two halves around the shard (scheduler::schedule_begin/_end);
  /// empty when paused, idle or nothing fits. Events produced while planning go to take_events().
  std::optional<cache::slot_request> plan_begin() { return sched_->schedule_begin(); }
  step_plan plan_end(const cache::slot_grants* grants);
  /// The step after the one in flight, planned before it ran (scheduler::schedule_ahead).
  step_plan plan_ahead() { return sched_->schedule_ahead(); }
  /// Pages ahead of need for sequences about to cross into a new page, and
  /// the shard's answer (scheduler::reserve_ahead / apply_reserved).
  cache::reserve_request reserve_ahead() { return sched_->reserve_ahead(); }
  void apply_reserved(const cache::reserve_grants& g) { sched_->apply_reserved(g); }
  /// What the shard must apply next, in order.
  cache::cache_op_batch take_cache_ops() { return sched_->take_cache_ops(); }
  event_batch take_events() { return sched_->take_events(); }
  /// Applies the outcome of `plan` (the one in flight). A failed executor (a
  /// dead worker) ends every sequence of the plan with `error`; when
  /// `pages_lost` too, running sequences are retracted and the prefix cache
  /// flushed, so they recompute on the next worker. Token events carry
  /// timing.exec_end_us as produced_us.
  event_batch finish_step(const step_plan& plan, const status_or<step_result>& res, bool pages_lost,
                          const step_timing& timing);
  /// The executor did not run `plan` (the one in flight): its KV pages were
  /// lost while it was idle (a worker process died between steps). Nothing
  /// fails: every running sequence is retracted and the prefix cache flushed,
  /// so they recompute on the next worker. Counted in worker_failures.
  event_batch lose_pages_unrun(const step_plan& plan);
  /// The executor did not run `plan` (planned ahead of a step that failed)
  /// and lost nothing: it is taken back (scheduler::discard).
  event_batch discard_unrun(const step_plan& plan);

  bool idle() const { return sched_->idle(); }
  /// The last applied step fed one token per sequence (a decode step).
  bool last_step_decode_only() const { return last_decode_only_; }
  bool paused() const { return sched_->paused(); }
  bool in_flight() const { return sched_->in_flight(); }
  int64_t now_us() const { return sched_->now_us(); }
  /// With the shard's metrics.
  serving_stats stats(const cache::cache_metrics& cache) const;
  scheduler& sched() { return *sched_; }

 private:
  serving_core() = default;
  /// Retracts every running sequence (paused or not) and flushes the cache:
  /// the KV behind every page is gone.
  event_batch retract_all_and_flush();
  /// Whether `plan` (the oldest in flight, leaving) was planned with the shard.
  bool took_shard(const step_plan& plan);

  /// A fixed-size window of the latest samples (µs).
  struct latency_ring {
    std::vector<int64_t> v;
    size_t next = 0;
    void add(int64_t us);
  };
  static constexpr size_t k_latency_window = 4096;

  std::unique_ptr<scheduler> sched_;
  int64_t worker_failures_ = 0;
  latency_ring step_us_, decode_step_us_, decode_exec_us_, decode_gap_us_;
  latency_histogram step_hist_;  // every step since start, seconds
  latency_ring decode_gap_grants_us_, decode_gap_shard_us_;
  latency_ring gap_wake_us_, gap_apply_us_, gap_plan_us_, gap_handoff_us_;
  /// Steps in flight that were planned with the shard, oldest first.
  std::deque<uint64_t> shard_steps_;
  int64_t decode_steps_with_shard_ = 0;
  bool last_decode_only_ = false;  // the last applied step fed one token per sequence
  int64_t busy_us_ = 0;
};

}  // namespace hart::sched
