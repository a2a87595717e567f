#include "runtime/worker/cpu_worker.h"

#include "runtime/worker/step_routing.h"
#include "runtime/worker/step_sampling.h"

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
    batch[i].logits = step_item_logits(it);
  }
  forward_trace trace;
  const bool capture = plan_captures_routing(plan);
  res.error = eng_.forward(batch, &logits_, capture ? &trace : nullptr);
  if (!res.error.ok()) return res;
  if (capture) collect_step_routing(plan, trace, &res);
  sample_step_items(plan, logits_.data(), eng_.config().vocab_size, &res);
  return res;
}

}  // namespace hart::sched
