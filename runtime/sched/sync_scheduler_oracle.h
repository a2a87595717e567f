// File: runtime/sched/sync_scheduler_oracle.h
// Test-only oracle: the scheduler as it was before the cache shard became an
// actor (commit 88799dd's runtime/sched/scheduler), calling a ShadowRadix
// synchronously per reservation. cache_shard_protocol_test checks that the
// scheduler + cache_shard batched protocol makes the same plans, events and
// cache states on random request mixes. Frozen: do not change its behaviour.
#pragma once

#include "runtime/sched/scheduler.h"

namespace hart::sched::testing {

class sync_scheduler_oracle {
 public:
  /// `cache` and `tok` (may be null: no text, no stop strings) must outlive it.
  /// `clock` returns µs on a monotonic clock (default: steady_clock).
  sync_scheduler_oracle(const scheduler_params& params, cache::shadow_radix& cache, const tokenizer* tok,
            std::function<int64_t()> clock = {});
  ~sync_scheduler_oracle();
  sync_scheduler_oracle(const sync_scheduler_oracle&) = delete;
  sync_scheduler_oracle& operator=(const sync_scheduler_oracle&) = delete;

  // -- requests ---

  /// Queues r (n sequences). invalid_argument for bad input, failed_precondition
  /// for an id that is still live, out_of_range for a prompt over max_context.
  status submit(gen_request r);
  /// Ends every sample of request `id` with reason abort (partial output kept);
  /// empty if it is not live.
  event_batch abort(uint64_t id);
  event_batch abort_all();

  // -- control ---

  event_batch pause(pause_mode mode);
  void resume();
  bool paused() const { return paused_; }
  /// Drops every unlocked cached page (pages of live sequences stay).
  void flush_cache();

  // -- the step ---

  /// The next batch; empty when paused or nothing fits. Events produced while
  /// planning (deadlines passed, requests that can never fit) go to take_events().
  step_plan schedule();
  /// Applies the worker's result for `plan` (the last one schedule() returned).
  event_batch complete(const step_plan& plan, const step_result& result);
  event_batch take_events();

  // -- state ---

  int64_t n_waiting() const { return int64_t(waiting_.size()); }
  int64_t n_running() const { return int64_t(running_.size()); }
  bool idle() const { return seqs_.empty(); }
  bool in_flight() const { return in_flight_; }
  const scheduler_counters& counters() const { return counters_; }
  int64_t now_us() const { return clock_(); }

 private:
  struct request_rec;
  struct seq;
  /// (−priority, arrival ticket, seq id): best first.
  using order_key = std::tuple<int64_t, uint64_t, uint64_t>;

  order_key key(const seq& s) const;
  void enqueue(seq& s);
  void dequeue(seq& s);
  void add_running(seq& s);
  void remove_running(seq& s);
  /// Reserves pages for s up to `n_tokens`, preempting unplanned sequences as
  /// needed. False if s itself was preempted or ended (event in outbox_).
  bool reserve(seq& s, int64_t n_tokens, const std::set<uint64_t>& planned);
  void preempt(seq& s);
  /// Ends s, releasing its cache request (into the cache unless `error`), and
  /// appends its finish event to `ev`.
  void finish(seq& s, finish_reason reason, std::string message, event_batch& ev, std::string text = {});
  bool sibling_blocked(const seq& s) const;
  step_item make_item(seq& s, int64_t chunk);

  scheduler_params params_;
  cache::shadow_radix& cache_;
  const tokenizer* tok_;
  std::function<int64_t()> clock_;
  std::map<uint64_t, std::shared_ptr<request_rec>> requests_;  // by request id
  std::map<uint64_t, std::unique_ptr<seq>> seqs_;              // by seq id
  std::set<order_key> waiting_;
  std::set<order_key> running_;
  uint64_t next_seq_id_ = 1, next_ticket_ = 1, next_step_ = 1;
  bool paused_ = false;
  bool in_flight_ = false;
  uint64_t in_flight_step_ = 0;
  event_batch outbox_;
  scheduler_counters counters_;
};

}  // namespace hart::sched::testing
