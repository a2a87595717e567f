// File: actors/engine_actor.h
// The engine actor: a detached actor (it blocks in engine steps) that owns the
// serving loop — scheduler, ShadowRadix cache shard and CPU worker — for one
// engine. It takes submit/control messages, steps while there is work, and
// pushes every step's events to the gateway.
//
// NOTE(hart): scheduler, cache shard and worker are one actor for now; the
// step_plan/step_result boundary (runtime/sched/step.h) is where they split
// into separate actors and `hart worker` processes.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "actors/caf_compat.h"
#include "runtime/model/engine.h"
#include "runtime/text/tokenizer.h"
#include "runtime/worker/serving_loop.h"

namespace hart::actors {

struct engine_actor_params {
  engine* eng = nullptr;              // outlives the actor; only the actor's thread swaps its weights
  const tokenizer* tok = nullptr;     // may be null
  sched::serving_params serving;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  /// Empty: the CPU worker runs in the actor's thread. Else called once, before
  /// the actor starts, for the executor of its steps (a remote_worker).
  std::function<status_or<std::unique_ptr<sched::step_executor>>()> make_executor;
};

/// Spawns the engine actor; send it the gateway's handle (a caf::actor) before any work.
/// Besides submit/control it takes (swap_atom, swap_request) and answers the
/// sender with (swapped_atom, swap_outcome): the weights change between two
/// steps, the prefix cache is flushed (its KV came from the old weights), and
/// running requests go on with the new weights; events carry the version of
/// the weights that produced them.
/// Fails when the serving loop cannot be created (bad cache sizes).
status_or<caf::actor> spawn_engine_actor(caf::actor_system& sys, const engine_actor_params& params);

}  // namespace hart::actors
