#include "runtime/worker/gpu_executor.h"

#include "runtime/worker/step_sampling.h"

namespace hart::sched {

status_or<std::unique_ptr<gpu_executor>> gpu_executor::create(gpu_engine_params params,
                                                               const cache::cache_config& cache) {
  params.base.page_size = cache.page_size;
  params.full_pages = cache.n_full_pages;
  params.swa_pages = cache.n_swa_pages;
  std::unique_ptr<gpu_executor> ex(new gpu_executor());
  HART_ASSIGN_OR_RETURN(ex->eng_, gpu_engine::load(params));
  return ex;
}

status_or<step_result> gpu_executor::execute(const step_plan& plan) {
  step_result res;
  res.step = plan.step;
  if (plan.empty()) return res;
  std::vector<sequence_state> seqs(plan.items.size());
  std::vector<batch_item> batch(plan.items.size());
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const step_item& it = plan.items[i];
    seqs[i] = eng_->bind_pages(it.full_pages, it.swa_pages, it.n_computed);
    batch[i].seq = &seqs[i];
    batch[i].tokens = it.tokens;
    batch[i].logits = it.sample_last ? logits_request::last : logits_request::none;
  }
  res.error = eng_->forward(batch, &logits_);
  if (!res.error.ok()) return res;
  sample_step_items(plan, logits_.data(), eng_->config().vocab_size, &res);
  return res;
}

}  // namespace hart::sched
