#include "runtime/cache/cache_shard.h"

#include "runtime/core/check.h"

#include <algorithm>
#include <set>

namespace hart::cache {

slot_grants cache_shard::plan(const slot_request& req) {
  slot_grants g;
  g.step = req.step;
  int64_t budget = req.budget;
  int64_t n_running = int64_t(req.running.size());
  std::vector<bool> alive(req.running.size(), true), granted(req.running.size(), false);
  bool any_granted = false;
  std::set<uint64_t> failed;
  std::vector<slot_admission> requeued;  // preempted in step 1: waiting again

  auto grant = [&](uint64_t seq, bool admitted, request_id id, int64_t from, int64_t n) {
    slot_decision d;
    d.seq = seq;
    d.admitted = admitted;
    d.cache_id = id;
    d.n_computed = from;
    d.n_tokens = n;
    const request_pages& pg = index_.pages(id);
    d.full = pg.full;
    d.swa = pg.swa;
    g.decisions.push_back(std::move(d));
    budget -= n;
  };
  auto fail = [&](uint64_t seq, std::string message) {
    slot_decision d;
    d.seq = seq;
    d.verdict = slot_verdict::failed;
    d.message = std::move(message);
    g.decisions.push_back(std::move(d));
    failed.insert(seq);
  };
  auto preempt = [&](size_t i) {
    const slot_continuation& c = req.running[i];
    auto tokens = std::make_shared<std::vector<int32_t>>(index_.tokens(c.cache_id));
    tokens->insert(tokens->end(), c.tail.begin(), c.tail.end());
    requeued.push_back({c.seq, c.order, std::move(tokens), 0});
    const status st = index_.finish_at(c.cache_id, c.n_computed);
    HART_CHECK(st.ok()) << st.to_string();
    slot_decision d;
    d.seq = c.seq;
    d.verdict = slot_verdict::preempted;
    g.decisions.push_back(std::move(d));
    alive[i] = false;
    --n_running;
  };

  // 1. Continuations.
  for (size_t i = 0; i < req.running.size(); ++i) {
    if (budget <= 0) break;
    if (!alive[i]) continue;  // preempted for an earlier one
    const slot_continuation& c = req.running[i];
    const int64_t n = std::min({c.n_remaining, req.prefill_chunk, budget});
    for (;;) {
      const status st = index_.reserve(c.cache_id, c.n_computed + n);
      if (st.ok()) {
        grant(c.seq, false, c.cache_id, c.n_computed, n);
        granted[i] = true;
        any_granted = true;
        break;
      }
      if (st.code() != status_code::resource_exhausted) {
        HART_CHECK(index_.abort(c.cache_id).ok());
        fail(c.seq, st.to_string());
        alive[i] = false;
        --n_running;
        break;
      }
      size_t victim = req.running.size();
      for (size_t j = req.running.size(); j-- > 0;) {
        if (j != i && alive[j] && !granted[j]) {
          victim = j;
          break;
        }
      }
      if (victim < req.running.size() && victim > i) {
        preempt(victim);
        continue;
      }
      if (victim == req.running.size() && !any_granted) {  // it alone holds pages, and still does not fit
        HART_CHECK(index_.abort(c.cache_id).ok());
        fail(c.seq, "needs more KV memory than the cache holds: " + st.message());
        alive[i] = false;
        --n_running;
        break;
      }
      preempt(i);
      break;
    }
  }
  // 2. Admissions; the first that does not fit blocks the rest.
  std::vector<const slot_admission*> waiting;
  for (const slot_admission& a : req.waiting) waiting.push_back(&a);
  for (const slot_admission& a : requeued) waiting.push_back(&a);
  std::stable_sort(waiting.begin(), waiting.end(),
                   [](const slot_admission* x, const slot_admission* y) { return x->order < y->order; });
  for (const slot_admission* ap : waiting) {
    const slot_admission& a = *ap;
    if (budget <= 0 || n_running >= req.max_running) break;
    if (a.blocked_by != 0 && !failed.count(a.blocked_by)) continue;
    const std::vector<int32_t>& tokens = *a.tokens;
    status_or<request_id> id = index_.admit(tokens, a.match_prefix);
    if (!id.ok()) {
      fail(a.seq, id.get_status().to_string());
      continue;
    }
    const int64_t n_cached = index_.pages(*id).n_computed;
    const int64_t n = std::min({int64_t(tokens.size()) - n_cached, req.prefill_chunk, budget});
    const status st = index_.reserve(*id, n_cached + n);
    if (!st.ok()) {
      HART_CHECK(index_.abort(*id).ok());
      if (st.code() == status_code::resource_exhausted && n_running > 0) break;  // stays queued
      fail(a.seq, "needs more KV memory than the cache holds: " + st.message());
      continue;
    }
    grant(a.seq, true, *id, n_cached, n);
    ++n_running;
  }
  return g;
}

reserve_grants cache_shard::reserve(const reserve_request& req) {
  reserve_grants g;
  for (const slot_reservation& r : req) {
    const status st = index_.reserve(r.cache_id, r.n_tokens);
    if (st.code() == status_code::resource_exhausted) continue;
    HART_CHECK(st.ok()) << st.to_string();
    const request_pages& pg = index_.pages(r.cache_id);
    g.push_back({r.seq, r.cache_id, pg.full, pg.swa});
  }
  return g;
}

prefill_reserved cache_shard::reserve_prefilled(const prefill_reservation& r) {
  prefill_reserved out;
  out.key = r.key;
  if (!r.tokens || r.tokens->empty() || r.n_tokens < int64_t(r.tokens->size())) {
    out.result = invalid_argument("reserve_prefilled: %lld positions for a prompt of %zu tokens",
                                  (long long)r.n_tokens, r.tokens ? r.tokens->size() : size_t{0});
    return out;
  }
  status_or<request_id> id = index_.admit(*r.tokens);
  if (!id.ok()) {
    out.result = id.get_status();
    return out;
  }
  if (status st = index_.reserve(*id, r.n_tokens); !st.ok()) {
    HART_CHECK(index_.abort(*id).ok());
    out.result = st;
    return out;
  }
  const request_pages& pg = index_.pages(*id);
  out.cache_id = *id;
  out.n_cached = pg.n_computed;
  out.full = pg.full;
  out.swa = pg.swa;
  return out;
}

void cache_shard::apply(const cache_op_batch& ops) {
  for (const cache_op& op : ops) {
    status st;
    switch (op.op) {
      case cache_op::kind::advance:
        st = index_.advance_to(op.cache_id, op.appended, op.n_computed);
        break;
      case cache_op::kind::finish:
        st = index_.finish_at(op.cache_id, op.n_computed);
        break;
      case cache_op::kind::abort:
        st = index_.abort(op.cache_id);
        break;
      case cache_op::kind::flush:
        index_.flush();
        break;
    }
    HART_CHECK(st.ok()) << st.to_string();
  }
}

}  // namespace hart::cache
