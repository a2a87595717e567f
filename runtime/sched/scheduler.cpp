#include "runtime/sched/scheduler.h"

#include "runtime/core/check.h"
#include "runtime/sched/scheduler_seq.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace hart::sched {

status scheduler_params::validate() const {
  if (max_batch_tokens < 1)
    return invalid_argument("scheduler: max_batch_tokens %lld < 1", (long long)max_batch_tokens);
  if (max_running < 1) return invalid_argument("scheduler: max_running %lld < 1", (long long)max_running);
  if (prefill_chunk < 1)
    return invalid_argument("scheduler: prefill_chunk %lld < 1", (long long)prefill_chunk);
  if (vocab_size < 1) return invalid_argument("scheduler: vocab_size %d < 1", vocab_size);
  if (max_context < 0) return invalid_argument("scheduler: max_context %lld < 0", (long long)max_context);
  if (speculative_tokens < 0 || speculative_tokens > k_max_speculative_tokens)
    return invalid_argument("scheduler: speculative_tokens %lld outside 0..%lld",
                            (long long)speculative_tokens, (long long)k_max_speculative_tokens);
  if (speculative_tokens > 0 && draft_with == drafter::ngram) HART_RETURN_IF_ERROR(ngram.validate());
  return {};
}

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
void scheduler::enqueue(seq& s) {
  waiting_.insert(key(s));
}
void scheduler::dequeue(seq& s) {
  waiting_.erase(key(s));
}
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
  if (requests_.count(r.id))
    return failed_precondition("request %llu is still live", (unsigned long long)r.id);
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

void scheduler::resume() {
  paused_ = false;
}

void scheduler::flush_cache() {
  cache_ops_.push_back({cache::cache_op::kind::flush, -1, 0, {}});
}

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
  s.drafts.clear();
  s.mtp_next.clear();
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

  if (s.running)
    remove_running(s);
  else
    dequeue(s);
  auto rit = requests_.find(s.req->req.id);
  HART_CHECK(rit != requests_.end());
  rit->second->seq_ids[size_t(s.sample)] = 0;
  if (--rit->second->live == 0) requests_.erase(rit);
  if (s.in_flight > 0) {  // the worker may still use its pages: released in complete()
    s.ended = true;
    return;
  }
  if (s.has_cache)
    cache_op(reason == finish_reason::error ? cache::cache_op::kind::abort : cache::cache_op::kind::finish,
             s);
  seqs_.erase(s.id);
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
  size_t k = 0, kr = 0, kl = 0, kd = 0;
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
    int64_t n_sampled = 0;  // 1, or a verify item's kept drafts + 1
    if (item.sample_last && result.error.ok()) {
      n_sampled = item_sampled_count(item, result, k);
      HART_CHECK(n_sampled > 0) << "step_result does not match the plan at item " << k;
    }
    const size_t first_sampled = k;
    k += size_t(n_sampled);
    if (item.mtp_kv) s.mtp_next.clear();
    if (item.mtp_drafts > 0 && item.sample_last && result.error.ok()) {
      HART_CHECK(kd < result.drafts.size() && result.drafts[kd].seq_id == item.seq_id)
          << "step_result's drafts do not match the plan at item " << kd;
      s.mtp_next = result.drafts[kd++].tokens;
      if (std::any_of(s.mtp_next.begin(), s.mtp_next.end(),
                      [&](int32_t t) { return t < 0 || t >= params_.vocab_size; }))
        s.mtp_next.clear();  // not a token: no drafts rather than a failed verify pass
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
    counters_.fed_tokens += int64_t(item.tokens.size());
    const bool prompt_only = n_sampled > 0 && s.req->req.max_new_tokens == 0;  // scored, nothing generated
    emitted out;
    if (n_sampled > 0 && !prompt_only) out = emit_tokens(s, result, first_sampled, n_sampled, ev);
    // A verify pass keeps the positions of the tokens it emitted; the rest were taken back.
    const int64_t kept = item.n_drafts() > 0 ? out.kept : int64_t(item.tokens.size());
    if (item.n_drafts() > 0) {
      ++counters_.verify_passes;
      counters_.drafted_tokens += item.n_drafts();
      counters_.accepted_drafts += n_sampled - 1;
    }
    s.n_computed += kept;
    cache::cache_op adv{cache::cache_op::kind::advance, s.cache_id, s.n_computed, {}};
    if (s.n_computed > s.n_known) {
      adv.appended.assign(s.tokens.begin() + s.n_known, s.tokens.begin() + s.n_computed);
      s.n_known = s.n_computed;
    }
    cache_ops_.push_back(std::move(adv));
    // As the shard's advance does: SWA pages that left the window are released.
    const size_t first_swa =
        size_t(std::min<int64_t>(cache_cfg_.first_live_swa_page(s.n_computed), int64_t(s.swa_pages.size())));
    std::fill(s.swa_pages.begin(), s.swa_pages.begin() + first_swa, cache::no_page);
    if (s.n_computed >= s.n_prompt) s.prompt_done = true;
    if (prompt_only) {
      finish(s, finish_reason::length, "", ev);
      continue;
    }
    if (!out.error.empty()) {
      finish(s, finish_reason::error, out.error, ev);
      continue;
    }
    if (out.stop.done) {
      finish(s, out.stop.reason, "", ev);
      continue;
    }
    if (s.retract_pending && s.in_flight == 0) {
      s.retract_pending = false;
      preempt(s);
    }
  }
  HART_CHECK(k == result.sampled.size() || !result.error.ok()) << "step_result has extra tokens";
  return ev;
}

scheduler::emitted scheduler::emit_tokens(seq& s, const step_result& result, size_t k, int64_t n,
                                          event_batch& ev) {
  emitted out;
  for (int64_t j = 0; j < n && !out.stop.done; ++j) {
    const sampled_token& tok = result.sampled[k + size_t(j)];
    if (tok.token < 0 || tok.token >= params_.vocab_size) {
      out.error = "worker sampled token " + std::to_string(tok.token) + " outside the vocabulary";
      break;
    }
    s.tokens.push_back(tok.token);
    ++out.kept;
    ++counters_.generated_tokens;
    if (s.first_token_us < 0) {
      s.first_token_us = clock_();
      counters_.ttft_us_sum += s.first_token_us - s.req->arrival_us;
      ++counters_.ttft_count;
      counters_.ttft.add(double(s.first_token_us - s.req->arrival_us) * 1e-6);
    }
    out.stop = s.stop.push(tok.token);
    token_event te;
    te.request_id = s.req->req.id;
    te.sample = s.sample;
    te.token = tok.token;
    if (s.req->req.logprobs) te.logprob = tok.logprob;
    if (s.req->req.top_logprobs > 0) te.top_logprobs = tok.top_logprobs;
    te.text = std::move(out.stop.text);
    ev.tokens.push_back(std::move(te));
    if (!out.stop.done && params_.max_context > 0 && int64_t(s.tokens.size()) >= params_.max_context) {
      out.stop.done = true;
      out.stop.reason = finish_reason::length;
      ev.tokens.back().text += s.stop.release();
    }
  }
  return out;
}

status_or<std::unique_ptr<scheduler>> scheduler::create(const serving_params& params, const tokenizer* tok,
                                                        std::function<int64_t()> clock) {
  HART_RETURN_IF_ERROR(params.cache.validate());
  HART_RETURN_IF_ERROR(params.sched.validate());
  return std::make_unique<scheduler>(params.sched, params.cache, tok, std::move(clock));
}

event_batch scheduler::fail_step(const step_plan& plan, const status& why, bool pages_lost) {
  step_result failed;
  failed.step = plan.step;
  failed.error = status(why.code(), "worker failed: " + why.message());
  event_batch ev = complete(plan, failed);
  if (pages_lost) ev.append(retract_all_and_flush());
  return ev;
}

event_batch scheduler::lose_pages(const step_plan& plan) {
  event_batch ev = discard(plan);
  ev.append(retract_all_and_flush());
  return ev;
}

event_batch scheduler::retract_all_and_flush() {
  // The KV behind every page died with the worker: whatever still runs must
  // recompute, and no cached prefix may be matched again.
  const bool was_paused = paused_;
  event_batch ev = pause(pause_mode::retract);
  flush_cache();
  if (!was_paused) resume();
  return ev;
}

}  // namespace hart::sched
