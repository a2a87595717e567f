// File: actors/msg/step_msgs.h
// Payloads between the scheduler actor and the worker actor. The plan itself
// travels as std::shared_ptr<const sched::step_plan>; these are immutable once
// sent (ecosystem.md §2.3).
#pragma once

#include <cstdint>

#include "runtime/sched/step.h"

namespace hart::actors {

/// What executing one step_plan came to.
struct step_outcome {
  /// Not ok: the executor itself failed (a dead or silent worker process).
  status_or<sched::step_result> result = status(status_code::internal, "unset");
  /// The executor's KV died with it (a worker process): the scheduler retracts and flushes.
  bool pages_lost = false;
  /// The plan was handed back unexecuted because the pages were lost while
  /// the worker was idle (pages_lost is set): nothing fails, the scheduler
  /// retracts, flushes and plans again.
  bool not_run = false;
  int64_t exec_start_us = 0, exec_end_us = 0;  // steady clock, as sched::scheduler::now_us
  uint64_t weight_version = 0;                 // the weights that ran it
};

}  // namespace hart::actors
