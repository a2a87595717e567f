#include "runtime/worker/serving_loop.h"

#include <algorithm>
#include <numeric>

namespace hart::sched {
namespace {

/// The in-process executor: cpu_worker on the loop's own pages.
class local_executor : public step_executor {
 public:
  local_executor(const engine& eng, kv_store& store) : worker_(eng, store) {}
  status_or<step_result> execute(const step_plan& plan) override { return worker_.execute(plan); }

 private:
  cpu_worker worker_;
};

}  // namespace

status_or<std::unique_ptr<serving_loop>> serving_loop::create(const engine& eng, serving_params params,
                                                              const tokenizer* tok,
                                                              std::unique_ptr<step_executor> executor) {
  params.cache.window = eng.config().window;  // the model decides; a config mismatch would corrupt reads
  HART_RETURN_IF_ERROR(params.cache.validate());
  if (params.sched.vocab_size == 0) params.sched.vocab_size = int32_t(eng.config().vocab_size);
  if (params.sched.eos_token_id < 0 && tok && tok->config().eos_id) params.sched.eos_token_id = *tok->config().eos_id;
  HART_RETURN_IF_ERROR(params.sched.validate());
  std::unique_ptr<serving_loop> l(new serving_loop());
  if (executor) {
    l->executor_ = std::move(executor);
  } else {
    HART_ASSIGN_OR_RETURN(l->store_, eng.make_store(params.cache.page_size));
    l->store_->ensure_full_pages(params.cache.n_full_pages);
    l->store_->ensure_swa_pages(params.cache.n_swa_pages);
    l->executor_ = std::make_unique<local_executor>(eng, *l->store_);
  }
  l->cache_ = std::make_unique<cache::shadow_radix>(params.cache);
  l->sched_ = std::make_unique<scheduler>(params.sched, *l->cache_, tok);
  return l;
}

event_batch serving_loop::step() {
  const int64_t t0 = sched_->now_us();
  step_plan plan = sched_->schedule();
  event_batch ev = sched_->take_events();
  if (plan.empty()) return ev;
  status_or<step_result> res = executor_->execute(plan);
  if (res.ok()) {
    ev.append(sched_->complete(plan, res.value()));
  } else {
    ++worker_failures_;
    step_result failed;
    failed.step = plan.step;
    failed.error = status(res.get_status().code(), "worker failed: " + res.get_status().message());
    ev.append(sched_->complete(plan, failed));
    if (!executor_->keeps_pages_on_failure()) {
      // The KV behind every page died with the worker: whatever still runs must
      // recompute, and no cached prefix may be matched again.
      const bool was_paused = sched_->paused();
      ev.append(sched_->pause(pause_mode::retract));
      sched_->flush_cache();
      if (!was_paused) sched_->resume();
    }
  }
  const int64_t dt = sched_->now_us() - t0;
  auto record = [dt](std::vector<int64_t>& ring, size_t& next) {
    if (ring.size() < k_latency_window) ring.push_back(dt);
    else ring[next] = dt;
    next = (next + 1) % k_latency_window;
  };
  record(step_us_, step_next_);
  const bool decode_only = std::all_of(plan.items.begin(), plan.items.end(),
                                       [](const step_item& it) { return it.tokens.size() == 1; });
  if (decode_only) record(decode_step_us_, decode_next_);
  busy_us_ += dt;
  return ev;
}

event_batch serving_loop::run_until_idle(int64_t max_steps) {
  event_batch all;
  for (int64_t i = 0; i < max_steps && !sched_->idle(); ++i) {
    const int64_t steps_before = sched_->counters().steps;
    event_batch ev = step();
    const bool progress = sched_->counters().steps != steps_before || !ev.empty();
    all.append(std::move(ev));
    if (!progress) break;
  }
  return all;
}

serving_stats serving_loop::stats() const {
  serving_stats s;
  const scheduler_counters& c = sched_->counters();
  s.waiting = sched_->n_waiting();
  s.running = sched_->n_running();
  s.steps = c.steps;
  s.preemptions = c.preemptions;
  s.finished = c.finished;
  s.generated_tokens = c.generated_tokens;
  s.fed_tokens = c.fed_tokens;
  s.worker_failures = worker_failures_;
  s.tokens_per_s = busy_us_ > 0 ? double(c.generated_tokens) * 1e6 / double(busy_us_) : 0.0;
  s.ttft_us_mean = c.ttft_count ? double(c.ttft_us_sum) / double(c.ttft_count) : 0.0;
  auto percentiles = [](std::vector<int64_t> v, double* p50, double* p99, double* mean) {
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    *p50 = double(v[v.size() / 2]);
    *p99 = double(v[std::min(v.size() - 1, v.size() * 99 / 100)]);
    if (mean) *mean = double(std::accumulate(v.begin(), v.end(), int64_t{0})) / double(v.size());
  };
  percentiles(step_us_, &s.step_us_p50, &s.step_us_p99, &s.step_us_mean);
  percentiles(decode_step_us_, &s.decode_step_us_p50, &s.decode_step_us_p99, nullptr);
  s.cache = cache_->metrics();
  s.cache_hit_rate = s.cache.hit_rate();
  return s;
}

}  // namespace hart::sched
