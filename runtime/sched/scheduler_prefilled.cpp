// The scheduler's entry for a sequence whose prompt was computed elsewhere
// (prefill/decode disaggregation, docs/pd.md): it joins the running set as a
// sequence that has just computed its prompt and sampled its first token
// would after complete(), so the next step decodes it like any other.
#include "runtime/core/check.h"
#include "runtime/sched/scheduler.h"
#include "runtime/sched/scheduler_seq.h"

#include <algorithm>

namespace hart::sched {

status prefilled_supported(const gen_request& r) {
  if (r.n != 1) return unimplemented("prefill/decode disaggregation: n = %d samples (one only)", r.n);
  if (r.return_routing) return unimplemented("prefill/decode disaggregation: return_routing");
  if (r.logprob_start >= 0) return unimplemented("prefill/decode disaggregation: prompt log-probs");
  if (r.max_new_tokens < 1) return unimplemented("prefill/decode disaggregation: max_new_tokens 0");
  return {};
}

status_or<event_batch> scheduler::admit_prefilled(gen_request r, const prefilled& p) {
  HART_RETURN_IF_ERROR(r.validate(params_.vocab_size, params_.max_context));
  if (status st = prefilled_supported(r); !st.ok()) return invalid_argument("%s", st.message().c_str());
  if (requests_.count(r.id))
    return failed_precondition("request %llu is still live", (unsigned long long)r.id);
  const int64_t n = int64_t(r.prompt.size());
  if (p.cache_id < 0 || int64_t(p.full.size()) * cache_cfg_.page_size < n + 1 ||
      p.swa.size() != p.full.size())
    return invalid_argument("admit_prefilled: pages for %zu positions, the prompt and a step need %lld",
                            p.full.size() * size_t(cache_cfg_.page_size), (long long)(n + 1));
  if (p.first.token < 0 || p.first.token >= params_.vocab_size)
    return invalid_argument("admit_prefilled: first token %d outside the vocabulary", p.first.token);

  auto rec = std::make_shared<request_rec>();
  rec->req = std::move(r);
  rec->arrival_us = p.arrival_us;
  rec->live = 1;
  auto sp = std::make_unique<seq>(rec, tok_, params_.eos_token_id);
  seq& s = *sp;
  s.id = next_seq_id_++;
  s.tokens = rec->req.prompt;
  s.n_prompt = n;
  s.ticket = take_ticket(rec->req.client);
  s.cache_id = p.cache_id;
  s.has_cache = true;
  s.n_computed = n;
  s.n_known = n;
  s.cached_tokens = p.n_cached;
  s.prompt_done = true;
  s.full_pages = p.full;
  s.swa_pages = p.swa;
  s.first_sched_us = p.arrival_us;
  rec->seq_ids.push_back(s.id);
  requests_.emplace(rec->req.id, rec);
  seqs_.emplace(s.id, std::move(sp));
  add_running(s);
  ++counters_.submitted;

  // As complete() does for a computed prompt: the shard learns the positions
  // (inserting the prompt's full pages into the tree), SWA pages that left
  // the window are released.
  cache_ops_.push_back({cache::cache_op::kind::advance, s.cache_id, n, {}});
  const size_t first_swa =
      size_t(std::min<int64_t>(cache_cfg_.first_live_swa_page(n), int64_t(s.swa_pages.size())));
  std::fill(s.swa_pages.begin(), s.swa_pages.begin() + first_swa, cache::no_page);

  // The first token, as complete() takes a sampled one.
  event_batch ev;
  step_result first;
  first.sampled.push_back(p.first);
  const emitted out = emit_tokens(s, first, 0, 1, ev);
  if (out.stop.done) finish(s, out.stop.reason, "", ev);
  return ev;
}

}  // namespace hart::sched
