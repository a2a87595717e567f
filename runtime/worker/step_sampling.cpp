#include "runtime/worker/step_sampling.h"

#include "runtime/sample/sampler.h"
#include "runtime/worker/sampling_logprobs.h"

#include <limits>

namespace hart::worker {

logits_request step_item_logits(const sched::step_item& item) {
  if (item.prompt_logprobs) return logits_request::all;
  return item.sample_last ? logits_request::last : logits_request::none;
}

void sample_step_items(const sched::step_plan& plan, const float* logits, int64_t vocab,
                       sched::step_result* res) {
  int64_t row = 0;
  for (const sched::step_item& it : plan.items) {
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
    row += rows;
    if (!it.sample_last) continue;
    const float* l = logits + (row - 1) * vocab;
    sched::sampled_token t;
    t.seq_id = it.seq_id;
    sampler smp(it.sampling);
    t.token = smp.sample(l, vocab);
    if (it.logprobs || it.top_logprobs > 0) {
      sampling_logprobs(l, vocab, it.sampling, t.token, it.top_logprobs, &t.logprob,
                        it.top_logprobs > 0 ? &t.top_logprobs : nullptr);
    }
    res->sampled.push_back(std::move(t));
  }
}

}  // namespace hart::worker
