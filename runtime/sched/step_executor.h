// File: runtime/sched/step_executor.h
// Whatever runs a step_plan: an engine in this process (engine_executor, over
// the CPU or the GPU engine) or a worker process behind remote_worker
// (runtime/worker_link). An error status means the executor itself failed (the
// worker process died, timed out, could not be started): the scheduler then
// ends every sequence of the plan with reason `error` (scheduler::fail_step).
// A model-level failure (a bad token id) is an ok step_result with
// result.error set, as engine_executor reports it.
#pragma once

#include "runtime/core/status.h"
#include "runtime/sched/step.h"

#include <cstdint>
#include <string>

namespace hart::sched {

class step_executor {
 public:
  virtual ~step_executor() = default;
  virtual status_or<step_result> execute(const step_plan& plan) = 0;
  /// True when the executor's KV pages outlive a failed execute (in-process);
  /// false when a failure loses them (a worker process: a new one starts empty).
  virtual bool keeps_pages_on_failure() const { return true; }
  /// How often the worker actor calls check_idle() while no step runs, in ms;
  /// 0: never (in-process executors cannot die alone).
  virtual int64_t idle_check_ms() const { return 0; }
  /// Between steps: true when the KV pages were lost since the last step
  /// (a worker process died while idle); the executor has then tried to
  /// replace itself, and its next execute() runs on empty pages or fails.
  /// `why` says what happened.
  virtual bool check_idle(std::string* why) {
    (void)why;
    return false;
  }
};

}  // namespace hart::sched
