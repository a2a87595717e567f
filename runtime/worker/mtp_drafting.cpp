#include "runtime/worker/mtp_drafting.h"

#include <algorithm>

namespace hart::worker {
namespace {

int32_t argmax(const float* row, int64_t n) {
  return int32_t(std::max_element(row, row + n) - row);  // the first of equals, as the sampler's greedy
}

}  // namespace

status mtp_catch_up(const forward_engine& eng, const sched::step_plan& plan,
                    std::vector<sequence_state>& seqs, const std::vector<float>& streams,
                    const std::vector<int64_t>& emitted, sched::step_result* res) {
  const model_config& cfg = eng.config();
  const int64_t row_floats = cfg.hidden_size * cfg.hc_mult, V = cfg.vocab_size;
  int64_t row = 0;   // the item's first row in `streams`
  size_t first = 0;  // the item's first token in res->sampled
  std::vector<float> logits, out;
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const sched::step_item& it = plan.items[i];
    const int64_t fed = int64_t(it.tokens.size());
    const size_t sampled = first;
    first += size_t(emitted[i]);
    row += fed;
    if (!it.mtp_kv) continue;
    // Kept positions n.. and the token after each: the next fed one, then the last emitted (or next_token).
    const int64_t kept = it.n_drafts() > 0 ? emitted[i] : fed;
    std::vector<int32_t> next(it.tokens.begin() + 1, it.tokens.begin() + std::max<int64_t>(kept, 1));
    if (emitted[i] > 0) {
      next.push_back(res->sampled[sampled + size_t(emitted[i]) - 1].token);
    } else if (it.next_token >= 0) {
      next.push_back(it.next_token);
    }
    if (next.empty()) continue;
    const int64_t T = int64_t(next.size());
    const float* s0 = streams.data() + (row - fed) * row_floats;
    const std::vector<float> x(s0, s0 + T * row_floats);
    HART_RETURN_IF_ERROR(eng.mtp_forward(seqs[i], it.n_computed, next, x, &logits, &out));
    if (it.mtp_drafts <= 0 || !it.sample_last) continue;
    // Drafts: the token after the last emitted one, then chained one position at a time.
    sched::item_drafts d;
    d.seq_id = it.seq_id;
    d.tokens.push_back(argmax(logits.data() + (T - 1) * V, V));
    const int64_t held = int64_t(it.full_pages.size()) * seqs[i].pages->store->page_size();
    int64_t pos = it.n_computed + T;  // the emitted token's position: where the chain runs first
    std::vector<float> chained(out.end() - row_floats, out.end());
    while (int64_t(d.tokens.size()) < it.mtp_drafts && pos < held) {
      HART_RETURN_IF_ERROR(eng.mtp_forward(seqs[i], pos, {d.tokens.back()}, chained, &logits, &out));
      d.tokens.push_back(argmax(logits.data(), V));
      chained = out;
      ++pos;
    }
    res->drafts.push_back(std::move(d));
  }
  return {};
}

}  // namespace hart::worker
