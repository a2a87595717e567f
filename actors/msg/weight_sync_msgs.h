// File: actors/msg/weight_sync_msgs.h
// Payloads between the weight-sync actor, the scheduler actor and the worker
// actor (swaps go weight sync -> scheduler -> worker and back). Immutable once
// sent; they travel as std::shared_ptr<const T> (weights are never copied).
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/weight_target.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace hart::actors {

/// Swap these weights in at the next step boundary, as `version`. Built by the
/// serving engine's weight_target (CPU or GPU); the worker's swap consumes them. No weights:
/// the serving ones are relabelled `version` (weight_target::relabel), the prefix cache kept.
struct swap_request {
  std::shared_ptr<built_weights> weights;
  uint64_t version = 0;

  bool relabel() const { return !weights; }
};

/// The answer to a swap_request (the worker swaps, the scheduler forwards it).
struct swap_outcome {
  status result;
  uint64_t serving_version = 0;  ///< after the swap (the old one when it failed)
};

/// A weight update that does not come over the sync socket (the HTTP front door's
/// /update_weights_from_disk and /update_weight_version): the weight-sync actor runs it like a
/// pushed one (one at a time, swapped at a step boundary) and calls `done` on its own thread.
struct local_update {
  /// A checkpoint directory (config.json + safetensors) to build and swap in; empty: relabel
  /// the serving weights `version` instead.
  std::string checkpoint_dir;
  /// The version to serve as; 0 = the serving version + 1.
  uint64_t version = 0;
  std::function<void(const swap_outcome&)> done;
};

}  // namespace hart::actors
