// File: runtime/sched/step_stats.h
// What the step path measures, for the stats verb and /metrics: every applied
// step's latency (plan made to result applied), and for decode steps the
// executor's time and the gap between back-to-back steps, split by phase and
// by whether the plan took a shard round trip; worker failures. step_pipeline
// records each step as it applies it; stats() joins the scheduler's counters
// and the shard's metrics.
//
//   step_stats st;
//   st.record(plan, /*ok=*/true, timing, now_us);
//   serving_stats s = st.stats(sched, shard_metrics);
#pragma once

#include "runtime/cache/cache_shard.h"
#include "runtime/core/histogram.h"
#include "runtime/sched/scheduler.h"
#include "runtime/sched/step.h"

#include <cstdint>
#include <vector>

namespace hart::sched {

struct serving_stats {
  int64_t waiting = 0, running = 0;  // sequences
  int64_t steps = 0, preemptions = 0, finished = 0;
  int64_t steps_ahead = 0;  // of the steps, planned before the step before ran (overlap scheduling)
  int64_t generated_tokens = 0, fed_tokens = 0;
  /// Speculative decoding: verify passes, drafts fed in them, drafts kept (scheduler_counters).
  int64_t verify_passes = 0, drafted_tokens = 0, accepted_drafts = 0;
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
  /// Planned with a round trip to the shard (not within the grants its sequences held).
  bool with_shard = false;
};

class step_stats {
 public:
  /// An applied step (`ok`: the executor ran it), at `now_us`.
  void record(const step_plan& plan, bool ok, const step_timing& timing, int64_t now_us);
  /// A failed executor, or one that lost its pages while idle.
  void count_worker_failure() { ++worker_failures_; }
  /// The last recorded step fed one token per sequence and ran (a decode step).
  bool last_decode_only() const { return last_decode_only_; }
  /// Not a decode step: the next one does not chain a gap to it.
  void break_chain() { last_decode_only_ = false; }
  /// With the scheduler's counters and the shard's metrics.
  serving_stats stats(const scheduler& sched, const cache::cache_metrics& cache) const;

 private:
  /// A fixed-size window of the latest samples (µs).
  struct latency_ring {
    std::vector<int64_t> v;
    size_t next = 0;
    void add(int64_t us);
  };
  static constexpr size_t k_latency_window = 4096;

  int64_t worker_failures_ = 0;
  latency_ring step_us_, decode_step_us_, decode_exec_us_, decode_gap_us_;
  latency_histogram step_hist_;  // every step since start, seconds
  latency_ring decode_gap_grants_us_, decode_gap_shard_us_;
  latency_ring gap_wake_us_, gap_apply_us_, gap_plan_us_, gap_handoff_us_;
  int64_t decode_steps_with_shard_ = 0;
  bool last_decode_only_ = false;
  int64_t busy_us_ = 0;
};

}  // namespace hart::sched
