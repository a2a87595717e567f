// File: runtime/sched/step_pipeline.h
// The step path of a scheduler whose worker and cache shard are reached by
// message (the scheduler actor, actors/scheduler_actor.cpp): which plans are
// in flight (one, or two with overlap scheduling), when the next one is
// planned, a weight swap held to the next step boundary, a retry when every
// request waits on memory, and the order in which plans, cache changes and
// events leave, what a failed worker means for its sequences, and the step
// statistics. Plain C++ over the scheduler (no threads, no CAF): every message
// it sends goes through a pipeline_port, and every answer comes back through
// one call, so a test drives it with a port that records. Requests and
// control calls go to sched() (then advance()).
//
//   step_pipeline p(std::move(sched), {/*overlap=*/true});   // scheduler::create
//   p.attach(&port);
//   p.submit(req);                          // plans and sends a step through the port
//   p.on_step_done(outcome);                // applies it, sends the next, publishes the events
//   p.on_slots(&grants);                    // the shard's answer to port.ask_slots
#pragma once

#include "runtime/cache/shard_protocol.h"
#include "runtime/core/status.h"
#include "runtime/sched/scheduler.h"
#include "runtime/sched/step.h"
#include "runtime/sched/step_stats.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

namespace hart::sched {

/// What executing one step_plan came to (a worker's answer).
struct step_outcome {
  /// Not ok: the executor itself failed (a dead or silent worker process).
  status_or<step_result> result = status(status_code::internal, "unset");
  /// The executor's KV died with it (a worker process): the scheduler retracts and flushes.
  bool pages_lost = false;
  /// The plan was handed back unexecuted because the pages were lost while
  /// the worker was idle (pages_lost is set): nothing fails, the scheduler
  /// retracts, flushes and plans again.
  bool not_run = false;
  int64_t exec_start_us = 0, exec_end_us = 0;  // steady clock, as scheduler::now_us
  uint64_t weight_version = 0;                 // the weights that ran it
};

/// Everything the pipeline sends. Calls come from inside the pipeline's own
/// calls; an answer (on_slots, on_reserved, on_step_done, on_swapped,
/// on_retry) must come later, from the caller's loop, never from inside one.
class pipeline_port {
 public:
  virtual ~pipeline_port() = default;
  /// The plan to the worker (its outcome: on_step_done, in the order sent).
  virtual void send_step(std::shared_ptr<const step_plan> plan, int64_t sent_us) = 0;
  /// The pending swap to the worker (its outcome: on_swapped).
  virtual void send_swap() = 0;
  /// Cache changes to the shard, in order, before anything that must see them.
  virtual void send_cache_ops(cache::cache_op_batch ops) = 0;
  /// Slots for the step being planned; nothing else may reach the pipeline
  /// until on_slots answers (planning waits on the shard).
  virtual void ask_slots(cache::slot_request req) = 0;
  /// Pages ahead of need; on_reserved whenever the answer comes.
  virtual void ask_reserve(cache::reserve_request req) = 0;
  /// Token and finish events for the clients.
  virtual void publish(event_batch ev) = 0;
  /// Call on_retry after `delay`.
  virtual void retry_after(std::chrono::milliseconds delay) = 0;
};

struct step_pipeline_params {
  /// Plan each decode step's successor before it runs (scheduler::schedule_ahead).
  bool overlap = false;
};

class step_pipeline {
 public:
  /// `sched` (scheduler::create) reaches its shard through the port.
  step_pipeline(std::unique_ptr<scheduler> sched, step_pipeline_params params)
      : sched_(std::move(sched)), params_(params) {}
  /// Overlap on or off, between steps.
  void set_overlap(bool on) { params_.overlap = on; }
  /// Where it sends, before any other call (the actor's state, once it exists); outlives the pipeline.
  void attach(pipeline_port* port) { port_ = port; }

  /// A request; one refused before it starts is published as a refused error
  /// finish (protocol §5.1). Then the worker gets work if it is free.
  void submit(gen_request r);
  /// After any change from outside (a control verb): the next step if the worker is free.
  void advance() { advance_from(0, 0); }
  /// The shard's answer to ask_slots: the step is planned and sent.
  void on_slots(const cache::slot_grants& grants);
  /// The shard's answer to ask_reserve.
  void on_reserved(const cache::reserve_grants& grants) { sched_->apply_reserved(grants); }
  /// The worker's answer to the oldest plan in flight; `arrived_us` when it reached the caller.
  void on_step_done(const step_outcome& o, int64_t arrived_us);
  void on_retry();

  /// A weight swap for the next step boundary; failed_precondition while
  /// another is pending or running. `relabel`: the weights stay, only their
  /// version changes (the prefix cache is kept).
  status request_swap(bool relabel);
  /// The worker swapped (or failed to); the pipeline goes on. A swap of new
  /// weights flushes the prefix cache (its KV came from the old ones).
  void on_swapped(bool ok);

  /// The cache changes made so far to the shard (before asking it anything
  /// that must see them: its metrics).
  void sync_shard();

  scheduler& sched() { return *sched_; }
  const scheduler& sched() const { return *sched_; }
  /// The step statistics with the shard's metrics.
  serving_stats stats(const cache::cache_metrics& cache) const { return stats_.stats(*sched_, cache); }
  /// The last applied step fed one token per sequence (a decode step).
  bool last_step_decode_only() const { return stats_.last_decode_only(); }
  size_t in_flight() const { return in_flight_.size(); }
  /// Smoothed execution time of a decode step of `batch` sequences (µs; 0: none seen).
  double expected_exec_us(size_t batch) const;

 private:
  void advance_from(int64_t chained_from_us, int64_t outcome_us);
  void start_next(int64_t chained_from_us, int64_t outcome_us);
  void start_step(const step_timing& t, step_plan planned);
  void send_step(step_timing t, std::shared_ptr<const step_plan> plan);
  void plan_ahead();
  void after_plan();

  /// The outcome of `plan` (the oldest in flight) applied to the scheduler and the statistics.
  event_batch apply_outcome(const step_plan& plan, const step_outcome& o, const step_timing& timing);

  std::unique_ptr<scheduler> sched_;
  step_stats stats_;
  step_pipeline_params params_;
  pipeline_port* port_ = nullptr;
  /// Plans sent and not answered, oldest first, with their timing.
  std::deque<std::pair<std::shared_ptr<const step_plan>, step_timing>> in_flight_;
  /// The step whose slots the shard is asked for (between ask_slots and on_slots).
  std::optional<step_timing> asking_;
  /// Events of the step just applied, published once the next plan is on its way.
  event_batch step_events_;
  struct pending_swap {
    bool relabel = false;
    bool running = false;  // sent to the worker
  };
  std::optional<pending_swap> swap_;
  bool retry_pending_ = false;
  double decode_exec_us_ = 0;
  std::unordered_map<size_t, double> decode_exec_us_by_batch_;
};

}  // namespace hart::sched
