#include "runtime/worker/engine_executor.h"

#include "runtime/worker/step_routing.h"
#include "runtime/worker/step_sampling.h"

namespace hart::worker {

status_or<std::unique_ptr<engine_executor>> engine_executor::on_cpu(const engine& eng,
                                                                    const cache::cache_config& cache) {
  std::unique_ptr<engine_executor> ex(new engine_executor());
  HART_ASSIGN_OR_RETURN(ex->store_, eng.make_store(cache.page_size));
  ex->store_->ensure_full_pages(cache.n_full_pages);
  ex->store_->ensure_swa_pages(cache.n_swa_pages);
  ex->eng_ = forward_engine_cpu_view(eng);
  kv_store* store = ex->store_.get();
  ex->bind_ = [&eng, store](const sched::step_item& it) {
    sequence_state seq = eng.new_sequence();
    engine::bind_pages(seq, store, it.full_pages, it.swa_pages, it.n_computed);
    return seq;
  };
  return ex;
}

std::unique_ptr<engine_executor> engine_executor::over(std::shared_ptr<const forward_engine> eng,
                                                       page_binder bind) {
  std::unique_ptr<engine_executor> ex(new engine_executor());
  ex->eng_ = std::move(eng);
  ex->bind_ = std::move(bind);
  return ex;
}

status_or<sched::step_result> engine_executor::execute(const sched::step_plan& plan) {
  sched::step_result res;
  res.step = plan.step;
  if (plan.empty()) return res;
  std::vector<sequence_state> seqs(plan.items.size());
  std::vector<batch_item> batch(plan.items.size());
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const sched::step_item& it = plan.items[i];
    seqs[i] = bind_(it);
    batch[i].seq = &seqs[i];
    batch[i].tokens = it.tokens;
    batch[i].logits = step_item_logits(it);
  }
  forward_trace trace;
  const bool capture = plan_captures_routing(plan);
  res.error = eng_->forward(batch, &logits_, capture ? &trace : nullptr);
  if (!res.error.ok()) return res;
  if (capture) collect_step_routing(plan, trace, &res);
  sample_step_items(plan, logits_.data(), eng_->config().vocab_size, &res);
  return res;
}

}  // namespace hart::worker
