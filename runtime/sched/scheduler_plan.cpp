// The scheduler's planning half: which sequences a step feeds and how much
// (make_item), the two halves around the shard (schedule_begin / schedule_end,
// within the pages already granted when it can), the step planned ahead of
// the one in flight, and pages reserved ahead of need.
#include "runtime/core/check.h"
#include "runtime/sched/scheduler.h"
#include "runtime/sched/scheduler_seq.h"

#include <algorithm>

namespace hart::sched {

bool scheduler::sibling_blocked(const seq& s) const {
  if (s.sample == 0 || s.cached_tokens >= 0) return false;
  auto rit = requests_.find(s.req->req.id);
  const uint64_t first = rit->second->seq_ids[0];
  if (first == 0) return false;
  return !seqs_.at(first)->prompt_done;
}

void scheduler::propose_drafts(seq& s) {
  s.drafts.clear();
  const int64_t n = int64_t(s.tokens.size());
  if (params_.speculative_tokens == 0 || n != s.n_computed + 1 || s.n_computed < s.n_prompt)
    return;  // not decoding
  // The step emits at most drafts + 1 tokens: none past max_new_tokens or max_context.
  int64_t k = std::min(params_.speculative_tokens, s.req->req.max_new_tokens - (n - s.n_prompt) - 1);
  if (params_.max_context > 0) k = std::min(k, params_.max_context - n - 1);
  if (k <= 0) return;
  if (params_.draft_with == scheduler_params::drafter::mtp) {
    s.drafts.assign(s.mtp_next.begin(),
                    s.mtp_next.begin() + std::min<int64_t>(k, int64_t(s.mtp_next.size())));
  } else {
    s.drafts = ngram_draft(s.tokens, k, params_.ngram);
  }
}

int64_t scheduler::wanted(const seq& s) const {
  return int64_t(s.tokens.size()) - s.n_computed + int64_t(s.drafts.size());
}

step_item scheduler::make_item(seq& s, int64_t chunk) {
  step_item it;
  it.seq_id = s.id;
  it.request_id = s.req->req.id;
  it.sample = s.sample;
  const int64_t known = std::min(chunk, int64_t(s.tokens.size()) - s.n_computed);
  it.tokens.assign(s.tokens.begin() + s.n_computed, s.tokens.begin() + s.n_computed + known);
  it.full_pages = s.full_pages;
  it.swa_pages = s.swa_pages;
  it.n_computed = s.n_computed;
  it.sample_last = s.n_computed + known == int64_t(s.tokens.size());
  it.sampling = s.req->req.sampling(s.sample);
  const uint64_t seed = it.sampling.seed;
  const int64_t n_generated = int64_t(s.tokens.size()) - s.n_prompt;
  it.sampling.seed = step_seed(seed, n_generated);
  // Drafts fill what the grant gives past the known tokens; row j + 1 draws as token n_generated + j + 1
  // would.
  for (int64_t j = 0; j < chunk - known; ++j) {
    it.tokens.push_back(s.drafts[size_t(j)]);
    it.draft_seeds.push_back(step_seed(seed, n_generated + j + 1));
  }
  if (params_.speculative_tokens > 0 && params_.draft_with == scheduler_params::drafter::mtp) {
    it.mtp_kv = true;  // and the token after a chunk that samples nothing, for its last position's KV
    if (!it.sample_last) it.next_token = s.tokens[size_t(s.n_computed + known)];
    if (it.sample_last) it.mtp_drafts = int32_t(params_.speculative_tokens);
  }
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
  HART_CHECK(in_flight_steps_.empty() && !planning_)
      << "schedule_begin() while a step is in flight or planned";
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
  if (params_.speculative_tokens > 0) {
    for (const order_key& k : running_) propose_drafts(*seqs_.at(std::get<2>(k)));
  }

  // Within grants: every running sequence the budget reaches fits in its
  // pages, and nothing can be admitted.
  int64_t budget = params_.max_batch_tokens;
  bool within = true;
  for (const order_key& k : running_) {
    if (budget <= 0) break;
    const seq& s = *seqs_.at(std::get<2>(k));
    const int64_t chunk = std::min({wanted(s), params_.prefill_chunk, budget});
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
      req.running.push_back({s.id, order, s.cache_id, s.n_computed, wanted(s),
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
    const int64_t chunk = std::min({wanted(s), params_.prefill_chunk, budget});
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
      case cache::slot_verdict::preempted:
        requeue(s);
        break;
      case cache::slot_verdict::failed:
        s.has_cache = false;  // the shard aborted it
        finish(s, finish_reason::error, d.message, outbox_);
        break;
    }
  }
}

step_plan scheduler::schedule_end(const cache::slot_grants* grants) {
  HART_CHECK(planning_) << "schedule_end() without schedule_begin()";
  HART_CHECK((grants != nullptr) == planning_with_shard_)
      << "schedule_end(): grants " << (grants ? "given" : "missing");
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
  // Speculative steps: the tokens the step in flight keeps, and so the next drafts, are not known yet.
  if (in_flight_steps_.size() != 1 || planning_ || paused_ || !waiting_.empty() || running_.empty() ||
      params_.speculative_tokens > 0)
    return none;
  const int64_t P = cache_cfg_.page_size;
  step_plan plan;
  plan.step = next_step_;
  for (const order_key& k : running_) {
    const seq& s = *seqs_.at(std::get<2>(k));
    // Every running sequence decodes one token in the step in flight (it then
    // has one token more than it computed) and goes on: within its pages,
    // its limits and no deadline, retract or end pending.
    const int64_t n_generated =
        int64_t(s.tokens.size()) - s.n_prompt;  // the step in flight samples number n_generated
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
    if (s.ended || s.retract_pending || int64_t(s.tokens.size()) != s.n_computed + 1)
      continue;  // not decoding
    // Positions it will have computed within the next k decode steps, and at
    // most ever: its last sampled token is never fed.
    int64_t last = s.n_prompt + s.req->req.max_new_tokens - 1;
    if (params_.max_context > 0) last = std::min(last, params_.max_context - 1);
    const int64_t n_tokens =
        std::min(s.n_computed + s.in_flight + k_reserve_ahead_tokens + params_.speculative_tokens, last);
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

}  // namespace hart::sched
