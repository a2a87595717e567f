// File: actors/scheduler_actor.h
// The scheduler actor: owns the request state machines and the batching
// policy (sched::scheduler) through the step pipeline
// (runtime/sched/step_pipeline.h, plain C++: what is sent when; this actor is
// its port and its mailbox, and the catch window's spin), asks the cache shard actor of
// each attention-DP rank (actors/cache_shard_actor) for a step's pages when
// the step needs them, plans one step at a time for the worker actor, applies
// each step's outcome (telling the shard what was computed) and streams the
// resulting events to the gateway. Event-based: it never blocks, so submits,
// aborts, stats and health are answered while the worker computes (it runs
// detached all the same, for wake-up latency: see the NOTE at the spawn).
// While it awaits a shard's grants (µs) other messages wait in its mailbox,
// so nothing changes between planning and applying the grants. Once a plan is
// out it asks the shard for the pages decoding sequences cross into next and
// applies the answer when it comes, so those crossings need no such wait.
//
// Messages:
//   gateway_actor                                the gateway (before any work)
//   (submit_atom, shared_ptr<const submit_request>), (control_atom, shared_ptr<const control_call>)
//   (swap_atom, shared_ptr<const swap_request>)  from the weight-sync actor: the
//       swap waits for the step in flight, runs on the worker, then the prefix
//       cache is flushed (its KV came from the old weights) and the sender gets
//       (swapped_atom, shared_ptr<const swap_outcome>); running requests go on
//       with the new weights, and every event carries the version that made it.
//   (step_done_atom, shared_ptr<const step_outcome>)  from the worker
//   with prefill_endpoint (docs/pd.md): (pd_atom, shared_ptr<const pd_link::pd_message>) from
//       the PD link's thread, (kv_imported_atom, transfer, shared_ptr<const status>) from the
//       worker, (pd_timeout_atom, transfer, generation) from itself; new requests go to the
//       hand-off (runtime/pd/pd_decode.h) instead of the queue, and join the running set
//       (scheduler::admit_prefilled) once their KV is in
//
// A failed step (dead worker process) ends the sequences of that step with
// reason error (no retry); the rest are retracted and recompute on the next
// worker the executor brings up (remote_worker's restart policy).
#pragma once

#include "actors/caf_compat.h"
#include "runtime/sched/scheduler.h"
#include "runtime/text/tokenizer.h"

#include <chrono>
#include <vector>

namespace hart::actors {

struct scheduler_actor_params {
  /// Resolved against the model (worker::serving_params_for).
  sched::serving_params serving;
  const tokenizer* tok = nullptr;  ///< may be null; outlives the actor
  worker_actor worker;             ///< the worker actor
  /// Cache shard actors by attention-DP rank; empty: one is spawned for rank 0
  /// (linked to the scheduler). One rank is all the policy plans for today.
  std::vector<cache_shard_actor> shards;
  uint64_t weight_version = 0;  ///< of the weights the worker starts with
  /// Plan each decode step's successor before it runs (sched::scheduler::schedule_ahead),
  /// so the worker starts it without waiting for the scheduler (--overlap-schedule).
  bool overlap = false;
  /// Spin for a decode step's outcome this long, centred on its expected end,
  /// instead of sleeping until the outcome wakes the scheduler's thread (a
  /// futex wake-up per step, tens to hundreds of µs on a VM: S1). 0 = off.
  std::chrono::microseconds catch_step{0};
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  /// Prefill/decode disaggregation (`hart serve --role decode`, docs/pd.md):
  /// new requests' prompts are computed by the prefill server here (a ZeroMQ
  /// endpoint) and their KV imported into this server's pages
  /// (runtime/pd/pd_decode.h). Empty: every prompt is computed here.
  std::string prefill_endpoint;
  /// A hand-off with no message from the prefill server this long fails (unavailable).
  int64_t prefill_timeout_ms = 30000;
  /// The worker's kv_store::layout_id: a prefill server must lay its pages out alike.
  uint64_t kv_layout = 0;
};

/// Fails when the scheduler cannot be created (bad cache or batching
/// sizes), for more than one shard (a step is not split across ranks yet),
/// or for a prefill endpoint ZeroMQ cannot connect to.
status_or<scheduler_actor> spawn_scheduler_actor(caf::actor_system& sys,
                                                 const scheduler_actor_params& params);

}  // namespace hart::actors
