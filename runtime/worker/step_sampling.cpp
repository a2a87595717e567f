#include "runtime/worker/step_sampling.h"

#include "runtime/sample/sampler.h"
#include "runtime/sample/spec_accept.h"
#include "runtime/worker/sampling_logprobs.h"

#include <limits>

namespace hart::worker {

logits_request step_item_logits(const sched::step_item& item) {
  if (item.prompt_logprobs || item.n_drafts() > 0) return logits_request::all;
  return item.sample_last ? logits_request::last : logits_request::none;
}

namespace {

// `token`, drawn from `row`, with the log-probs the item asks for.
sched::sampled_token sampled_from(const sched::step_item& it, const float* row, int64_t vocab,
                                  int32_t token) {
  sched::sampled_token t;
  t.seq_id = it.seq_id;
  t.token = token;
  if (it.logprobs || it.top_logprobs > 0) {
    sampling_logprobs(row, vocab, it.sampling, token, it.top_logprobs, &t.logprob,
                      it.top_logprobs > 0 ? &t.top_logprobs : nullptr);
  }
  return t;
}

}  // namespace

std::vector<int64_t> sample_step_items(const sched::step_plan& plan, const float* logits, int64_t vocab,
                                       sched::step_result* res) {
  std::vector<int64_t> emitted(plan.items.size(), 0);
  int64_t row = 0;
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const sched::step_item& it = plan.items[i];
    const logits_request want = step_item_logits(it);
    const int64_t rows = want == logits_request::all    ? int64_t(it.tokens.size())
                         : want == logits_request::last ? 1
                                                        : 0;
    if (it.prompt_logprobs) {
      sched::item_logprobs lp;
      lp.seq_id = it.seq_id;
      for (int64_t r = 0; r < rows; ++r) {
        const int32_t next = r + 1 < rows ? it.tokens[size_t(r + 1)] : it.next_token;
        lp.next.push_back(next >= 0 && next < vocab ? model_logprob(logits + (row + r) * vocab, vocab, next)
                                                    : std::numeric_limits<float>::quiet_NaN());
      }
      res->prompt_logprobs.push_back(std::move(lp));
    }
    const float* first = logits + row * vocab;
    row += rows;
    if (!it.sample_last) continue;
    if (it.n_drafts() > 0) {  // a verify pass: rows 0..k, drafts tokens[1..k]
      std::vector<uint64_t> seeds = {it.sampling.seed};
      seeds.insert(seeds.end(), it.draft_seeds.begin(), it.draft_seeds.end());
      const std::vector<int32_t> drafts(it.tokens.begin() + 1, it.tokens.end());
      const spec_outcome o = spec_accept(it.sampling, seeds, first, vocab, drafts);
      for (size_t j = 0; j < o.tokens.size(); ++j)
        res->sampled.push_back(sampled_from(it, first + int64_t(j) * vocab, vocab, o.tokens[j]));
      emitted[i] = int64_t(o.tokens.size());
      continue;
    }
    const float* l = logits + (row - 1) * vocab;
    sampler smp(it.sampling);
    const int32_t token = smp.sample(l, vocab);
    res->sampled.push_back(sampled_from(it, l, vocab, token));
    emitted[i] = 1;
  }
  return emitted;
}

}  // namespace hart::worker
