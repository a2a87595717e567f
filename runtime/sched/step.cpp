#include "runtime/sched/step.h"

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

}  // namespace hart::sched
