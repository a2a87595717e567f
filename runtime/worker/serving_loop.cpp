#include "runtime/worker/serving_loop.h"

#include "runtime/worker/engine_executor.h"

#include <utility>

namespace hart::worker {

sched::serving_params serving_params_for(const model_config& cfg, sched::serving_params params,
                                         const tokenizer* tok) {
  params.cache.window = cfg.window;  // the model decides; a config mismatch would corrupt reads
  if (params.sched.vocab_size == 0) params.sched.vocab_size = int32_t(cfg.vocab_size);
  if (params.sched.eos_token_id < 0 && tok && tok->config().eos_id)
    params.sched.eos_token_id = *tok->config().eos_id;
  return params;
}

status_or<std::unique_ptr<serving_loop>> serving_loop::create(
    const engine& eng, sched::serving_params params, const tokenizer* tok,
    std::unique_ptr<sched::step_executor> executor) {
  params = serving_params_for(eng, params, tok);
  std::unique_ptr<serving_loop> l(new serving_loop());
  HART_ASSIGN_OR_RETURN(std::unique_ptr<sched::scheduler> sched, sched::scheduler::create(params, tok));
  l->shard_ = std::make_unique<sched::in_process_shard>(params.cache);
  l->pipe_ = std::make_unique<sched::step_pipeline>(std::move(sched), sched::step_pipeline_params{});
  l->pipe_->attach(l.get());
  if (executor) {
    l->executor_ = std::move(executor);
  } else {
    HART_ASSIGN_OR_RETURN(l->executor_, engine_executor::on_cpu(eng, params.cache));
  }
  l->runner_ = std::make_unique<step_runner>(l->executor_.get());
  return l;
}

serving_loop::~serving_loop() = default;

void serving_loop::run_oldest() {
  const std::shared_ptr<const sched::step_plan> plan = std::move(steps_.front());
  steps_.pop_front();
  const std::shared_ptr<const sched::step_outcome> o = runner_->run(*plan);
  pipe_->on_step_done(*o, sched().now_us());
  shard_->answer(*pipe_);
}

sched::event_batch serving_loop::step() {
  if (steps_.empty()) {  // nothing out: plan (after submits, control calls, or a retry)
    retry_ = false;
    pipe_->advance();
    shard_->answer(*pipe_);
  }
  if (!steps_.empty()) run_oldest();
  return std::exchange(events_, {});
}

sched::event_batch serving_loop::synced(sched::event_batch ev) {
  // Only those out now: the ones their outcomes plan are made after the call, as they should be.
  for (size_t n = steps_.size(); n > 0 && !steps_.empty(); --n) run_oldest();
  pipe_->sync_shard();
  ev.append(std::exchange(events_, {}));
  return ev;
}

sched::event_batch serving_loop::run_until_idle(int64_t max_steps) {
  sched::event_batch all;
  for (int64_t i = 0; i < max_steps && !sched().idle(); ++i) {
    const int64_t steps_before = sched().counters().steps;
    sched::event_batch ev = step();
    const bool progress = sched().counters().steps != steps_before || !ev.empty();
    all.append(std::move(ev));
    if (!progress) break;
  }
  return all;
}

}  // namespace hart::worker
