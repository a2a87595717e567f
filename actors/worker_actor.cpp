#include "actors/worker_actor.h"

#include "runtime/model/kv_transfer.h"
#include "runtime/worker/engine_executor.h"
#include "runtime/worker/step_runner.h"

#include <chrono>

namespace hart::actors {
namespace {

struct worker_state {
  /// The weights of the engine the executor runs (swapped here only); null
  /// when the model runs elsewhere (a worker process).
  std::shared_ptr<weight_target> weights;
  /// Runs the plans; shared only so the spawn arguments stay copyable.
  std::shared_ptr<sched::step_executor> executor;
  /// Why swaps are refused when there is no weight target.
  std::string no_swap_reason;
  /// Runs the plans on `executor` (fills plans made ahead, hands back those it cannot run).
  std::unique_ptr<worker::step_runner> runner;

  uint64_t weight_version() const { return weights ? weights->version() : 0; }

  /// A chunk of a prefill/decode hand-off into its reserved pages, between two steps.
  status import(const pd::kv_import& c) {
    auto* cpu = dynamic_cast<worker::engine_executor*>(executor.get());
    if (!cpu || !cpu->cpu_store())
      return unimplemented("kv import: only the CPU engine in the server's process takes imported KV");
    return kv_pages_import(c.kv, *cpu->cpu_store(), c.full, c.swa);
  }

  swap_outcome swap(const swap_request& r) {
    swap_outcome o;
    if (!weights) {
      o.result = unimplemented("weight swap: %s", no_swap_reason.c_str());
    } else {
      o.result = r.relabel() ? weights->relabel(r.version) : weights->swap(r.weights, r.version);
    }
    o.serving_version = weight_version();
    return o;
  }
};

// NOTE(hart): a blocking actor so that it can poll its mailbox for a short
// while after each step: the next plan usually arrives tens of µs after the
// outcome leaves, and catching it without a futex wake-up is part of the S1
// budget (docs/perf-notes.md S1 v6).
constexpr auto k_plan_poll = std::chrono::microseconds(100);

/// How long an idle worker with an executor that needs no idle checks sleeps in receive.
constexpr auto k_no_idle_check = std::chrono::hours(1);

void worker_loop(caf::blocking_actor* self, std::shared_ptr<worker_state> st) {
  bool running = true;
  bool stepped = false;
  // NOTE(hart): the idle check is a receive timeout, so it runs only after
  // idle_check_ms without a message: steps back to back never pay for it.
  const int64_t check_ms = st->executor->idle_check_ms();
  const std::chrono::milliseconds idle_wait =
      check_ms > 0 ? std::chrono::milliseconds(check_ms)
                   : std::chrono::duration_cast<std::chrono::milliseconds>(k_no_idle_check);
  while (running) {
    if (stepped) {
      const auto until = std::chrono::steady_clock::now() + k_plan_poll;
      while (!self->has_next_message() && std::chrono::steady_clock::now() < until) {
      }
      stepped = false;
    }
    self->receive(
        [&](step_atom, std::shared_ptr<const sched::step_plan> plan) {
          self->send(caf::actor_cast<scheduler_actor>(self->current_sender()), step_done_atom::value,
                     st->runner->run(*plan, st->weight_version()));
          stepped = true;
        },
        [&](swap_atom, std::shared_ptr<const swap_request> r) {
          self->send(caf::actor_cast<scheduler_actor>(self->current_sender()), swapped_atom::value,
                     std::make_shared<const swap_outcome>(st->swap(*r)));
        },
        [&](kv_import_atom, std::shared_ptr<const pd::kv_import> c) {
          self->send(caf::actor_cast<scheduler_actor>(self->current_sender()), kv_imported_atom::value,
                     c->transfer_id, std::make_shared<const status>(st->import(*c)));
        },
        [&](caf::exit_msg& m) {
          running = false;
          self->fail_state(m.reason);
        },
        caf::after(idle_wait) >>
            [&] {
              if (check_ms > 0) st->runner->check_idle();
            });
  }
}

}  // namespace

status_or<worker_actor> spawn_worker_actor(caf::actor_system& sys, const worker_actor_params& params) {
  std::shared_ptr<sched::step_executor> executor;
  if (params.make_executor) {
    HART_ASSIGN_OR_RETURN(auto ex, params.make_executor());
    executor = std::move(ex);
  } else {
    if (!params.eng) return invalid_argument("worker actor: neither an engine nor an executor factory");
    HART_ASSIGN_OR_RETURN(auto ex, worker::engine_executor::on_cpu(*params.eng, params.cache));
    executor = std::move(ex);
  }
  auto st = std::make_shared<worker_state>();
  st->weights = params.weights;
  if (!st->weights && !params.make_executor) st->weights = engine_weight_target(*params.eng);
  st->executor = std::move(executor);
  st->runner = std::make_unique<worker::step_runner>(st->executor.get());
  st->no_swap_reason = params.no_swap_reason;
  return typed_handle<worker_actor>(sys.spawn<caf::detached>(worker_loop, std::move(st)));
}

}  // namespace hart::actors
