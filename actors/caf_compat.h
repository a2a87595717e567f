// File: actors/caf_compat.h
// The one place hart touches CAF 0.17's dialect (style R18): includes, atoms,
// the actors' typed interfaces and the unsafe (shared_ptr, never serialized)
// message types. Moving to CAF
// 0.18+ changes this header, not the actors.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <caf/all.hpp>
#pragma GCC diagnostic pop

#include "actors/msg/serve_msgs.h"
#include "actors/msg/step_msgs.h"
#include "actors/msg/weight_sync_msgs.h"
#include "runtime/cache/shard_protocol.h"
#include "runtime/pd/pd_decode.h"
#include "runtime/pd_link/pd_messages.h"
#include "runtime/weight_sync/sync_server.h"

namespace hart::actors {

using submit_atom = caf::atom_constant<caf::atom("submit")>;    // gateway -> scheduler: a generation
using control_atom = caf::atom_constant<caf::atom("control")>;  // gateway -> scheduler: a control verb
using events_atom = caf::atom_constant<caf::atom("events")>;    // scheduler -> gateway: token/finish events
using reply_atom = caf::atom_constant<caf::atom("reply")>;      // scheduler -> gateway: a control reply
using inbound_atom = caf::atom_constant<caf::atom("inbound")>;  // transport -> gateway: a decoded request
using sync_atom = caf::atom_constant<caf::atom("wsync")>;  // sync socket -> weight sync: a decoded message
using local_update_atom =
    caf::atom_constant<caf::atom("wlocal")>;  // HTTP -> weight sync: a checkpoint or a relabel
// weight sync -> scheduler -> worker: swap at a step boundary; swapped: the outcome, back the same way
using swap_atom = caf::atom_constant<caf::atom("swap")>;
using swapped_atom = caf::atom_constant<caf::atom("swapped")>;
using step_atom = caf::atom_constant<caf::atom("step")>;           // scheduler -> worker: run a step_plan
using step_done_atom = caf::atom_constant<caf::atom("stepdone")>;  // worker -> scheduler: its step_outcome
using retry_atom =
    caf::atom_constant<caf::atom("retry")>;  // scheduler -> itself: plan again (memory was short)
using catch_atom =
    caf::atom_constant<caf::atom("catch")>;  // scheduler -> itself: a decode step ends soon, spin for it
// scheduler -> cache shard (runtime/cache/shard_protocol.h): a step's slot_request (answered with
// slot_grants), pages ahead of need (reserve_request, answered with reserve_grants), cache ops
// (no answer), metrics and the invariant check
using shard_plan_atom = caf::atom_constant<caf::atom("shardplan")>;
using shard_reserve_atom = caf::atom_constant<caf::atom("shardresv")>;
using cache_ops_atom = caf::atom_constant<caf::atom("cacheops")>;
using shard_metrics_atom = caf::atom_constant<caf::atom("shardstat")>;
using shard_check_atom = caf::atom_constant<caf::atom("shardchk")>;
// Prefill/decode disaggregation, on the decode server (runtime/pd/pd_decode.h): pages for a
// prompt whose KV comes from a prefill server (scheduler -> shard, answered); a chunk into
// them (scheduler -> worker) and its outcome (worker -> scheduler: transfer id, status); a
// message from the prefill server (its link's thread -> scheduler); a transfer's timeout
// (scheduler -> itself: transfer id, generation)
using shard_prefill_atom = caf::atom_constant<caf::atom("shardpfill")>;
using kv_import_atom = caf::atom_constant<caf::atom("kvimport")>;
using kv_imported_atom = caf::atom_constant<caf::atom("kvimported")>;
using pd_atom = caf::atom_constant<caf::atom("pdmsg")>;
using pd_timeout_atom = caf::atom_constant<caf::atom("pdtimeout")>;

// -- interfaces: every long-lived actor is one of these handles, so a message
// an actor does not take is a compile error at the sender --------------------

/// Decoded client requests in; the scheduler's events and control replies out to clients.
using gateway_actor =
    caf::typed_actor<caf::reacts_to<inbound_atom, std::shared_ptr<const inbound_request>>,
                     caf::reacts_to<events_atom, std::shared_ptr<const sched::event_batch>, uint64_t>,
                     caf::reacts_to<reply_atom, std::shared_ptr<const addressed_reply>>>;

/// Runs step plans and weight swaps; answers the sender with step_done / swapped.
using worker_actor = caf::typed_actor<caf::reacts_to<step_atom, std::shared_ptr<const sched::step_plan>>,
                                      caf::reacts_to<swap_atom, std::shared_ptr<const swap_request>>,
                                      caf::reacts_to<kv_import_atom, std::shared_ptr<const pd::kv_import>>>;

/// One attention-DP rank's page index: a step's pages and pages ahead (answered), what was
/// computed, metrics, invariants.
using cache_shard_actor =
    caf::typed_actor<caf::replies_to<shard_plan_atom, std::shared_ptr<const cache::slot_request>>::with<
                         std::shared_ptr<const cache::slot_grants>>,
                     caf::replies_to<shard_reserve_atom, std::shared_ptr<const cache::reserve_request>>::with<
                         std::shared_ptr<const cache::reserve_grants>>,
                     caf::reacts_to<cache_ops_atom, std::shared_ptr<const cache::cache_op_batch>>,
                     caf::replies_to<shard_metrics_atom>::with<std::shared_ptr<const cache::cache_metrics>>,
                     caf::replies_to<shard_check_atom>::with<std::shared_ptr<const status>>,
                     caf::replies_to<shard_prefill_atom, std::shared_ptr<const cache::prefill_reservation>>::
                         with<std::shared_ptr<const cache::prefill_reserved>>>;

/// Staged weight updates in (from the sync socket), local ones (a checkpoint directory, a
/// relabel); the scheduler's swap outcome back.
using weight_sync_actor =
    caf::typed_actor<caf::reacts_to<sync_atom, std::shared_ptr<const weight_sync::inbound_sync>>,
                     caf::reacts_to<local_update_atom, std::shared_ptr<const local_update>>,
                     caf::reacts_to<swapped_atom, std::shared_ptr<const swap_outcome>>>;

/// Requests and control verbs from the gateway, swaps from the weight-sync
/// actor, step outcomes and swap outcomes from the worker.
using scheduler_actor =
    caf::typed_actor<caf::reacts_to<gateway_actor>,
                     caf::reacts_to<submit_atom, std::shared_ptr<const submit_request>>,
                     caf::reacts_to<control_atom, std::shared_ptr<const control_call>>,
                     caf::reacts_to<swap_atom, std::shared_ptr<const swap_request>>,
                     caf::reacts_to<swapped_atom, std::shared_ptr<const swap_outcome>>,
                     caf::reacts_to<step_done_atom, std::shared_ptr<const step_outcome>>,
                     caf::reacts_to<retry_atom>, caf::reacts_to<catch_atom, uint64_t>,
                     caf::reacts_to<kv_imported_atom, uint64_t, std::shared_ptr<const status>>,
                     caf::reacts_to<pd_atom, std::shared_ptr<const pd_link::pd_message>>,
                     caf::reacts_to<pd_timeout_atom, uint64_t, uint64_t>>;

/// A blocking actor (worker, weight sync) behind its interface: CAF 0.17 spawns
/// blocking actors untyped and cannot check their receive loops, so this cast
/// is where the loop's handlers and the interface are declared to agree.
template <class Handle>
Handle typed_handle(caf::actor a) {
  return caf::actor_cast<Handle>(std::move(a));
}

}  // namespace hart::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::inbound_request>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::submit_request>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::control_call>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::sched::event_batch>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::addressed_reply>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::weight_sync::inbound_sync>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::swap_request>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::swap_outcome>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::local_update>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::sched::step_plan>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::actors::step_outcome>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::cache::slot_request>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::cache::slot_grants>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::cache::reserve_request>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::cache::reserve_grants>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::cache::cache_op_batch>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::cache::cache_metrics>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::status>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::cache::prefill_reservation>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::cache::prefill_reserved>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::pd::kv_import>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const hart::pd_link::pd_message>)
