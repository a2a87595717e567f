// File: actors/worker_actor.h
// The worker actor: executes step plans on the engine, one at a time, and
// sends each step_outcome back to the plan's sender. A blocking actor on its
// own thread (style R19: an engine step blocks for milliseconds) that polls its
// mailbox for 100 µs after each step, where the next plan usually arrives. Its executor is the CPU
// worker over its own KV pages, the GPU engine over its device KV pool
// (runtime/worker/gpu_executor), or a `hart worker` process behind a
// remote_worker (the same plans over ZeroMQ); the scheduler actor cannot tell
// them apart. With no message for the executor's idle_check_ms it asks the
// executor whether its pages were lost while idle (a worker process died and
// was replaced); the next plan then comes back unexecuted with not_run and
// pages_lost, and the scheduler retracts, flushes and replans.
//
// Messages:
//   (step_atom, shared_ptr<const sched::step_plan>) -> sender gets
//       (step_done_atom, shared_ptr<const step_outcome>)
//   (swap_atom, shared_ptr<const swap_request>) -> sender gets
//       (swapped_atom, shared_ptr<const swap_outcome>); weights change between
//       two steps (the mailbox orders them), through the weight target of the
//       in-process engine (CPU or GPU); a worker process refuses them.
#pragma once

#include "actors/caf_compat.h"
#include "runtime/cache/shadow_radix.h"
#include "runtime/model/engine.h"
#include "runtime/model/weight_target.h"
#include "runtime/sched/step_executor.h"

#include <functional>
#include <memory>
#include <string>

namespace hart::actors {

struct worker_actor_params {
  /// The CPU engine the in-process CPU worker runs; outlives the actor, and
  /// only the actor's thread swaps its weights. Ignored with make_executor.
  engine* eng = nullptr;
  /// The pools the scheduler's cache shard hands pages out of (in-process KV is sized from it).
  cache::cache_config cache;
  /// Empty: the CPU worker runs in the actor's thread. Else called once, before
  /// the actor starts, for the executor of its steps (the GPU engine, a remote_worker).
  std::function<status_or<std::unique_ptr<sched::step_executor>>()> make_executor;
  /// The weights the actor swaps (only on its thread, between steps) and whose
  /// version stamps each step. Null without make_executor: `eng`'s
  /// (engine_weight_target). Null with make_executor: swaps are refused with
  /// no_swap_reason and the version served is 0 (a worker process).
  std::shared_ptr<weight_target> weights;
  /// Why a weight swap is refused (unimplemented) when there is no target, e.g.
  /// "the engine runs in a worker process (--worker-process)".
  std::string no_swap_reason = "the engine runs outside this actor";
};

/// Fails when the executor cannot be made (no memory for the pools, no worker process).
status_or<worker_actor> spawn_worker_actor(caf::actor_system& sys, const worker_actor_params& params);

}  // namespace hart::actors
