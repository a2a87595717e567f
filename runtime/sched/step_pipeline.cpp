#include "runtime/sched/step_pipeline.h"

#include "runtime/core/log.h"

namespace hart::sched {

using namespace std::chrono_literals;

double step_pipeline::expected_exec_us(size_t batch) const {
  const auto it = decode_exec_us_by_batch_.find(batch);
  return it != decode_exec_us_by_batch_.end() ? it->second : decode_exec_us_;
}

void step_pipeline::submit(gen_request r) {
  const int64_t prompt_tokens = int64_t(r.prompt.size());
  const uint64_t id = r.id;
  if (status s = sched_->submit(std::move(r)); !s.ok()) {
    event_batch ev;
    finish_event f;
    f.request_id = id;
    f.reason = finish_reason::error;
    f.message = s.message();
    f.refused = true;
    f.code = s.code();
    f.prompt_tokens = prompt_tokens;
    ev.finishes.push_back(f);
    port_->publish(std::move(ev));
  }
  advance();
}

void step_pipeline::sync_shard() {
  cache::cache_op_batch ops = sched_->take_cache_ops();
  if (!ops.empty()) port_->send_cache_ops(std::move(ops));
}

// After the plan went to the worker, not before: waking the shard's thread on
// the step path cost ~100 µs of gap on 2 cores (perf-notes S1).
void step_pipeline::advance_from(int64_t chained_from_us, int64_t outcome_us) {
  start_next(chained_from_us, outcome_us);
  after_plan();
}

// The cache ops so far, then a request for the pages that decoding sequences
// cross into within a few steps: its answer is applied whenever it comes,
// between steps, so the step that crosses is planned within grants.
void step_pipeline::after_plan() {
  sync_shard();
  cache::reserve_request ahead = sched_->reserve_ahead();
  if (!ahead.empty()) port_->ask_reserve(std::move(ahead));
}

// A pending swap first, else the next step, if the worker is free.
void step_pipeline::start_next(int64_t chained_from_us, int64_t outcome_us) {
  if (!in_flight_.empty() || asking_ || (swap_ && swap_->running)) return;
  if (swap_) {
    swap_->running = true;
    port_->send_swap();
    return;
  }
  if (sched_->idle() || sched_->paused()) return;
  step_timing t;
  t.planned_us = sched_->now_us();
  t.chained_from_us = chained_from_us;
  t.outcome_us = outcome_us;
  std::optional<cache::slot_request> req = sched_->schedule_begin();
  if (!req) {  // within the grants the sequences hold: no shard round trip
    start_step(t, sched_->schedule_end(nullptr));
    return;
  }
  sync_shard();  // the shard must see them before the request
  asking_ = t;
  port_->ask_slots(std::move(*req));
}

void step_pipeline::on_slots(const cache::slot_grants& grants) {
  if (!asking_) return;
  step_timing t = *asking_;
  asking_.reset();
  t.with_shard = true;
  start_step(t, sched_->schedule_end(&grants));
  after_plan();
}

// The step (and, with overlap, the one after it planned ahead) to the worker,
// then the events waiting for them.
void step_pipeline::start_step(const step_timing& t, step_plan planned) {
  auto plan = std::make_shared<const step_plan>(std::move(planned));
  if (!plan->empty()) {
    send_step(t, plan);
    plan_ahead();
  }
  port_->publish(std::move(step_events_));
  step_events_ = {};
  port_->publish(sched_->take_events());
  // Everything waits on memory held by nothing that will free it soon: look again shortly.
  if (plan->empty() && !sched_->idle() && !sched_->paused() && !retry_pending_) {
    retry_pending_ = true;
    port_->retry_after(5ms);
  }
}

void step_pipeline::send_step(step_timing t, std::shared_ptr<const step_plan> plan) {
  t.sent_us = sched_->now_us();
  in_flight_.emplace_back(plan, t);
  port_->send_step(std::move(plan), t.sent_us);
}

// With overlap and one step in flight: the step after it, so the worker
// starts it as soon as it is done (scheduler::schedule_ahead).
void step_pipeline::plan_ahead() {
  if (!params_.overlap || in_flight_.size() != 1 || swap_) return;
  step_timing t;
  t.planned_us = sched_->now_us();
  step_plan next = sched_->schedule_ahead();
  if (!next.empty()) send_step(t, std::make_shared<const step_plan>(std::move(next)));
}

void step_pipeline::on_step_done(const step_outcome& o, int64_t arrived_us) {
  if (in_flight_.empty()) return;
  auto [plan, timing] = std::move(in_flight_.front());
  in_flight_.pop_front();
  timing.exec_start_us = o.exec_start_us;
  timing.exec_end_us = o.exec_end_us;
  step_events_ = apply_outcome(*plan, o, timing);
  // The next step goes to the worker before these events go out (start_step
  // publishes them; here if the plan waits for the shard or none is due). With
  // a step still in flight (planned ahead), the one after it is planned ahead now.
  if (in_flight_.empty()) {
    advance_from(o.exec_end_us, arrived_us);
  } else {
    plan_ahead();
    after_plan();
  }
  port_->publish(std::move(step_events_));
  step_events_ = {};
}

event_batch step_pipeline::apply_outcome(const step_plan& plan, const step_outcome& o,
                                         const step_timing& timing) {
  if (o.not_run && !o.pages_lost) return sched_->discard(plan);  // planned ahead of a step that failed
  if (o.not_run) {
    HART_LOG_WARN("worker lost its pages (%s): running sequences recompute",
                  o.result.get_status().message().c_str());
    stats_.count_worker_failure();
    stats_.break_chain();
    return sched_->lose_pages(plan);
  }
  event_batch ev;
  if (o.result.ok()) {
    ev = sched_->complete(plan, o.result.value());
    for (token_event& t : ev.tokens) t.produced_us = timing.exec_end_us;
  } else {
    stats_.count_worker_failure();
    ev = sched_->fail_step(plan, o.result.get_status(), o.pages_lost);
  }
  stats_.record(plan, o.result.ok(), timing, sched_->now_us());
  if (stats_.last_decode_only()) {
    const double us = double(o.exec_end_us - o.exec_start_us);
    auto smooth = [us](double& v) { v = v > 0 ? 0.75 * v + 0.25 * us : us; };
    smooth(decode_exec_us_);
    smooth(decode_exec_us_by_batch_[plan.items.size()]);
  }
  return ev;
}

void step_pipeline::on_retry() {
  retry_pending_ = false;
  advance();
}

status step_pipeline::request_swap(bool relabel) {
  if (swap_) return failed_precondition("weight swap: another swap is in progress");
  swap_ = pending_swap{relabel, false};
  advance();
  return {};
}

void step_pipeline::on_swapped(bool ok) {
  if (!swap_ || !swap_->running) return;
  // Cached prefixes hold KV of the old weights (a relabel keeps them); live sequences keep theirs.
  if (ok && !swap_->relabel) sched_->flush_cache();
  swap_.reset();
  advance();
}

}  // namespace hart::sched
