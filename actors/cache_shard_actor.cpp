#include "actors/cache_shard_actor.h"

#include "runtime/cache/cache_shard.h"
#include "runtime/core/log.h"

#include <memory>

namespace hart::actors {
namespace {

struct cache_shard_state {
  /// The rank's index and the protocol's logic; mutated only here.
  std::unique_ptr<cache::cache_shard> shard;
  /// The attention-DP rank it serves.
  int32_t rank = 0;

  std::shared_ptr<const cache::slot_grants> plan(const cache::slot_request& r) {
    return std::make_shared<const cache::slot_grants>(shard->plan(r));
  }
  std::shared_ptr<const cache::reserve_grants> reserve(const cache::reserve_request& r) {
    return std::make_shared<const cache::reserve_grants>(shard->reserve(r));
  }
  std::shared_ptr<const cache::cache_metrics> metrics() const {
    return std::make_shared<const cache::cache_metrics>(shard->metrics());
  }
  std::shared_ptr<const status> check() const { return std::make_shared<const status>(shard->check()); }
};

cache_shard_actor::behavior_type cache_shard_impl(cache_shard_actor::stateful_pointer<cache_shard_state> self,
                                                  cache::cache_config cfg, int32_t rank) {
  self->state.shard = std::make_unique<cache::cache_shard>(cfg);
  self->state.rank = rank;
  HART_LOG_DEBUG("rank %d: %lld full + %lld SWA pages of %lld tokens", rank, (long long)cfg.n_full_pages,
                 (long long)cfg.n_swa_pages, (long long)cfg.page_size);
  return {
      [=](shard_plan_atom, std::shared_ptr<const cache::slot_request> r) { return self->state.plan(*r); },
      [=](shard_reserve_atom, std::shared_ptr<const cache::reserve_request> r) {
        return self->state.reserve(*r);
      },
      [=](cache_ops_atom, std::shared_ptr<const cache::cache_op_batch> ops) {
        self->state.shard->apply(*ops);
      },
      [=](shard_metrics_atom) { return self->state.metrics(); },
      [=](shard_check_atom) { return self->state.check(); },
      [=](shard_prefill_atom, std::shared_ptr<const cache::prefill_reservation> r) {
        return std::make_shared<const cache::prefill_reserved>(self->state.shard->reserve_prefilled(*r));
      },
  };
}

}  // namespace

status_or<cache_shard_actor> spawn_cache_shard_actor(caf::actor_system& sys, const cache::cache_config& cfg,
                                                     int32_t rank) {
  HART_RETURN_IF_ERROR(cfg.validate());
  // NOTE(hart): detached although it never blocks: a step that needs pages
  // waits for its answer, and its own thread wakes on the mailbox's condition
  // variable at once, whatever the pool is doing (perf-notes S1).
  return sys.spawn<caf::detached>(cache_shard_impl, cfg, rank);
}

}  // namespace hart::actors
