#include "runtime/sched/step.h"

#include <unordered_map>

namespace hart::sched {

int64_t step_plan::n_tokens() const {
  int64_t n = 0;
  for (const step_item& it : items) n += int64_t(it.tokens.size());
  return n;
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
