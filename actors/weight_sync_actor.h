// File: actors/weight_sync_actor.h
// The weight-sync actor: a detached actor (building weights blocks for
// seconds) that owns the staging of one update from the weight-sync socket
// (runtime/weight_sync) or runs a local one (a checkpoint directory, a version
// relabel: local_update, from the HTTP front door), builds and re-quantizes the new weights off the
// serving path, asks the scheduler actor to swap them in at a step boundary, and
// answers the trainer. A broken update (bad chunk, checksum mismatch, missing
// tensor, a new begin, no message for `idle_timeout`) is dropped and its
// staging freed; the serving weights never change then. Chunks broadcast by
// NCCL are received in the actor (each wait bounded by `idle_timeout`); the
// NCCL group outlives a successful update for the trainer's next one and is
// aborted with a failed one.
#pragma once

#include "actors/caf_compat.h"
#include "runtime/model/config.h"
#include "runtime/model/weight_target.h"
#include "runtime/weight_sync/staging.h"
#include "runtime/weight_sync/sync_server.h"

#include <chrono>
#include <memory>

namespace hart::actors {

struct weight_sync_actor_params {
  /// Builds the weights (thread-safe) with the engine that serves: the CPU engine, or
  /// the GPU engine of the in-process GPU executor. The worker swaps them through the same target.
  std::shared_ptr<weight_target> target;
  scheduler_actor engine_actor;  ///< swaps them in between steps, on the worker
  /// Replies to pushes go here; null when there is no sync socket (local updates only).
  std::shared_ptr<weight_sync::sync_server> server;
  /// The served model's config: a checkpoint directory given to a local update must match it.
  model_config serving_config;
  weight_sync::staging_limits limits;
  /// A staged update that receives nothing for this long is dropped (a trainer that died mid-push).
  std::chrono::milliseconds idle_timeout{60000};
  /// Longest wait for the scheduler to reach a step boundary and swap.
  std::chrono::milliseconds swap_timeout{600000};
  /// Where chunks broadcast by NCCL are received (then copied to the host staging): the GPU
  /// engine's device (gpu_engine_params::device). The trainer must be on another GPU.
  int cuda_device = 0;
};

/// Spawns the actor; the sync socket feeds it (sync_atom, std::shared_ptr<const weight_sync::inbound_sync>).
weight_sync_actor spawn_weight_sync_actor(caf::actor_system& sys, const weight_sync_actor_params& params);

}  // namespace hart::actors
