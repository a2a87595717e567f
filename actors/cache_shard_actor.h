// File: actors/cache_shard_actor.h
// The cache shard actor: one per attention data-parallel rank, it owns that
// rank's ShadowRadix index (radix tree, page allocators, locks, LRU, metrics;
// metadata only, the KV bytes live with the worker) as a cache::cache_shard
// and answers the batched per-step protocol of runtime/cache/shard_protocol.h.
// Event-based, never blocks; detached for wake-up latency (the step path
// waits on its answer: see the NOTE at the spawn).
//
// Messages (payloads immutable once sent, as std::shared_ptr<const T>):
//   (shard_plan_atom, slot_request)  -> slot_grants: pages for one step
//   (shard_reserve_atom, reserve_request) -> reserve_grants: pages ahead of need
//   (cache_ops_atom, cache_op_batch)    advance / finish / abort / flush, no answer
//   (shard_metrics_atom)             -> cache::cache_metrics
//   (shard_check_atom)               -> status: the index's invariant check
// A sender's messages are handled in order, so a slot_request or a
// reserve_request sees every cache_op_batch its scheduler sent before it.
#pragma once

#include "actors/caf_compat.h"
#include "runtime/cache/shadow_radix.h"

namespace hart::actors {

/// invalid_argument for a bad cache configuration. `rank`: the attention-DP
/// rank whose pages it indexes (logged; the scheduler addresses shards by it).
status_or<cache_shard_actor> spawn_cache_shard_actor(caf::actor_system& sys, const cache::cache_config& cfg,
                                                     int32_t rank);

}  // namespace hart::actors
