#include "runtime/sched/step.h"

#include <unordered_map>

namespace hart::sched {

int64_t step_plan::n_tokens() const {
  int64_t n = 0;
  for (const step_item& it : items) n += int64_t(it.tokens.size());
  return n;
}

int64_t item_sampled_count(const step_item& item, const step_result& r, size_t from) {
  if (!item.sample_last) return 0;
  size_t end = from;
  while (end < r.sampled.size() && r.sampled[end].seq_id == item.seq_id) ++end;
  const int64_t n = int64_t(end - from);
  if (n < 1 || n > item.n_drafts() + 1) return -1;
  for (int64_t j = 0; j + 1 < n; ++j) {  // kept drafts: tokens[1..]
    if (r.sampled[from + size_t(j)].token != item.tokens[size_t(j + 1)]) return -1;
  }
  return item.n_drafts() > 0 ? n : 1;
}

bool sampled_match_plan(const step_plan& plan, const step_result& r) {
  size_t k = 0;
  for (const step_item& it : plan.items) {
    const int64_t n = item_sampled_count(it, r, k);
    if (n < 0) return false;
    k += size_t(n);
  }
  if (k != r.sampled.size()) return false;
  size_t d = 0;
  for (const step_item& it : plan.items) {
    if (it.mtp_drafts <= 0 || !it.sample_last) continue;
    if (d >= r.drafts.size() || r.drafts[d].seq_id != it.seq_id ||
        int64_t(r.drafts[d].tokens.size()) > it.mtp_drafts)
      return false;
    ++d;
  }
  return d == r.drafts.size();
}

uint64_t step_seed(uint64_t sample_seed, int64_t n_generated) {
  uint64_t x = sample_seed ^ (0x9e3779b97f4a7c15ull * uint64_t(n_generated + 1));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

status fill_planned_ahead(step_plan& plan, const step_result& previous) {
  std::unordered_map<uint64_t, int32_t> by_seq;  // built at the first placeholder
  for (step_item& it : plan.items) {
    if (!it.feed_last_sampled) continue;
    if (by_seq.empty() && previous.error.ok()) {
      for (const sampled_token& t : previous.sampled) by_seq.emplace(t.seq_id, t.token);
    }
    auto t = by_seq.find(it.seq_id);
    if (!previous.error.ok() || t == by_seq.end()) {
      return failed_precondition(
          "step %llu: sequence %llu was planned ahead, but step %llu sampled no token for it",
          (unsigned long long)plan.step, (unsigned long long)it.seq_id, (unsigned long long)previous.step);
    }
    it.tokens = {t->second};
    it.feed_last_sampled = false;
  }
  return {};
}

}  // namespace hart::sched
