#include "runtime/worker/step_sampling.h"

#include "runtime/sample/sampler.h"
#include "runtime/worker/sampling_logprobs.h"

namespace hart::sched {

void sample_step_items(const step_plan& plan, const float* logits, int64_t vocab, step_result* res) {
  int64_t row = 0;
  for (const step_item& it : plan.items) {
    if (!it.sample_last) continue;
    const float* l = logits + row++ * vocab;
    sampled_token t;
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

}  // namespace hart::sched
