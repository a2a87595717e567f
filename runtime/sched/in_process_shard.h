// File: runtime/sched/in_process_shard.h
// A cache shard in this process behind a step_pipeline's port: cache ops are
// applied as they come, each ask is answered at once but delivered only by
// answer(), in the order asked, as the shard actor's replies reach the
// scheduler actor's mailbox. The single-thread serving_loop and the tests
// that drive a pipeline by hand use it.
//
//   void send_cache_ops(cache::cache_op_batch ops) override { shard_.apply(ops); }
//   void ask_slots(cache::slot_request r) override { shard_.ask_slots(r); }
//   void ask_reserve(cache::reserve_request r) override { shard_.ask_reserve(r); }
//   ...  shard_.answer(pipeline);     // from the caller's loop, never from inside a pipeline call
#pragma once

#include "runtime/cache/cache_shard.h"
#include "runtime/core/check.h"
#include "runtime/sched/step_pipeline.h"

#include <deque>
#include <optional>

namespace hart::sched {

class in_process_shard {
 public:
  explicit in_process_shard(const cache::cache_config& cfg) : shard_(cfg) {}

  void apply(const cache::cache_op_batch& ops) { shard_.apply(ops); }
  void ask_slots(const cache::slot_request& req) {
    HART_CHECK(!slots_) << "a second slot request before the first was answered";
    slots_ = shard_.plan(req);
  }
  void ask_reserve(const cache::reserve_request& req) { reserved_.push_back(shard_.reserve(req)); }

  /// Answers waiting for delivery.
  bool pending() const { return slots_.has_value() || !reserved_.empty(); }
  /// Delivers every answer to `pipe`, in the order asked (a slot answer may send a step).
  void answer(step_pipeline& pipe) {
    while (pending()) {
      if (slots_) {
        const cache::slot_grants g = std::move(*slots_);
        slots_.reset();
        pipe.on_slots(g);
      } else {
        const cache::reserve_grants g = std::move(reserved_.front());
        reserved_.pop_front();
        pipe.on_reserved(g);
      }
    }
  }

  status check() const { return shard_.check(); }
  cache::cache_metrics metrics() const { return shard_.metrics(); }
  cache::shadow_radix& index() { return shard_.index(); }

 private:
  cache::cache_shard shard_;
  std::optional<cache::slot_grants> slots_;  // answered, not delivered yet
  std::deque<cache::reserve_grants> reserved_;
};

}  // namespace hart::sched
