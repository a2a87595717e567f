#include "runtime/sched/sync_scheduler_oracle.h"

#include <algorithm>
#include <chrono>

#include "runtime/core/check.h"

namespace hart::sched::testing {

struct sync_scheduler_oracle::request_rec {
  gen_request req;
  int64_t arrival_us = 0;
  std::vector<uint64_t> seq_ids;  // by sample; 0 once that sample ended
  int32_t live = 0;
};

struct sync_scheduler_oracle::seq {
  seq(std::shared_ptr<request_rec> r, const tokenizer* tok, int32_t eos)
      : req(std::move(r)), stop(req->req, tok, eos) {}

  uint64_t id = 0;
  std::shared_ptr<request_rec> req;
  int32_t sample = 0;
  std::vector<int32_t> tokens;  // prompt + generated; the last one is not computed yet once decoding
  int64_t n_prompt = 0;
  int64_t n_computed = 0;       // mirrors the cache request's n_computed while running
  cache::request_id cache_id = -1;
  bool has_cache = false;
  bool running = false;
  bool prompt_done = false;     // the prompt was computed once (its pages are in the cache)
  bool in_flight = false;       // part of the plan being executed
  bool ended = false;           // finish event sent while in flight; cleaned up in complete()
  bool retract_pending = false;
  int64_t cached_tokens = -1;   // prefix hit at first admission
  uint64_t ticket = 0;
  int64_t first_sched_us = -1, first_token_us = -1;
  stop_rules stop;
};

sync_scheduler_oracle::sync_scheduler_oracle(const scheduler_params& params, cache::shadow_radix& cache, const tokenizer* tok,
                     std::function<int64_t()> clock)
    : params_(params), cache_(cache), tok_(tok), clock_(std::move(clock)) {
  HART_CHECK(params_.validate().ok()) << params_.validate().to_string();
  if (!clock_) {
    clock_ = [] {
      return int64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count());
    };
  }
}

sync_scheduler_oracle::~sync_scheduler_oracle() = default;

sync_scheduler_oracle::order_key sync_scheduler_oracle::key(const seq& s) const {
  return {-int64_t(s.req->req.priority), s.ticket, s.id};
}
void sync_scheduler_oracle::enqueue(seq& s) { waiting_.insert(key(s)); }
void sync_scheduler_oracle::dequeue(seq& s) { waiting_.erase(key(s)); }
void sync_scheduler_oracle::add_running(seq& s) {
  running_.insert(key(s));
  s.running = true;
}
void sync_scheduler_oracle::remove_running(seq& s) {
  running_.erase(key(s));
  s.running = false;
}

// -- requests ---------------------------------------------------------------

status sync_scheduler_oracle::submit(gen_request r) {
  HART_RETURN_IF_ERROR(r.validate(params_.vocab_size));
  if (requests_.count(r.id)) return failed_precondition("request %llu is still live", (unsigned long long)r.id);
  if (params_.max_context > 0 && int64_t(r.prompt.size()) >= params_.max_context) {
    return out_of_range("request %llu: prompt of %zu tokens leaves no room under max_context %lld",
                        (unsigned long long)r.id, r.prompt.size(), (long long)params_.max_context);
  }
  auto rec = std::make_shared<request_rec>();
  rec->req = std::move(r);
  rec->arrival_us = clock_();
  rec->live = rec->req.n;
  for (int32_t i = 0; i < rec->req.n; ++i) {
    auto s = std::make_unique<seq>(rec, tok_, params_.eos_token_id);
    s->id = next_seq_id_++;
    s->sample = i;
    s->tokens = rec->req.prompt;
    s->n_prompt = int64_t(s->tokens.size());
    s->ticket = next_ticket_++;
    rec->seq_ids.push_back(s->id);
    enqueue(*s);
    seqs_.emplace(s->id, std::move(s));
  }
  const uint64_t id = rec->req.id;
  requests_.emplace(id, std::move(rec));
  ++counters_.submitted;
  return {};
}

event_batch sync_scheduler_oracle::abort(uint64_t id) {
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

event_batch sync_scheduler_oracle::abort_all() {
  event_batch ev;
  std::vector<uint64_t> ids;
  for (const auto& kv : requests_) ids.push_back(kv.first);
  for (uint64_t id : ids) ev.append(abort(id));
  return ev;
}

// -- control ----------------------------------------------------------------

event_batch sync_scheduler_oracle::pause(pause_mode mode) {
  paused_ = true;
  if (mode == pause_mode::abort) return abort_all();
  if (mode == pause_mode::retract) {
    std::vector<uint64_t> ids;
    for (const order_key& k : running_) ids.push_back(std::get<2>(k));
    for (uint64_t id : ids) {
      seq& s = *seqs_.at(id);
      if (s.in_flight) {
        s.retract_pending = true;
      } else {
        preempt(s);
      }
    }
  }
  return {};
}

void sync_scheduler_oracle::resume() { paused_ = false; }

void sync_scheduler_oracle::flush_cache() { cache_.flush(); }

event_batch sync_scheduler_oracle::take_events() {
  event_batch ev = std::move(outbox_);
  outbox_ = {};
  return ev;
}

// -- the step ---------------------------------------------------------------

void sync_scheduler_oracle::preempt(seq& s) {
  HART_CHECK(s.running && !s.in_flight) << "preempt: seq " << s.id;
  status st = cache_.finish(s.cache_id, std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + s.n_computed));
  HART_CHECK(st.ok()) << st.to_string();
  s.has_cache = false;
  s.cache_id = -1;
  s.n_computed = 0;
  remove_running(s);
  enqueue(s);  // same ticket: back to its old place in the queue
  ++counters_.preemptions;
}

void sync_scheduler_oracle::finish(seq& s, finish_reason reason, std::string message, event_batch& ev, std::string text) {
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
  ev.finishes.push_back(std::move(fe));
  ++counters_.finished;

  if (s.running) remove_running(s);
  else dequeue(s);
  auto rit = requests_.find(s.req->req.id);
  HART_CHECK(rit != requests_.end());
  rit->second->seq_ids[size_t(s.sample)] = 0;
  if (--rit->second->live == 0) requests_.erase(rit);
  if (s.in_flight) {  // the worker may still use its pages: released in complete()
    s.ended = true;
    return;
  }
  if (s.has_cache) {
    status st = reason == finish_reason::error
                    ? cache_.abort(s.cache_id)
                    : cache_.finish(s.cache_id, std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + s.n_computed));
    HART_CHECK(st.ok()) << st.to_string();
  }
  seqs_.erase(s.id);
}

bool sync_scheduler_oracle::sibling_blocked(const seq& s) const {
  if (s.sample == 0 || s.cached_tokens >= 0) return false;
  auto rit = requests_.find(s.req->req.id);
  const uint64_t first = rit->second->seq_ids[0];
  if (first == 0) return false;
  return !seqs_.at(first)->prompt_done;
}

bool sync_scheduler_oracle::reserve(seq& s, int64_t n_tokens, const std::set<uint64_t>& planned) {
  for (;;) {
    status st = cache_.reserve(s.cache_id, n_tokens);
    if (st.ok()) return true;
    if (st.code() != status_code::resource_exhausted) {
      finish(s, finish_reason::error, st.to_string(), outbox_);
      return false;
    }
    seq* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      const uint64_t id = std::get<2>(*it);
      if (id != s.id && !planned.count(id)) {
        victim = seqs_.at(id).get();
        break;
      }
    }
    if (victim && key(*victim) > key(s)) {
      preempt(*victim);
      continue;
    }
    if (!victim && planned.empty()) {  // s alone holds pages, and it still does not fit
      finish(s, finish_reason::error, "needs more KV memory than the cache holds: " + st.message(), outbox_);
      return false;
    }
    preempt(s);
    return false;
  }
}

step_item sync_scheduler_oracle::make_item(seq& s, int64_t chunk) {
  const cache::request_pages& pg = cache_.pages(s.cache_id);
  step_item it;
  it.seq_id = s.id;
  it.request_id = s.req->req.id;
  it.sample = s.sample;
  it.tokens.assign(s.tokens.begin() + s.n_computed, s.tokens.begin() + s.n_computed + chunk);
  it.full_pages = pg.full;
  it.swa_pages = pg.swa;
  it.n_computed = s.n_computed;
  it.sample_last = s.n_computed + chunk == int64_t(s.tokens.size());
  it.sampling = s.req->req.sampling(s.sample);
  it.sampling.seed = step_seed(it.sampling.seed, int64_t(s.tokens.size()) - s.n_prompt);
  it.logprobs = s.req->req.logprobs;
  it.top_logprobs = s.req->req.top_logprobs;
  if (s.first_sched_us < 0) s.first_sched_us = clock_();
  return it;
}

step_plan sync_scheduler_oracle::schedule() {
  HART_CHECK(!in_flight_) << "schedule() while step " << in_flight_step_ << " is in flight";
  step_plan plan;
  plan.step = next_step_++;
  if (paused_) return plan;

  // Deadlines.
  const int64_t now = clock_();
  std::vector<seq*> late;
  for (auto& kv : seqs_) {
    const int64_t d = kv.second->req->req.deadline_us;
    if (d > 0 && now > d && !kv.second->ended) late.push_back(kv.second.get());
  }
  for (seq* s : late) finish(*s, finish_reason::abort, "deadline exceeded", outbox_);

  int64_t budget = params_.max_batch_tokens;
  std::set<uint64_t> planned;
  // 1. Running sequences, best first: a decode token or the next prefill chunk.
  std::vector<uint64_t> order;
  for (const order_key& k : running_) order.push_back(std::get<2>(k));
  for (uint64_t id : order) {
    if (budget <= 0) break;
    auto it = seqs_.find(id);
    if (it == seqs_.end() || !it->second->running) continue;  // preempted or ended meanwhile
    seq& s = *it->second;
    const int64_t chunk =
        std::min({int64_t(s.tokens.size()) - s.n_computed, params_.prefill_chunk, budget});
    if (!reserve(s, s.n_computed + chunk, planned)) continue;
    plan.items.push_back(make_item(s, chunk));
    planned.insert(id);
    budget -= chunk;
  }
  // 2. Admission, best first; the first that does not fit blocks the rest (FCFS).
  order.clear();
  for (const order_key& k : waiting_) order.push_back(std::get<2>(k));
  for (uint64_t id : order) {
    if (budget <= 0 || n_running() >= params_.max_running) break;
    seq& s = *seqs_.at(id);
    if (sibling_blocked(s)) continue;
    status_or<cache::request_id> cid = cache_.admit(s.tokens);
    if (!cid.ok()) {
      finish(s, finish_reason::error, cid.get_status().to_string(), outbox_);
      continue;
    }
    const int64_t n_cached = cache_.pages(*cid).n_computed;
    const int64_t chunk = std::min({int64_t(s.tokens.size()) - n_cached, params_.prefill_chunk, budget});
    status st = cache_.reserve(*cid, n_cached + chunk);
    if (!st.ok()) {
      status a = cache_.abort(*cid);
      HART_CHECK(a.ok()) << a.to_string();
      if (st.code() == status_code::resource_exhausted && !running_.empty()) break;  // stays queued
      finish(s, finish_reason::error, "needs more KV memory than the cache holds: " + st.message(), outbox_);
      continue;
    }
    s.cache_id = *cid;
    s.has_cache = true;
    s.n_computed = n_cached;
    if (s.cached_tokens < 0) s.cached_tokens = n_cached;
    dequeue(s);
    add_running(s);
    plan.items.push_back(make_item(s, chunk));
    planned.insert(id);
    budget -= chunk;
  }
  if (!plan.empty()) {
    in_flight_ = true;
    in_flight_step_ = plan.step;
    for (const step_item& it : plan.items) seqs_.at(it.seq_id)->in_flight = true;
    ++counters_.steps;
  }
  return plan;
}

event_batch sync_scheduler_oracle::complete(const step_plan& plan, const step_result& result) {
  HART_CHECK(in_flight_ && plan.step == in_flight_step_ && result.step == plan.step)
      << "complete(): step " << plan.step << " / result " << result.step << " is not the one in flight";
  in_flight_ = false;
  event_batch ev;
  size_t k = 0;
  for (const step_item& item : plan.items) {
    seq& s = *seqs_.at(item.seq_id);
    s.in_flight = false;
    const sampled_token* tok = nullptr;
    if (item.sample_last && result.error.ok()) {
      HART_CHECK(k < result.sampled.size() && result.sampled[k].seq_id == item.seq_id)
          << "step_result does not match the plan at item " << k;
      tok = &result.sampled[k++];
    }
    if (s.ended) {  // aborted while in flight
      status st = cache_.abort(s.cache_id);
      HART_CHECK(st.ok()) << st.to_string();
      seqs_.erase(s.id);
      continue;
    }
    if (!result.error.ok()) {
      finish(s, finish_reason::error, result.error.to_string(), ev);
      continue;
    }
    s.n_computed += int64_t(item.tokens.size());
    counters_.fed_tokens += int64_t(item.tokens.size());
    status a = cache_.advance(s.cache_id, std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + s.n_computed));
    HART_CHECK(a.ok()) << a.to_string();
    if (s.n_computed >= s.n_prompt) s.prompt_done = true;
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
    if (s.retract_pending) {
      s.retract_pending = false;
      preempt(s);
    }
  }
  HART_CHECK(k == result.sampled.size() || !result.error.ok()) << "step_result has extra tokens";
  return ev;
}

}  // namespace hart::sched::testing
