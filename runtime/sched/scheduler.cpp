#include "runtime/sched/scheduler.h"

#include <algorithm>
#include <cmath>
#include <chrono>

#include "runtime/core/check.h"

namespace hart::sched {

status scheduler_params::validate() const {
  if (max_batch_tokens < 1) return invalid_argument("scheduler: max_batch_tokens %lld < 1", (long long)max_batch_tokens);
  if (max_running < 1) return invalid_argument("scheduler: max_running %lld < 1", (long long)max_running);
  if (prefill_chunk < 1) return invalid_argument("scheduler: prefill_chunk %lld < 1", (long long)prefill_chunk);
  if (vocab_size < 1) return invalid_argument("scheduler: vocab_size %d < 1", vocab_size);
  if (max_context < 0) return invalid_argument("scheduler: max_context %lld < 0", (long long)max_context);
  return {};
}

struct scheduler::request_rec {
  gen_request req;
  int64_t arrival_us = 0;
  std::vector<uint64_t> seq_ids;  // by sample; 0 once that sample ended
  int32_t live = 0;
};

struct scheduler::seq {
  seq(std::shared_ptr<request_rec> r, const tokenizer* tok, int32_t eos)
      : req(std::move(r)), stop(req->req, tok, eos) {}

  uint64_t id = 0;
  std::shared_ptr<request_rec> req;
  int32_t sample = 0;
  std::vector<int32_t> tokens;  // prompt + generated; the last one is not computed yet once decoding
  /// While waiting: `tokens` as the shard's admission will see them (shared
  /// by a request's samples, and across steps).
  std::shared_ptr<const std::vector<int32_t>> waiting_tokens;
  int64_t n_prompt = 0;
  int64_t n_computed = 0;       // mirrors the cache request's n_computed while running
  cache::request_id cache_id = -1;
  bool has_cache = false;
  /// The cache request's page tables as last granted, SWA entries that left
  /// the window dropped (request_pages), and the tokens it knows.
  std::vector<cache::page_id> full_pages, swa_pages;
  int64_t n_known = 0;
  int64_t pages_asked = 0;      // the page count last asked for ahead of need (reserve_ahead)
  bool running = false;
  bool prompt_done = false;     // the prompt was computed once (its pages are in the cache)
  int in_flight = 0;            // plans in flight that feed it (2 while a step is planned ahead)
  bool ended = false;           // finish event sent while in flight; cleaned up in complete()
  bool retract_pending = false;
  int64_t cached_tokens = -1;   // prefix hit at first admission
  uint64_t ticket = 0;
  int64_t first_sched_us = -1, first_token_us = -1;
  stop_rules stop;
  routing_trace routing;        // return_routing: what the worker reported, by position
  std::vector<float> prompt_logprobs;  // logprob_start >= 0: by prompt position (NaN until computed)
};

scheduler::scheduler(const scheduler_params& params, const cache::cache_config& cache, const tokenizer* tok,
                     std::function<int64_t()> clock)
    : params_(params), cache_cfg_(cache), tok_(tok), clock_(std::move(clock)) {
  HART_CHECK(params_.validate().ok()) << params_.validate().to_string();
  if (!clock_) {
    clock_ = [] {
      return int64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count());
    };
  }
}

scheduler::~scheduler() = default;

scheduler::order_key scheduler::key(const seq& s) const {
  return {-int64_t(s.req->req.priority), s.ticket, s.id};
}
void scheduler::enqueue(seq& s) { waiting_.insert(key(s)); }
void scheduler::dequeue(seq& s) { waiting_.erase(key(s)); }
void scheduler::add_running(seq& s) {
  running_.insert(key(s));
  s.running = true;
  max_admitted_ = std::max(max_admitted_, s.ticket);
}

uint64_t scheduler::take_ticket(uint64_t client) {
  // The virtual time: the oldest running sequence's start tag (the largest admitted when
  // nothing runs; every running ticket is at most that), never going back. A newcomer ranks
  // with the oldest sequence in service, so it may take the place of a later-started one of
  // a client with many. (The ticket is the key's second field, not its order: a scan.)
  uint64_t oldest = max_admitted_;
  for (const order_key& k : running_) oldest = std::min(oldest, std::get<1>(k));
  vtime_ = std::max(vtime_, oldest);
  // Clients whose next ticket the virtual time has passed would get vtime_ anyway: forget them.
  if (next_ticket_.size() > 4096) {
    for (auto it = next_ticket_.begin(); it != next_ticket_.end();) {
      it = it->second <= vtime_ ? next_ticket_.erase(it) : std::next(it);
    }
  }
  uint64_t& next = next_ticket_[client];
  const uint64_t t = std::max(vtime_, next);
  next = t + 1;
  return t;
}
void scheduler::remove_running(seq& s) {
  running_.erase(key(s));
  s.running = false;
}

// -- requests ---------------------------------------------------------------

status scheduler::submit(gen_request r) {
  HART_RETURN_IF_ERROR(r.validate(params_.vocab_size, params_.max_context));
  if (requests_.count(r.id)) return failed_precondition("request %llu is still live", (unsigned long long)r.id);
  auto rec = std::make_shared<request_rec>();
  rec->req = std::move(r);
  rec->arrival_us = clock_();
  rec->live = rec->req.n;
  const auto prompt = std::make_shared<const std::vector<int32_t>>(rec->req.prompt);
  for (int32_t i = 0; i < rec->req.n; ++i) {
    auto s = std::make_unique<seq>(rec, tok_, params_.eos_token_id);
    s->id = next_seq_id_++;
    s->sample = i;
    s->tokens = rec->req.prompt;
    s->waiting_tokens = prompt;
    s->n_prompt = int64_t(s->tokens.size());
    s->ticket = take_ticket(rec->req.client);
    rec->seq_ids.push_back(s->id);
    enqueue(*s);
    seqs_.emplace(s->id, std::move(s));
  }
  const uint64_t id = rec->req.id;
  requests_.emplace(id, std::move(rec));
  ++counters_.submitted;
  return {};
}

event_batch scheduler::abort(uint64_t id) {
  event_batch ev;
  auto it = requests_.find(id);
  if (it == requests_.end()) return ev;
  const std::vector<uint64_t> ids = it->second->seq_ids;
  for (uint64_t sid : ids) {
    auto s = seqs_.find(sid);
    if (s != seqs_.end() && !s->second->ended) finish(*s->second, finish_reason::abort, "aborted", ev);
  }
  return ev;
}

event_batch scheduler::abort_all() {
  event_batch ev;
  std::vector<uint64_t> ids;
  for (const auto& kv : requests_) ids.push_back(kv.first);
  for (uint64_t id : ids) ev.append(abort(id));
  return ev;
}

// -- control ----------------------------------------------------------------

event_batch scheduler::pause(pause_mode mode) {
  paused_ = true;
  if (mode == pause_mode::abort) return abort_all();
  if (mode == pause_mode::retract) {
    std::vector<uint64_t> ids;
    for (const order_key& k : running_) ids.push_back(std::get<2>(k));
    for (uint64_t id : ids) {
      seq& s = *seqs_.at(id);
      if (s.in_flight > 0) {
        s.retract_pending = true;
      } else {
        preempt(s);
      }
    }
  }
  return {};
}

void scheduler::resume() { paused_ = false; }

void scheduler::flush_cache() { cache_ops_.push_back({cache::cache_op::kind::flush, -1, 0, {}}); }

cache::cache_op_batch scheduler::take_cache_ops() {
  cache::cache_op_batch ops = std::move(cache_ops_);
  cache_ops_ = {};
  return ops;
}

event_batch scheduler::take_events() {
  event_batch ev = std::move(outbox_);
  outbox_ = {};
  return ev;
}

// -- the step ---------------------------------------------------------------

void scheduler::cache_op(cache::cache_op::kind kind, const seq& s) {
  cache_ops_.push_back({kind, s.cache_id, s.n_computed, {}});
}

void scheduler::preempt(seq& s) {
  HART_CHECK(s.running && s.in_flight == 0) << "preempt: seq " << s.id;
  cache_op(cache::cache_op::kind::finish, s);
  requeue(s);
}

void scheduler::requeue(seq& s) {
  s.has_cache = false;
  s.cache_id = -1;
  s.n_computed = 0;
  s.full_pages.clear();
  s.swa_pages.clear();
  s.pages_asked = 0;
  s.waiting_tokens = std::make_shared<const std::vector<int32_t>>(s.tokens);
  remove_running(s);
  // A fresh start tag past everything admitted: first among its client's unstarted
  // sequences, behind the requests that arrived while it ran (a backlog preempting itself
  // kept older tickets than a newcomer's forever), and behind every running sequence, so
  // it waits for free pages instead of preempting one of them in turn.
  s.ticket = max_admitted_ + 1;
  enqueue(s);
  ++counters_.preemptions;
}

void scheduler::finish(seq& s, finish_reason reason, std::string message, event_batch& ev, std::string text) {
  const int64_t now = clock_();
  finish_event fe;
  fe.request_id = s.req->req.id;
  fe.sample = s.sample;
  fe.reason = reason;
  fe.message = std::move(message);
  fe.text = std::move(text);
  if (reason == finish_reason::abort || reason == finish_reason::error) fe.text += s.stop.release();
  fe.prompt_tokens = s.n_prompt;
  fe.completion_tokens = int64_t(s.tokens.size()) - s.n_prompt;
  fe.cached_tokens = std::max<int64_t>(0, s.cached_tokens);
  fe.queued_us = (s.first_sched_us >= 0 ? s.first_sched_us : now) - s.req->arrival_us;
  fe.ttft_us = s.first_token_us >= 0 ? s.first_token_us - s.req->arrival_us : -1;
  fe.total_us = now - s.req->arrival_us;
  if (s.req->req.return_routing) {
    s.routing.truncate(s.n_computed);
    fe.routing = std::move(s.routing);
  }
  if (const int64_t from = s.req->req.logprob_start; from >= 0 && !s.prompt_logprobs.empty()) {
    fe.input_logprobs.assign(s.prompt_logprobs.begin() + from, s.prompt_logprobs.end());
  }
  counters_.e2e.add(double(fe.total_us) * 1e-6);
  if (fe.completion_tokens >= 2 && s.first_token_us >= 0)
    counters_.tpot.add(double(now - s.first_token_us) * 1e-6 / double(fe.completion_tokens - 1));
  ev.finishes.push_back(std::move(fe));
  ++counters_.finished;

  if (s.running) remove_running(s);
  else dequeue(s);
  auto rit = requests_.find(s.req->req.id);
  HART_CHECK(rit != requests_.end());
  rit->second->seq_ids[size_t(s.sample)] = 0;
  if (--rit->second->live == 0) requests_.erase(rit);
  if (s.in_flight > 0) {  // the worker may still use its pages: released in complete()
    s.ended = true;
    return;
  }
  if (s.has_cache) cache_op(reason == finish_reason::error ? cache::cache_op::kind::abort : cache::cache_op::kind::finish, s);
  seqs_.erase(s.id);
}

bool scheduler::sibling_blocked(const seq& s) const {
  if (s.sample == 0 || s.cached_tokens >= 0) return false;
  auto rit = requests_.find(s.req->req.id);
  const uint64_t first = rit->second->seq_ids[0];
  if (first == 0) return false;
  return !seqs_.at(first)->prompt_done;
}

step_item scheduler::make_item(seq& s, int64_t chunk) {
  step_item it;
  it.seq_id = s.id;
  it.request_id = s.req->req.id;
  it.sample = s.sample;
  it.tokens.assign(s.tokens.begin() + s.n_computed, s.tokens.begin() + s.n_computed + chunk);
  it.full_pages = s.full_pages;
  it.swa_pages = s.swa_pages;
  it.n_computed = s.n_computed;
  it.sample_last = s.n_computed + chunk == int64_t(s.tokens.size());
  it.sampling = s.req->req.sampling(s.sample);
  it.sampling.seed = step_seed(it.sampling.seed, int64_t(s.tokens.size()) - s.n_prompt);
  it.logprobs = s.req->req.logprobs;
  it.top_logprobs = s.req->req.top_logprobs;
  it.capture_routing = s.req->req.return_routing;
  // Prompt log-probs: rows up to the prompt's last position (whose next token is sampled).
  if (s.req->req.logprob_start >= 0 && s.n_computed < s.n_prompt) {
    it.prompt_logprobs = true;
    const int64_t end = s.n_computed + chunk;
    it.next_token = end < s.n_prompt ? s.tokens[size_t(end)] : -1;
  }
  if (s.first_sched_us < 0) s.first_sched_us = clock_();
  return it;
}

std::optional<cache::slot_request> scheduler::schedule_begin() {
  HART_CHECK(in_flight_steps_.empty() && !planning_) << "schedule_begin() while a step is in flight or planned";
  planning_ = true;
  planning_with_shard_ = false;
  plan_ = {};
  plan_.step = next_step_++;
  if (paused_) return std::nullopt;

  // Deadlines.
  const int64_t now = clock_();
  std::vector<seq*> late;
  for (auto& kv : seqs_) {
    const int64_t d = kv.second->req->req.deadline_us;
    if (d > 0 && now > d && !kv.second->ended) late.push_back(kv.second.get());
  }
  for (seq* s : late) finish(*s, finish_reason::abort, "deadline exceeded", outbox_);

  // Within grants: every running sequence the budget reaches fits in its
  // pages, and nothing can be admitted.
  int64_t budget = params_.max_batch_tokens;
  bool within = true;
  for (const order_key& k : running_) {
    if (budget <= 0) break;
    const seq& s = *seqs_.at(std::get<2>(k));
    const int64_t chunk = std::min({int64_t(s.tokens.size()) - s.n_computed, params_.prefill_chunk, budget});
    if (s.n_computed + chunk > int64_t(s.full_pages.size()) * cache_cfg_.page_size) within = false;
    budget -= chunk;
  }
  if (within && budget > 0 && n_running() < params_.max_running) {
    for (const order_key& k : waiting_) {
      if (!sibling_blocked(*seqs_.at(std::get<2>(k)))) {
        within = false;
        break;
      }
    }
  }
  if (within) return std::nullopt;

  planning_with_shard_ = true;
  cache::slot_request req;
  req.step = plan_.step;
  req.budget = params_.max_batch_tokens;
  req.prefill_chunk = params_.prefill_chunk;
  req.max_running = params_.max_running;
  // Both lists carry their place in one order: a sequence preempted for
  // another is admitted again at its place among the waiting ones.
  auto r = running_.begin();
  auto w = waiting_.begin();
  for (uint64_t order = 0; r != running_.end() || w != waiting_.end(); ++order) {
    if (w == waiting_.end() || (r != running_.end() && *r < *w)) {
      const seq& s = *seqs_.at(std::get<2>(*r++));
      req.running.push_back({s.id, order, s.cache_id, s.n_computed, int64_t(s.tokens.size()) - s.n_computed,
                             std::vector<int32_t>(s.tokens.begin() + s.n_known, s.tokens.end())});
    } else {
      const seq& s = *seqs_.at(std::get<2>(*w++));
      req.waiting.push_back({s.id, order, s.waiting_tokens, sibling_blocked(s) ? s.req->seq_ids[0] : 0,
                             !s.req->req.return_routing && s.req->req.logprob_start < 0});
    }
  }
  return req;
}

step_plan scheduler::plan_within_grants() {
  int64_t budget = params_.max_batch_tokens;
  for (const order_key& k : running_) {
    if (budget <= 0) break;
    seq& s = *seqs_.at(std::get<2>(k));
    const int64_t chunk = std::min({int64_t(s.tokens.size()) - s.n_computed, params_.prefill_chunk, budget});
    plan_.items.push_back(make_item(s, chunk));
    budget -= chunk;
  }
  return std::move(plan_);
}

void scheduler::apply_grants(const cache::slot_grants& g) {
  HART_CHECK(g.step == plan_.step) << "grants for step " << g.step << ", planning " << plan_.step;
  for (const cache::slot_decision& d : g.decisions) {
    seq& s = *seqs_.at(d.seq);
    switch (d.verdict) {
      case cache::slot_verdict::granted:
        if (d.admitted) {
          s.cache_id = d.cache_id;
          s.has_cache = true;
          s.n_computed = d.n_computed;
          s.n_known = int64_t(s.waiting_tokens->size());
          s.waiting_tokens.reset();
          if (s.cached_tokens < 0) s.cached_tokens = d.n_computed;
          dequeue(s);
          add_running(s);
        }
        HART_CHECK(s.cache_id == d.cache_id && s.n_computed == d.n_computed) << "grant for seq " << s.id;
        s.full_pages = d.full;
        s.swa_pages = d.swa;
        plan_.items.push_back(make_item(s, d.n_tokens));
        break;
      case cache::slot_verdict::preempted: requeue(s); break;
      case cache::slot_verdict::failed:
        s.has_cache = false;  // the shard aborted it
        finish(s, finish_reason::error, d.message, outbox_);
        break;
    }
  }
}

step_plan scheduler::schedule_end(const cache::slot_grants* grants) {
  HART_CHECK(planning_) << "schedule_end() without schedule_begin()";
  HART_CHECK((grants != nullptr) == planning_with_shard_) << "schedule_end(): grants " << (grants ? "given" : "missing");
  planning_ = false;
  step_plan plan;
  if (grants) {
    apply_grants(*grants);
    plan = std::move(plan_);
  } else if (!paused_) {
    plan = plan_within_grants();
  } else {
    plan = std::move(plan_);
  }
  plan_ = {};
  if (!plan.empty()) take_in_flight(plan);
  return plan;
}

void scheduler::take_in_flight(const step_plan& plan) {
  in_flight_steps_.push_back(plan.step);
  for (const step_item& it : plan.items) ++seqs_.at(it.seq_id)->in_flight;
  ++counters_.steps;
}

step_plan scheduler::schedule_ahead() {
  step_plan none;
  if (in_flight_steps_.size() != 1 || planning_ || paused_ || !waiting_.empty() || running_.empty()) return none;
  const int64_t P = cache_cfg_.page_size;
  step_plan plan;
  plan.step = next_step_;
  for (const order_key& k : running_) {
    const seq& s = *seqs_.at(std::get<2>(k));
    // Every running sequence decodes one token in the step in flight (it then
    // has one token more than it computed) and goes on: within its pages,
    // its limits and no deadline, retract or end pending.
    const int64_t n_generated = int64_t(s.tokens.size()) - s.n_prompt;  // the step in flight samples number n_generated
    if (s.in_flight != 1 || s.ended || s.retract_pending || s.req->req.deadline_us > 0 ||
        int64_t(s.tokens.size()) != s.n_computed + 1 || s.n_computed + 2 > int64_t(s.full_pages.size()) * P ||
        n_generated + 1 >= s.req->req.max_new_tokens ||
        (params_.max_context > 0 && int64_t(s.tokens.size()) + 1 >= params_.max_context)) {
      return none;
    }
    step_item it;
    it.seq_id = s.id;
    it.request_id = s.req->req.id;
    it.sample = s.sample;
    it.tokens = {0};  // the token the step in flight samples, filled in by the worker
    it.feed_last_sampled = true;
    it.full_pages = s.full_pages;
    it.swa_pages = s.swa_pages;
    it.n_computed = s.n_computed + 1;
    it.sample_last = true;
    it.sampling = s.req->req.sampling(s.sample);
    it.sampling.seed = step_seed(it.sampling.seed, n_generated + 1);
    it.logprobs = s.req->req.logprobs;
    it.top_logprobs = s.req->req.top_logprobs;
    it.capture_routing = s.req->req.return_routing;
    plan.items.push_back(std::move(it));
  }
  ++next_step_;
  take_in_flight(plan);
  ++counters_.steps_ahead;
  return plan;
}

cache::reserve_request scheduler::reserve_ahead() {
  cache::reserve_request req;
  if (planning_ || paused_) return req;
  const int64_t P = cache_cfg_.page_size;
  for (const order_key& k : running_) {
    seq& s = *seqs_.at(std::get<2>(k));
    if (s.ended || s.retract_pending || int64_t(s.tokens.size()) != s.n_computed + 1) continue;  // not decoding
    // Positions it will have computed within the next k decode steps, and at
    // most ever: its last sampled token is never fed.
    int64_t last = s.n_prompt + s.req->req.max_new_tokens - 1;
    if (params_.max_context > 0) last = std::min(last, params_.max_context - 1);
    const int64_t n_tokens = std::min(s.n_computed + s.in_flight + k_reserve_ahead_tokens, last);
    const int64_t pages = (n_tokens + P - 1) / P;
    if (pages <= int64_t(s.full_pages.size()) || pages <= s.pages_asked) continue;
    s.pages_asked = pages;
    req.push_back({s.id, s.cache_id, n_tokens});
  }
  return req;
}

void scheduler::apply_reserved(const cache::reserve_grants& g) {
  for (const cache::slot_reserved& r : g) {
    auto it = seqs_.find(r.seq);
    if (it == seqs_.end()) continue;
    seq& s = *it->second;
    const size_t held = s.full_pages.size();
    // Ended, preempted or admitted again since it asked (the shard released
    // those pages with that request), or granted as much by a step since.
    if (s.ended || !s.running || s.cache_id != r.cache_id || r.full.size() <= held) continue;
    HART_CHECK(std::equal(s.full_pages.begin(), s.full_pages.end(), r.full.begin()))
        << "pages reserved ahead for seq " << s.id << " do not extend its page table";
    s.full_pages.insert(s.full_pages.end(), r.full.begin() + held, r.full.end());
    s.swa_pages.insert(s.swa_pages.end(), r.swa.begin() + held, r.swa.end());
    counters_.pages_ahead += int64_t(r.full.size() - held);
  }
}

step_plan scheduler::schedule(cache::cache_shard& shard) {
  std::optional<cache::slot_request> req = schedule_begin();
  shard.apply(take_cache_ops());
  if (!req) return schedule_end(nullptr);
  const cache::slot_grants g = shard.plan(*req);
  return schedule_end(&g);
}

event_batch scheduler::discard(const step_plan& plan) {
  HART_CHECK(!in_flight_steps_.empty() && plan.step == in_flight_steps_.front())
      << "discard(): step " << plan.step << " is not the oldest in flight";
  in_flight_steps_.pop_front();
  for (const step_item& item : plan.items) {
    seq& s = *seqs_.at(item.seq_id);
    --s.in_flight;
    if (s.ended) {  // aborted while in flight
      if (s.in_flight == 0) {
        cache_op(cache::cache_op::kind::abort, s);
        seqs_.erase(s.id);
      }
      continue;
    }
    if (s.retract_pending && s.in_flight == 0) {
      s.retract_pending = false;
      preempt(s);
    }
  }
  return {};
}

event_batch scheduler::complete(const step_plan& plan, const step_result& result) {
  HART_CHECK(!in_flight_steps_.empty() && plan.step == in_flight_steps_.front() && result.step == plan.step)
      << "complete(): step " << plan.step << " / result " << result.step << " is not the oldest in flight";
  in_flight_steps_.pop_front();
  event_batch ev;
  size_t k = 0, kr = 0, kl = 0;
  for (const step_item& item : plan.items) {
    seq& s = *seqs_.at(item.seq_id);
    --s.in_flight;
    if (item.prompt_logprobs && result.error.ok()) {
      HART_CHECK(kl < result.prompt_logprobs.size() && result.prompt_logprobs[kl].seq_id == item.seq_id &&
                 result.prompt_logprobs[kl].next.size() == item.tokens.size())
          << "step_result's prompt log-probs do not match the plan at item " << kl;
      const std::vector<float>& next = result.prompt_logprobs[kl++].next;
      // Row r predicts position n_computed + r + 1; a recomputed chunk writes the same values again.
      if (s.prompt_logprobs.empty()) s.prompt_logprobs.assign(size_t(s.n_prompt), std::nanf(""));
      for (size_t r = 0; r < next.size(); ++r) {
        const int64_t pos = item.n_computed + int64_t(r) + 1;
        if (pos < s.n_prompt) s.prompt_logprobs[size_t(pos)] = next[r];
      }
    }
    if (item.capture_routing && result.error.ok()) {
      HART_CHECK(kr < result.routing.size() && result.routing[kr].seq_id == item.seq_id &&
                 result.routing[kr].trace.positions == int64_t(item.tokens.size()))
          << "step_result's routing does not match the plan at item " << kr;
      const routing_trace& part = result.routing[kr++].trace;
      if (s.req->req.return_indexer_picks) {
        s.routing.write(part, item.n_computed);
      } else {  // experts only: the picks are not kept
        routing_trace experts;
        experts.positions = part.positions;
        experts.experts = part.experts;
        s.routing.write(experts, item.n_computed);
      }
    }
    const sampled_token* tok = nullptr;
    if (item.sample_last && result.error.ok()) {
      HART_CHECK(k < result.sampled.size() && result.sampled[k].seq_id == item.seq_id)
          << "step_result does not match the plan at item " << k;
      tok = &result.sampled[k++];
    }
    if (s.ended) {  // ended while in flight (aborted, or finished by a step before this one)
      if (s.in_flight == 0) {
        cache_op(cache::cache_op::kind::abort, s);
        seqs_.erase(s.id);
      }
      continue;
    }
    if (!result.error.ok()) {
      finish(s, finish_reason::error, result.error.to_string(), ev);
      continue;
    }
    s.n_computed += int64_t(item.tokens.size());
    counters_.fed_tokens += int64_t(item.tokens.size());
    cache::cache_op adv{cache::cache_op::kind::advance, s.cache_id, s.n_computed, {}};
    if (s.n_computed > s.n_known) {
      adv.appended.assign(s.tokens.begin() + s.n_known, s.tokens.begin() + s.n_computed);
      s.n_known = s.n_computed;
    }
    cache_ops_.push_back(std::move(adv));
    // As the shard's advance does: SWA pages that left the window are released.
    const size_t first_swa = size_t(std::min<int64_t>(cache_cfg_.first_live_swa_page(s.n_computed), int64_t(s.swa_pages.size())));
    std::fill(s.swa_pages.begin(), s.swa_pages.begin() + first_swa, cache::no_page);
    if (s.n_computed >= s.n_prompt) s.prompt_done = true;
    if (tok && s.req->req.max_new_tokens == 0) {  // the prompt only: scored, nothing generated
      finish(s, finish_reason::length, "", ev);
      continue;
    }
    if (tok) {
      if (tok->token < 0 || tok->token >= params_.vocab_size) {
        finish(s, finish_reason::error, "worker sampled token " + std::to_string(tok->token) + " outside the vocabulary", ev);
        continue;
      }
      s.tokens.push_back(tok->token);
      ++counters_.generated_tokens;
      if (s.first_token_us < 0) {
        s.first_token_us = clock_();
        counters_.ttft_us_sum += s.first_token_us - s.req->arrival_us;
        ++counters_.ttft_count;
        counters_.ttft.add(double(s.first_token_us - s.req->arrival_us) * 1e-6);
      }
      stop_outcome o = s.stop.push(tok->token);
      token_event te;
      te.request_id = s.req->req.id;
      te.sample = s.sample;
      te.token = tok->token;
      if (s.req->req.logprobs) te.logprob = tok->logprob;
      if (s.req->req.top_logprobs > 0) te.top_logprobs = tok->top_logprobs;
      te.text = std::move(o.text);
      ev.tokens.push_back(std::move(te));
      if (!o.done && params_.max_context > 0 && int64_t(s.tokens.size()) >= params_.max_context) {
        o.done = true;
        o.reason = finish_reason::length;
        ev.tokens.back().text += s.stop.release();
      }
      if (o.done) {
        finish(s, o.reason, "", ev);
        continue;
      }
    }
    if (s.retract_pending && s.in_flight == 0) {
      s.retract_pending = false;
      preempt(s);
    }
  }
  HART_CHECK(k == result.sampled.size() || !result.error.ok()) << "step_result has extra tokens";
  return ev;
}

}  // namespace hart::sched
