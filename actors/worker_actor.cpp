#include "actors/worker_actor.h"

#include <chrono>

#include "runtime/worker/local_executor.h"

namespace hart::actors {
namespace {

int64_t steady_us() {
  return int64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                     std::chrono::steady_clock::now().time_since_epoch())
                     .count());
}

struct worker_state {
  /// The engine whose weights an in-process executor runs (swapped here only).
  engine* eng = nullptr;
  /// Runs the plans; shared only so the spawn arguments stay copyable.
  std::shared_ptr<sched::step_executor> executor;
  /// True for a worker process: it cannot take in-process weights.
  bool remote = false;

  step_outcome execute(const sched::step_plan& plan) {
    step_outcome o;
    o.weight_version = eng->weight_version();
    o.exec_start_us = steady_us();
    o.result = executor->execute(plan);
    o.exec_end_us = steady_us();
    o.pages_lost = !o.result.ok() && !executor->keeps_pages_on_failure();
    return o;
  }

  swap_outcome swap(const swap_request& r) {
    swap_outcome o;
    o.result = remote ? unimplemented("weight swap: the engine runs in a worker process (--worker-process)")
                      : eng->swap_weights(r.weights, r.version);
    o.serving_version = eng->weight_version();
    return o;
  }
};

caf::behavior worker_impl(caf::stateful_actor<worker_state>* self, engine* eng,
                          std::shared_ptr<sched::step_executor> executor, bool remote) {
  self->state.eng = eng;
  self->state.executor = std::move(executor);
  self->state.remote = remote;
  return {
      [=](step_atom, std::shared_ptr<const sched::step_plan> plan) {
        self->send(caf::actor_cast<caf::actor>(self->current_sender()), step_done_atom::value,
                   std::make_shared<const step_outcome>(self->state.execute(*plan)));
      },
      [=](swap_atom, std::shared_ptr<const swap_request> r) {
        self->send(caf::actor_cast<caf::actor>(self->current_sender()), swapped_atom::value,
                   std::make_shared<const swap_outcome>(self->state.swap(*r)));
      },
  };
}

}  // namespace

status_or<caf::actor> spawn_worker_actor(caf::actor_system& sys, const worker_actor_params& params) {
  std::shared_ptr<sched::step_executor> executor;
  if (params.make_executor) {
    HART_ASSIGN_OR_RETURN(auto ex, params.make_executor());
    executor = std::move(ex);
  } else {
    HART_ASSIGN_OR_RETURN(auto ex, sched::local_executor::create(*params.eng, params.cache));
    executor = std::move(ex);
  }
  return sys.spawn<caf::detached>(worker_impl, params.eng, std::move(executor), bool(params.make_executor));
}

}  // namespace hart::actors
