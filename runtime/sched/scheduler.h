// File: runtime/sched/scheduler.h
// Continuous-batching policy over a cache shard (style R22: plain class, no
// engine, no CAF, no CUDA). The shard (cache::cache_shard, behind
// actors/cache_shard_actor in `hart serve`) owns the ShadowRadix index; the
// scheduler only asks it for a step's pages (one slot_request, one
// slot_grants) and tells it what steps computed (cache_op_batch). Each step:
//   1. running sequences, best first (priority, then arrival): every decoding
//      one gets one token, a prefilling one a chunk (<= prefill_chunk) while
//      the per-step token budget (max_batch_tokens) lasts; when the cache
//      cannot reserve, the worst unplanned running sequence is preempted
//      (finished into the cache, requeued at its old place, so its recompute
//      hits its own prefix);
//   2. waiting sequences, best first, are admitted (shadow_radix::admit +
//      reserve for their first chunk) while budget and max_running last;
//      resource_exhausted leaves them queued. Samples 1..n-1 of a request wait
//      until sample 0 has computed the prompt, so they hit its cached pages.
// The shard takes those decisions (cache_shard::plan); the scheduler decides
// who asks, in which order, and what the answer means for its sequences.
// A step whose running sequences all fit in the pages already granted to
// them and that admits nothing (decode steps, 127 of 128 at P = 128) is
// planned without the shard: its page tables are the grants' (SWA entries
// that left the window dropped as the shard drops them), so the plan is the
// one the shard would give. So that the step crossing into a new page is one
// of them, reserve_ahead() names the decoding sequences a few tokens from the
// end of their pages (asked once per page, after a step went out) and
// apply_reserved() adds the pages the shard could give them.
// schedule_begin() → [shard] → schedule_end() → step_plan → (worker) →
// complete(step_plan, step_result) → events (+ take_cache_ops() → shard).
// One plan is in flight, two with schedule_ahead(); abort and pause may be
// called meanwhile: they take effect on their sequences in complete(). Not
// thread-safe.
//
//   HART_ASSIGN_OR_RETURN(auto s, scheduler::create(params, &tok));
//   HART_RETURN_IF_ERROR(s->submit(req));
//   step_plan p = s->schedule(shard);   // in-process: begin, shard, end
//   event_batch ev = s->complete(p, worker.execute(p));
//   shard.apply(s->take_cache_ops());
// sched::step_pipeline drives it when the shard and the worker are reached by
// message (both runtimes: the scheduler actor and serving_loop).
#pragma once

#include "runtime/cache/cache_shard.h"
#include "runtime/cache/shard_protocol.h"
#include "runtime/core/histogram.h"
#include "runtime/sample/ngram_draft.h"
#include "runtime/sched/prefilled.h"
#include "runtime/sched/request.h"
#include "runtime/sched/step.h"
#include "runtime/sched/stop_rules.h"
#include "runtime/text/tokenizer.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace hart::sched {

struct scheduler_params {
  int64_t max_batch_tokens = 2048;  // tokens fed per step, all sequences together
  int64_t max_running = 64;         // sequences holding cache pages at once
  int64_t prefill_chunk = 512;      // most prompt tokens of one sequence per step
  int32_t vocab_size = 0;           // for request validation
  int32_t eos_token_id = -1;        // < 0: none
  int64_t max_context = 0;          // prompt + generated tokens at most; 0 = unlimited
  /// Speculative decoding (docs/spec-decode.md): drafts per decode step, 0 = off. Each decoding
  /// sequence's step feeds its next token and up to this many drafts (prompt lookup:
  /// ngram_draft), and keeps the drafts the target would have sampled, seed for seed.
  int64_t speculative_tokens = 0;
  /// Where drafts come from: prompt lookup here when a step is planned, or the model's MTP block
  /// on the worker (every item then writes the block's KV of its positions, and each decode step
  /// returns the next step's drafts: step_item::mtp_kv, mtp_drafts).
  enum class drafter { ngram, mtp };
  drafter draft_with = drafter::ngram;
  ngram_draft_params ngram;

  /// Most drafts per step: a verify pass is at most 8 positions (the CSA ring, kv_store::min_ring_rows).
  static constexpr int64_t k_max_speculative_tokens = 7;

  status validate() const;
};

/// A scheduler's whole configuration: its cache shard's and its own.
struct serving_params {
  /// page_size, pool sizes, prefix cache on/off; `window` must equal the model's.
  cache::cache_config cache{128, 256, 64, 128, true};
  /// vocab_size must be set; eos_token_id < 0 = none.
  scheduler_params sched;
};

enum class pause_mode {
  abort,     // abort everything (finish reason abort)
  retract,   // preempt every running sequence back to the queue (into the cache)
  in_place,  // stop scheduling; keep every state
};

/// Monotonic counters (since construction).
struct scheduler_counters {
  int64_t steps = 0;
  int64_t steps_ahead = 0;  // of them, planned before the step before ran (schedule_ahead)
  int64_t pages_ahead = 0;  // pages granted ahead of need and applied (apply_reserved)
  int64_t submitted = 0;
  int64_t finished = 0;  // samples, any reason
  int64_t preemptions = 0;
  int64_t fed_tokens = 0;  // tokens through the model (prompt, recompute, decode)
  int64_t generated_tokens = 0;
  /// Speculative decoding: verify passes run, drafts fed in them, and drafts kept.
  int64_t verify_passes = 0, drafted_tokens = 0, accepted_drafts = 0;
  int64_t ttft_us_sum = 0, ttft_count = 0;
  /// Seconds, per sample: to its first token; per output token after the first (two or more);
  /// arrival to finish.
  latency_histogram ttft, tpot, e2e;
};

class scheduler {
 public:
  /// `cache` is the shard's configuration (page size and window shape the
  /// page tables); `tok` (may be null: no text, no stop strings) must outlive
  /// it. `clock` returns µs on a monotonic clock (default: steady_clock).
  scheduler(const scheduler_params& params, const cache::cache_config& cache, const tokenizer* tok,
            std::function<int64_t()> clock = {});
  /// The same after validating both configs (invalid_argument names the field).
  static status_or<std::unique_ptr<scheduler>> create(const serving_params& params, const tokenizer* tok,
                                                      std::function<int64_t()> clock = {});
  ~scheduler();
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  // -- requests ---

  /// Queues r (n sequences). invalid_argument for bad input, failed_precondition
  /// for an id that is still live, out_of_range for a prompt over max_context.
  status submit(gen_request r);
  /// Ends every sample of request `id` with reason abort (partial output kept);
  /// empty if it is not live.
  event_batch abort(uint64_t id);
  event_batch abort_all();
  /// Prefill/decode disaggregation (scheduler_prefilled.cpp): r (one sample)
  /// joins the running set with its prompt computed (n_computed = prompt
  /// length, on p's pages) and p.first as its first token, whose event (and
  /// finish, when it ends the sequence) is returned. The cache request's
  /// advance to the prompt's end is queued for the shard. Errors as submit's
  /// (invalid_argument also for n > 1, routing or prompt log-probs); nothing
  /// changes then and the caller still owns p's cache request.
  status_or<event_batch> admit_prefilled(gen_request r, const prefilled& p);

  // -- control ---

  event_batch pause(pause_mode mode);
  void resume();
  bool paused() const { return paused_; }
  /// Drops every unlocked cached page (pages of live sequences stay): a flush op.
  void flush_cache();

  // -- the step ---

  /// Starts planning the next step (deadlines first). Returns the shard's
  /// part of it when the step needs the shard; nullopt when it is planned
  /// within its grants (or paused). The shard must apply take_cache_ops()
  /// before answering.
  std::optional<cache::slot_request> schedule_begin();
  /// Ends planning with the shard's answer to schedule_begin's request (null
  /// when it returned none): the next batch; empty when paused or nothing
  /// fits. Events produced while planning (deadlines passed, requests that can
  /// never fit) go to take_events().
  step_plan schedule_end(const cache::slot_grants* grants);
  /// Both, with an in-process shard (applies pending cache ops first).
  step_plan schedule(cache::cache_shard& shard);
  /// The step after the one in flight, planned before its result exists
  /// (overlap scheduling): only when that step decodes one token for every
  /// running sequence, nothing waits, and each sequence goes on within its
  /// pages, max_new_tokens and max_context (no deadline, retract or pause
  /// pending). Each item feeds the token the step in flight samples for it
  /// (step_item::feed_last_sampled: the worker fills it in). Empty otherwise.
  /// A sequence that ends in the step in flight is dropped when this one
  /// completes (its token wasted). At most two plans are in flight.
  step_plan schedule_ahead();
  /// How far ahead a decoding sequence's next page is asked for, in tokens
  /// (decode steps): the answer (µs) has several steps to come back, and a
  /// page is held at most that many steps before it is written.
  static constexpr int64_t k_reserve_ahead_tokens = 8;
  /// Pages ahead of need, for the shard (cache_shard::reserve): the running
  /// sequences that decode and will cross into a page they do not hold
  /// within k_reserve_ahead_tokens (before max_new_tokens or max_context
  /// end them), each page asked for once. Empty when there are none, while
  /// planning (the slot_request in flight may end those cache requests) or
  /// paused. Send it after take_cache_ops() (their releases make room).
  cache::reserve_request reserve_ahead();
  /// Adds the pages the shard reserved ahead to the sequences that still hold
  /// those cache requests; one that ended, was preempted or was admitted
  /// again since is skipped (the shard released the pages with the request
  /// they were reserved for). Any time, in any order with the steps.
  void apply_reserved(const cache::reserve_grants& g);
  /// Applies the worker's result for `plan` (the oldest in flight).
  event_batch complete(const step_plan& plan, const step_result& result);
  /// Takes `plan` (the one in flight) back unexecuted: nothing advances or
  /// fails; its sequences stop being in flight (ended ones are dropped, a
  /// pending retract is done). The caller retracts or replans.
  event_batch discard(const step_plan& plan);
  /// The executor running `plan` (the one in flight) failed (a dead worker
  /// process): every sequence of the plan ends with `error` ("worker failed:
  /// why"). When `pages_lost` too, the running sequences are retracted and
  /// the prefix cache flushed, so they recompute on the next worker.
  event_batch fail_step(const step_plan& plan, const status& why, bool pages_lost);
  /// The executor did not run `plan` (the one in flight) because its KV pages
  /// were lost while it was idle (a worker process died between steps).
  /// Nothing fails: it is taken back, every running sequence is retracted and
  /// the prefix cache flushed, so they recompute on the next worker.
  event_batch lose_pages(const step_plan& plan);
  event_batch take_events();
  /// Changes to cache requests since the last call, in order, for the shard.
  cache::cache_op_batch take_cache_ops();

  // -- state ---

  int64_t n_waiting() const { return int64_t(waiting_.size()); }
  int64_t n_running() const { return int64_t(running_.size()); }
  bool idle() const { return seqs_.empty(); }
  bool in_flight() const { return !in_flight_steps_.empty(); }
  const scheduler_counters& counters() const { return counters_; }
  int64_t now_us() const { return clock_(); }

 private:
  struct request_rec;
  struct seq;
  /// (−priority, ticket, seq id): best first. Tickets are start tags of start-time fair
  /// queuing across clients: a sequence of client c gets max(vtime_, the ticket after c's
  /// previous one), where vtime_ is the oldest running sequence's ticket (never going back).
  /// One client's sequences keep their arrival order (FCFS); a client that sends 48 requests
  /// at once queues them 48 tickets deep, while another's request ranks with the oldest one
  /// running: it is admitted before that backlog and, under memory pressure, in place of
  /// the backlog's later-started sequences (the shard preempts from the end of this order).
  /// A preempted sequence takes the largest ticket admitted + 1: ahead of its client's
  /// unstarted sequences, behind every running one, so it waits for free pages instead of
  /// preempting another of them in turn, and behind what arrived while it ran.
  using order_key = std::tuple<int64_t, uint64_t, uint64_t>;
  uint64_t take_ticket(uint64_t client);

  order_key key(const seq& s) const;
  void enqueue(seq& s);
  void dequeue(seq& s);
  void add_running(seq& s);
  void remove_running(seq& s);
  /// Back to the queue (a new ticket: take_ticket's comment); its cache request is gone.
  void requeue(seq& s);
  /// requeue() after finishing its cache request into the cache.
  void preempt(seq& s);
  /// `plan` joins the plans in flight.
  void take_in_flight(const step_plan& plan);
  void cache_op(cache::cache_op::kind kind, const seq& s);
  step_plan plan_within_grants();
  void apply_grants(const cache::slot_grants& g);
  /// Ends s, releasing its cache request (into the cache unless `error`), and
  /// appends its finish event to `ev`.
  void finish(seq& s, finish_reason reason, std::string message, event_batch& ev, std::string text = {});
  bool sibling_blocked(const seq& s) const;
  /// Retracts every running sequence (paused or not) and flushes the cache:
  /// the KV behind every page is gone.
  event_batch retract_all_and_flush();
  /// The next step's drafts of a decoding sequence (speculative_tokens > 0), within its limits.
  void propose_drafts(seq& s);
  /// Tokens s would feed this step: what it has not computed, and its drafts.
  int64_t wanted(const seq& s) const;
  step_item make_item(seq& s, int64_t chunk);
  /// What emit_tokens did with a step's tokens for one sequence.
  struct emitted {
    int64_t kept = 0;   // tokens appended (a stop inside a verify item's run ends it there)
    stop_outcome stop;  // done: the sequence ends with stop.reason
    std::string error;  // not empty: a token outside the vocabulary (nothing appended from it on)
  };
  /// Appends the n tokens result.sampled[k..k+n) to s, token by token: token
  /// events, stop rules, max_context.
  emitted emit_tokens(seq& s, const step_result& result, size_t k, int64_t n, event_batch& ev);

  scheduler_params params_;
  cache::cache_config cache_cfg_;
  const tokenizer* tok_;
  std::function<int64_t()> clock_;
  std::map<uint64_t, std::shared_ptr<request_rec>> requests_;  // by request id
  std::map<uint64_t, std::unique_ptr<seq>> seqs_;              // by seq id
  std::set<order_key> waiting_;
  std::set<order_key> running_;
  uint64_t next_seq_id_ = 1, next_step_ = 1;
  uint64_t vtime_ = 1;                                  // newcomers' lowest ticket (take_ticket)
  uint64_t max_admitted_ = 1;                           // the largest ticket admitted so far
  std::unordered_map<uint64_t, uint64_t> next_ticket_;  // by client: the ticket its next sequence may take
  bool paused_ = false;
  std::deque<uint64_t> in_flight_steps_;  // oldest first
  /// Between schedule_begin and schedule_end: the plan being made, and whether
  /// the shard is asked (else: within grants, or nothing when paused).
  bool planning_ = false;
  bool planning_with_shard_ = false;
  step_plan plan_;
  event_batch outbox_;
  cache::cache_op_batch cache_ops_;
  scheduler_counters counters_;
};

}  // namespace hart::sched
