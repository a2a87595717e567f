// File: actors/msg/step_msgs.h
// Payloads between the scheduler actor and the worker actor. The plan itself
// travels as std::shared_ptr<const sched::step_plan>; these are immutable once
// sent (ecosystem.md §2.3).
#pragma once

#include "runtime/sched/step_pipeline.h"

#include <cstdint>

namespace hart::actors {

/// What executing one step_plan came to (defined with the step pipeline that consumes it).
using step_outcome = sched::step_outcome;

}  // namespace hart::actors
