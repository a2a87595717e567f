#include "runtime/worker/serving_loop.h"

#include <algorithm>

namespace hart::sched {

status_or<std::unique_ptr<serving_loop>> serving_loop::create(const engine& eng, serving_params params,
                                                              const tokenizer* tok) {
  params.cache.window = eng.config().window;  // the model decides; a config mismatch would corrupt reads
  HART_RETURN_IF_ERROR(params.cache.validate());
  if (params.sched.vocab_size == 0) params.sched.vocab_size = int32_t(eng.config().vocab_size);
  if (params.sched.eos_token_id < 0 && tok && tok->config().eos_id) params.sched.eos_token_id = *tok->config().eos_id;
  HART_RETURN_IF_ERROR(params.sched.validate());
  std::unique_ptr<serving_loop> l(new serving_loop());
  HART_ASSIGN_OR_RETURN(l->store_, eng.make_store(params.cache.page_size));
  l->store_->ensure_full_pages(params.cache.n_full_pages);
  l->store_->ensure_swa_pages(params.cache.n_swa_pages);
  l->cache_ = std::make_unique<cache::shadow_radix>(params.cache);
  l->sched_ = std::make_unique<scheduler>(params.sched, *l->cache_, tok);
  l->worker_ = std::make_unique<cpu_worker>(eng, *l->store_);
  return l;
}

event_batch serving_loop::step() {
  const int64_t t0 = sched_->now_us();
  step_plan plan = sched_->schedule();
  event_batch ev = sched_->take_events();
  if (plan.empty()) return ev;
  step_result res = worker_->execute(plan);
  ev.append(sched_->complete(plan, res));
  const int64_t dt = sched_->now_us() - t0;
  step_us_.push_back(dt);
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
  s.tokens_per_s = busy_us_ > 0 ? double(c.generated_tokens) * 1e6 / double(busy_us_) : 0.0;
  s.ttft_us_mean = c.ttft_count ? double(c.ttft_us_sum) / double(c.ttft_count) : 0.0;
  if (!step_us_.empty()) {
    std::vector<int64_t> v = step_us_;
    std::sort(v.begin(), v.end());
    s.step_us_mean = double(busy_us_) / double(v.size());
    s.step_us_p50 = double(v[v.size() / 2]);
    s.step_us_p99 = double(v[std::min(v.size() - 1, v.size() * 99 / 100)]);
  }
  s.cache = cache_->metrics();
  s.cache_hit_rate = s.cache.hit_rate();
  return s;
}

}  // namespace hart::sched
