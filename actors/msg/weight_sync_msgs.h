// File: actors/msg/weight_sync_msgs.h
// Payloads between the weight-sync actor and the engine actor. Immutable once
// sent; they travel as std::shared_ptr<const T> (weights are never copied).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/core/status.h"
#include "runtime/model/weights.h"

namespace hart::actors {

/// Swap these weights in at the next step boundary, as `version`.
struct swap_request {
  std::shared_ptr<const model_weights> weights;
  uint64_t version = 0;
};

/// The engine actor's answer to a swap_request.
struct swap_outcome {
  status result;
  uint64_t serving_version = 0;  ///< after the swap (the old one when it failed)
};

}  // namespace hart::actors
