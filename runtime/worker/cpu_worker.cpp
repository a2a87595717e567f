#include "runtime/worker/cpu_worker.h"

#include "runtime/sample/sampler.h"
#include "runtime/worker/sampling_logprobs.h"

namespace hart::sched {

step_result cpu_worker::execute(const step_plan& plan) {
  step_result res;
  res.step = plan.step;
  if (plan.empty()) return res;
  std::vector<sequence_state> seqs(plan.items.size());
  std::vector<batch_item> batch(plan.items.size());
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const step_item& it = plan.items[i];
    seqs[i] = eng_.new_sequence();
    engine::bind_pages(seqs[i], &store_, it.full_pages, it.swa_pages, it.n_computed);
    batch[i].seq = &seqs[i];
    batch[i].tokens = it.tokens;
    batch[i].logits = it.sample_last ? logits_request::last : logits_request::none;
  }
  res.error = eng_.forward(batch, &logits_);
  if (!res.error.ok()) return res;
  const int64_t vocab = eng_.config().vocab_size;
  int64_t row = 0;
  for (const step_item& it : plan.items) {
    if (!it.sample_last) continue;
    const float* l = logits_.data() + row++ * vocab;
    sampled_token t;
    t.seq_id = it.seq_id;
    sampler smp(it.sampling);
    t.token = smp.sample(l, vocab);
    if (it.logprobs || it.top_logprobs > 0) {
      sampling_logprobs(l, vocab, it.sampling, t.token, it.top_logprobs, &t.logprob,
                        it.top_logprobs > 0 ? &t.top_logprobs : nullptr);
    }
    res.sampled.push_back(std::move(t));
  }
  return res;
}

}  // namespace hart::sched
