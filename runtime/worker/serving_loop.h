// File: runtime/worker/serving_loop.h
// The serving path in one thread: the step pipeline the scheduler actor runs
// (sched::step_pipeline over the scheduler), with the cache shard in process
// and a step_runner over the executor (the CPU worker, or a remote worker
// process) as its port; every message is answered in turn, in the order the
// actors' mailboxes deliver them. For tests, `hart generate`-like callers and
// as the reference the actor runtime (actors/) must equal.
//
//   HART_ASSIGN_OR_RETURN(auto loop, serving_loop::create(*eng, {}, &tok));
//   HART_RETURN_IF_ERROR(loop->submit(req));
//   sched::event_batch ev = loop->run_until_idle();
#pragma once

#include "runtime/model/engine.h"
#include "runtime/sched/in_process_shard.h"
#include "runtime/sched/scheduler.h"
#include "runtime/sched/step_executor.h"
#include "runtime/sched/step_pipeline.h"
#include "runtime/worker/step_runner.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>

namespace hart::worker {

/// `params` with what the model decides filled in: the cache window, the
/// vocabulary size (when 0) and EOS (when < 0, from the tokenizer, may be null).
sched::serving_params serving_params_for(const model_config& cfg, sched::serving_params params,
                                         const tokenizer* tok);
inline sched::serving_params serving_params_for(const engine& eng, sched::serving_params params,
                                                const tokenizer* tok) {
  return serving_params_for(eng.config(), std::move(params), tok);
}

class serving_loop : private sched::pipeline_port {
 public:
  /// `eng` and `tok` (may be null) must outlive the loop. Without `executor`
  /// the loop allocates the KV pages and runs an engine_executor in this thread;
  /// with one (a remote_worker) it only plans and leaves the pages to it.
  static status_or<std::unique_ptr<serving_loop>> create(
      const engine& eng, sched::serving_params params, const tokenizer* tok,
      std::unique_ptr<sched::step_executor> executor = nullptr);
  ~serving_loop() override;

  /// Refused requests are an error here (nothing starts); the next step() plans.
  status submit(sched::gen_request r) { return sched().submit(std::move(r)); }
  sched::event_batch abort(uint64_t id) { return synced(sched().abort(id)); }
  sched::event_batch abort_all() { return synced(sched().abort_all()); }
  sched::event_batch pause(sched::pause_mode m) { return synced(sched().pause(m)); }
  void resume() { sched().resume(); }
  void flush_cache() {
    sched().flush_cache();
    pipe_->sync_shard();
  }

  /// Overlap scheduling (scheduler::schedule_ahead): each decode step plans the
  /// next one before it runs, as the actor runtime does to keep its worker
  /// busy; here it changes nothing but the order, so outputs must equal the
  /// plain loop's (the tests check that). Between steps.
  void set_overlap(bool on) { pipe_->set_overlap(on); }

  /// One step executed on the engine (planned first if none is out); returns
  /// the events published meanwhile. A failed executor is handled as
  /// scheduler::fail_step describes.
  sched::event_batch step();
  /// Steps until nothing is live, or until a step makes no progress (paused,
  /// or nothing fits); at most max_steps steps.
  sched::event_batch run_until_idle(int64_t max_steps = 1 << 30);

  bool idle() const { return sched().idle(); }
  sched::serving_stats stats() const { return pipe_->stats(shard_->metrics()); }
  sched::scheduler& sched() { return pipe_->sched(); }
  const sched::scheduler& sched() const { return pipe_->sched(); }
  cache::shadow_radix& cache() { return shard_->index(); }

 private:
  serving_loop() = default;
  /// After a control call: the plans already out run, as a worker that had
  /// them would (their outcomes clean up what the call ended), and the cache
  /// ops go to the shard; returns `ev` and the events published meanwhile.
  sched::event_batch synced(sched::event_batch ev);
  /// Runs the oldest plan out and hands its outcome to the pipeline.
  void run_oldest();

  // pipeline_port: the shard answers in process, plans queue for step().
  void send_step(std::shared_ptr<const sched::step_plan> plan, int64_t) override {
    steps_.push_back(std::move(plan));
  }
  void send_swap() override {}  // weights do not change under a serving_loop
  void send_cache_ops(cache::cache_op_batch ops) override { shard_->apply(ops); }
  void ask_slots(cache::slot_request req) override { shard_->ask_slots(req); }
  void ask_reserve(cache::reserve_request req) override { shard_->ask_reserve(req); }
  void publish(sched::event_batch ev) override { events_.append(std::move(ev)); }
  void retry_after(std::chrono::milliseconds) override { retry_ = true; }

  std::unique_ptr<sched::in_process_shard> shard_;
  std::unique_ptr<sched::step_pipeline> pipe_;
  std::unique_ptr<sched::step_executor> executor_;
  std::unique_ptr<step_runner> runner_;
  std::deque<std::shared_ptr<const sched::step_plan>> steps_;  // sent, not run yet
  sched::event_batch events_;                                  // published since the last step() returned
  bool retry_ = false;
};

}  // namespace hart::worker
