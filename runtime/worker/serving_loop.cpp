#include "runtime/worker/serving_loop.h"

#include "runtime/worker/local_executor.h"

namespace hart::sched {

serving_params serving_params_for(const model_config& cfg, serving_params params, const tokenizer* tok) {
  params.cache.window = cfg.window;  // the model decides; a config mismatch would corrupt reads
  if (params.sched.vocab_size == 0) params.sched.vocab_size = int32_t(cfg.vocab_size);
  if (params.sched.eos_token_id < 0 && tok && tok->config().eos_id)
    params.sched.eos_token_id = *tok->config().eos_id;
  return params;
}

status_or<std::unique_ptr<serving_loop>> serving_loop::create(const engine& eng, serving_params params,
                                                              const tokenizer* tok,
                                                              std::unique_ptr<step_executor> executor) {
  params = serving_params_for(eng, std::move(params), tok);
  std::unique_ptr<serving_loop> l(new serving_loop());
  HART_ASSIGN_OR_RETURN(l->core_, serving_core::create(params, tok));
  if (executor) {
    l->executor_ = std::move(executor);
  } else {
    HART_ASSIGN_OR_RETURN(l->executor_, local_executor::create(eng, params.cache));
  }
  return l;
}

event_batch serving_loop::step() {
  step_timing t;
  t.planned_us = core_->now_us();
  step_plan plan;
  event_batch ev;
  const bool from_ahead = ahead_.has_value();
  if (from_ahead) {
    plan = std::move(*ahead_);
    ahead_.reset();
  } else {
    plan = core_->plan_step();
    ev = core_->take_events();
  }
  if (plan.empty()) {
    last_exec_end_us_ = 0;
    return ev;
  }
  if (overlap_) {
    step_plan next = core_->plan_ahead();
    if (!next.empty()) ahead_ = std::move(next);
  }
  t.chained_from_us = last_exec_end_us_;
  t.exec_start_us = core_->now_us();
  // A step planned ahead feeds the tokens the step before sampled (none if it failed).
  step_result failed;
  failed.error = status(status_code::unavailable, "the step before failed");
  const status filled = from_ahead ? fill_planned_ahead(plan, previous_ ? *previous_ : failed) : status{};
  status_or<step_result> res = filled.ok() ? executor_->execute(plan) : status_or<step_result>(filled);
  t.exec_end_us = core_->now_us();
  last_exec_end_us_ = t.exec_end_us;
  previous_.reset();
  ev.append(core_->finish_step(plan, res, !executor_->keeps_pages_on_failure(), t));
  if (res.ok() && ahead_) previous_ = std::move(res).value();
  return ev;
}

event_batch serving_loop::run_until_idle(int64_t max_steps) {
  event_batch all;
  for (int64_t i = 0; i < max_steps && !core_->idle(); ++i) {
    const int64_t steps_before = core_->sched().counters().steps;
    event_batch ev = step();
    const bool progress = core_->sched().counters().steps != steps_before || !ev.empty();
    all.append(std::move(ev));
    if (!progress) break;
  }
  return all;
}

}  // namespace hart::sched
