#include "runtime/worker/step_runner.h"

#include <algorithm>
#include <chrono>

namespace hart::worker {
namespace {

int64_t steady_us() {
  return int64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                     std::chrono::steady_clock::now().time_since_epoch())
                     .count());
}

}  // namespace

void step_runner::check_idle() {
  std::string why;
  if (executor_->check_idle(&why) && lost_idle_.empty())
    lost_idle_ = why.empty() ? "worker lost while idle" : why;
}

std::shared_ptr<const sched::step_outcome> step_runner::run(const sched::step_plan& plan,
                                                            uint64_t weight_version) {
  last_ = std::make_shared<const sched::step_outcome>(execute(plan, weight_version));
  return last_;
}

sched::step_outcome step_runner::execute(const sched::step_plan& plan, uint64_t weight_version) {
  sched::step_outcome o;
  o.weight_version = weight_version;
  o.exec_start_us = steady_us();
  if (!lost_idle_.empty()) {
    o.exec_end_us = o.exec_start_us;
    o.result =
        status(status_code::unavailable, lost_idle_ + "; step " + std::to_string(plan.step) + " not run");
    o.pages_lost = true;
    o.not_run = true;
    lost_idle_.clear();
    return o;
  }
  // A step planned ahead feeds the tokens this worker just sampled.
  const bool ahead = std::any_of(plan.items.begin(), plan.items.end(),
                                 [](const sched::step_item& it) { return it.feed_last_sampled; });
  if (ahead) {
    sched::step_plan filled = plan;
    const status st = last_ && last_->result.ok()
                          ? sched::fill_planned_ahead(filled, last_->result.value())
                          : status(status_code::unavailable, "the step before failed");
    if (!st.ok()) {  // the step before failed or did not run: this one is handed back unrun
      o.exec_end_us = o.exec_start_us;
      o.result = st;
      o.not_run = true;
      o.pages_lost = last_ && last_->pages_lost;
      return o;
    }
    o.result = executor_->execute(filled);
  } else {
    o.result = executor_->execute(plan);
  }
  o.exec_end_us = steady_us();
  o.pages_lost = !o.result.ok() && !executor_->keeps_pages_on_failure();
  return o;
}

}  // namespace hart::worker
