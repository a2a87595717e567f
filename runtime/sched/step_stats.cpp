#include "runtime/sched/step_stats.h"

#include <algorithm>
#include <numeric>

namespace hart::sched {

void step_stats::latency_ring::add(int64_t us) {
  if (v.size() < k_latency_window)
    v.push_back(us);
  else
    v[next] = us;
  next = (next + 1) % k_latency_window;
}

void step_stats::record(const step_plan& plan, bool ok, const step_timing& timing, int64_t now_us) {
  const int64_t dt = now_us - timing.planned_us;
  step_us_.add(dt);
  step_hist_.add(double(dt) * 1e-6);
  busy_us_ += dt;
  const bool decode_only = std::all_of(plan.items.begin(), plan.items.end(),
                                       [](const step_item& it) { return it.tokens.size() == 1; });
  const bool with_shard = timing.with_shard;
  if (decode_only) {
    decode_step_us_.add(dt);
    decode_exec_us_.add(timing.exec_end_us - timing.exec_start_us);
    decode_steps_with_shard_ += with_shard;
    if (last_decode_only_ && timing.chained_from_us > 0) {
      const int64_t gap = timing.exec_start_us - timing.chained_from_us;
      decode_gap_us_.add(gap);
      (with_shard ? decode_gap_shard_us_ : decode_gap_grants_us_).add(gap);
      if (timing.outcome_us > 0 && timing.sent_us > 0) {
        gap_wake_us_.add(timing.outcome_us - timing.chained_from_us);
        gap_apply_us_.add(timing.planned_us - timing.outcome_us);
        gap_plan_us_.add(timing.sent_us - timing.planned_us);
        gap_handoff_us_.add(timing.exec_start_us - timing.sent_us);
      }
    }
  }
  last_decode_only_ = decode_only && ok;
}

serving_stats step_stats::stats(const scheduler& sched, const cache::cache_metrics& cache) const {
  serving_stats s;
  const scheduler_counters& c = sched.counters();
  s.waiting = sched.n_waiting();
  s.running = sched.n_running();
  s.steps = c.steps;
  s.steps_ahead = c.steps_ahead;
  s.preemptions = c.preemptions;
  s.finished = c.finished;
  s.generated_tokens = c.generated_tokens;
  s.fed_tokens = c.fed_tokens;
  s.verify_passes = c.verify_passes;
  s.drafted_tokens = c.drafted_tokens;
  s.accepted_drafts = c.accepted_drafts;
  s.worker_failures = worker_failures_;
  s.tokens_per_s = busy_us_ > 0 ? double(c.generated_tokens) * 1e6 / double(busy_us_) : 0.0;
  s.ttft_us_mean = c.ttft_count ? double(c.ttft_us_sum) / double(c.ttft_count) : 0.0;
  s.ttft = c.ttft;
  s.tpot = c.tpot;
  s.e2e = c.e2e;
  s.step = step_hist_;
  auto percentiles = [](std::vector<int64_t> v, double* p50, double* p99, double* mean) {
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    *p50 = double(v[v.size() / 2]);
    *p99 = double(v[std::min(v.size() - 1, v.size() * 99 / 100)]);
    if (mean) *mean = double(std::accumulate(v.begin(), v.end(), int64_t{0})) / double(v.size());
  };
  percentiles(step_us_.v, &s.step_us_p50, &s.step_us_p99, &s.step_us_mean);
  percentiles(decode_step_us_.v, &s.decode_step_us_p50, &s.decode_step_us_p99, nullptr);
  percentiles(decode_exec_us_.v, &s.decode_exec_us_p50, &s.decode_exec_us_p99, &s.decode_exec_us_mean);
  percentiles(decode_gap_us_.v, &s.decode_gap_us_p50, &s.decode_gap_us_p99, &s.decode_gap_us_mean);
  percentiles(decode_gap_grants_us_.v, &s.decode_gap_grants_us_p50, &s.decode_gap_grants_us_p99, nullptr);
  percentiles(decode_gap_shard_us_.v, &s.decode_gap_shard_us_p50, &s.decode_gap_shard_us_p99, nullptr);
  percentiles(gap_wake_us_.v, &s.decode_gap_wake_us_p50, &s.decode_gap_wake_us_p99, nullptr);
  percentiles(gap_apply_us_.v, &s.decode_gap_apply_us_p50, &s.decode_gap_apply_us_p99, nullptr);
  percentiles(gap_plan_us_.v, &s.decode_gap_plan_us_p50, &s.decode_gap_plan_us_p99, nullptr);
  percentiles(gap_handoff_us_.v, &s.decode_gap_handoff_us_p50, &s.decode_gap_handoff_us_p99, nullptr);
  s.decode_steps_with_shard = decode_steps_with_shard_;
  s.pages_granted_ahead = c.pages_ahead;
  s.cache = cache;
  s.cache_hit_rate = s.cache.hit_rate();
  return s;
}

}  // namespace hart::sched
