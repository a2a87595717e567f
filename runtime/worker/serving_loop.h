// File: runtime/worker/serving_loop.h
// The serving core in one thread: scheduler + ShadowRadix + cpu_worker over one
// engine. For tests and single-process use; the actor runtime wires the same
// pieces through messages instead.
//
//   HART_ASSIGN_OR_RETURN(auto loop, serving_loop::create(*eng, {}, &tok));
//   HART_RETURN_IF_ERROR(loop->submit(req));
//   sched::event_batch ev = loop->run_until_idle();
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/cache/shadow_radix.h"
#include "runtime/model/engine.h"
#include "runtime/sched/scheduler.h"
#include "runtime/sched/step_executor.h"
#include "runtime/worker/cpu_worker.h"

namespace hart::sched {

struct serving_params {
  /// page_size, pool sizes, prefix cache on/off; window is taken from the model.
  cache::cache_config cache{128, 256, 64, 128, true};
  /// vocab_size and eos_token_id: 0 / -1 = from the model config.
  scheduler_params sched;
};

struct serving_stats {
  int64_t waiting = 0, running = 0;  // sequences
  int64_t steps = 0, preemptions = 0, finished = 0;
  int64_t generated_tokens = 0, fed_tokens = 0;
  int64_t worker_failures = 0;  // executor errors (dead worker process); their plans ended with `error`
  double tokens_per_s = 0;    // generated tokens / time spent in step()
  double ttft_us_mean = 0;    // over samples that produced a token
  double step_us_mean = 0, step_us_p50 = 0, step_us_p99 = 0;  // the last non-empty steps (window)
  double decode_step_us_p50 = 0, decode_step_us_p99 = 0;      // of those, steps feeding one token per sequence
  double cache_hit_rate = 0;  // prompt tokens served from the prefix cache
  cache::cache_metrics cache;
};

class serving_loop {
 public:
  /// `eng` and `tok` (may be null) must outlive the loop. Without `executor`
  /// the loop allocates the KV pages and runs a cpu_worker in this thread;
  /// with one (a remote_worker) it only plans and leaves the pages to it.
  static status_or<std::unique_ptr<serving_loop>> create(const engine& eng, serving_params params,
                                                         const tokenizer* tok,
                                                         std::unique_ptr<step_executor> executor = nullptr);

  status submit(gen_request r) { return sched_->submit(std::move(r)); }
  event_batch abort(uint64_t id) { return sched_->abort(id); }
  event_batch abort_all() { return sched_->abort_all(); }
  event_batch pause(pause_mode m) { return sched_->pause(m); }
  void resume() { sched_->resume(); }
  void flush_cache() { sched_->flush_cache(); }

  /// One scheduler step executed on the engine; returns its events (and any
  /// produced while planning). When the executor fails (a dead worker), every
  /// sequence of the plan ends with `error`; if the executor lost its pages,
  /// running sequences are retracted and the prefix cache flushed, so they
  /// recompute on the next worker.
  event_batch step();
  /// Steps until nothing is live, or until a step makes no progress (paused,
  /// or nothing fits); at most max_steps steps.
  event_batch run_until_idle(int64_t max_steps = 1 << 30);

  bool idle() const { return sched_->idle(); }
  serving_stats stats() const;
  scheduler& sched() { return *sched_; }
  cache::shadow_radix& cache() { return *cache_; }
  /// Null when an executor was given to create().
  kv_store* store() { return store_.get(); }

 private:
  serving_loop() = default;

  std::unique_ptr<kv_store> store_;
  std::unique_ptr<cache::shadow_radix> cache_;
  std::unique_ptr<scheduler> sched_;
  std::unique_ptr<step_executor> executor_;
  int64_t worker_failures_ = 0;
  /// Durations of the last k_latency_window non-empty steps (all, and decode-only), ring buffers.
  static constexpr size_t k_latency_window = 4096;
  std::vector<int64_t> step_us_, decode_step_us_;
  size_t step_next_ = 0, decode_next_ = 0;
  int64_t busy_us_ = 0;
};

}  // namespace hart::sched
