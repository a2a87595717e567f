// File: actors/msg/weight_sync_msgs.h
// Payloads between the weight-sync actor, the scheduler actor and the worker
// actor (swaps go weight sync -> scheduler -> worker and back). Immutable once
// sent; they travel as std::shared_ptr<const T> (weights are never copied).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/core/status.h"
#include "runtime/model/weight_target.h"

namespace hart::actors {

/// Swap these weights in at the next step boundary, as `version`. Built by the
/// serving engine's weight_target (CPU or GPU); the worker's swap consumes them.
struct swap_request {
  std::shared_ptr<built_weights> weights;
  uint64_t version = 0;
};

/// The answer to a swap_request (the worker swaps, the scheduler forwards it).
struct swap_outcome {
  status result;
  uint64_t serving_version = 0;  ///< after the swap (the old one when it failed)
};

}  // namespace hart::actors
