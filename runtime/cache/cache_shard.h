// File: runtime/cache/cache_shard.h
// One cache shard: the ShadowRadix index of one attention data-parallel rank
// (radix tree, page allocators, locks, LRU, metrics) answering the batched
// per-step protocol of shard_protocol.h. Metadata only; the KV bytes live with
// the worker. No CAF: actors/cache_shard_actor wraps it; sched::in_process_shard
// answers a step pipeline with it in process (serving_loop, tests). Not thread-safe.
//
//   cache_shard shard(cfg);                 // cfg validated
//   shard.apply(ops);
//   slot_grants g = shard.plan(request);
//   reserve_grants r = shard.reserve(ahead);
#pragma once

#include "runtime/cache/shadow_radix.h"
#include "runtime/cache/shard_protocol.h"

namespace hart::cache {

class cache_shard {
 public:
  explicit cache_shard(const cache_config& cfg) : index_(cfg) {}

  /// Reserves, preempts and admits for one step, in the request's order:
  ///   1. running sequences, best first, while the budget lasts: each gets
  ///      min(n_remaining, prefill_chunk, budget) tokens; when the pool runs
  ///      dry the worst ungranted running sequence after it is preempted, or
  ///      it is itself (it fails when it alone cannot fit);
  ///   2. waiting sequences, best first (those preempted in step 1 among
  ///      them, at their place), while budget and max_running last: admitted
  ///      (prefix match) with their first chunk reserved; the first that does
  ///      not fit stops admission while anything runs (FCFS).
  slot_grants plan(const slot_request& req);
  /// Pages ahead of need: each reservation the pools can serve without
  /// preempting is made and answered with its page tables; the others are
  /// left as they were (memory is short: the step asks with plan()).
  reserve_grants reserve(const reserve_request& req);
  /// Applies the ops in order. An op the index refuses is a broken invariant
  /// between scheduler and shard (HART_CHECK).
  void apply(const cache_op_batch& ops);
  /// A cache request holding pages for a sequence whose KV is imported
  /// (prefill/decode disaggregation): admitted (prefix matched) and reserved
  /// for r.n_tokens positions, never by preempting; on failure nothing is
  /// held. Its pages are released with an abort op, or it is advanced like
  /// any running request once the KV is in.
  prefill_reserved reserve_prefilled(const prefill_reservation& r);

  status check() const { return index_.check(); }
  cache_metrics metrics() const { return index_.metrics(); }
  /// The index itself, for in-process callers' tests and checks.
  shadow_radix& index() { return index_; }

 private:
  shadow_radix index_;
};

}  // namespace hart::cache
