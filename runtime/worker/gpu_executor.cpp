#include "runtime/worker/gpu_executor.h"

#include "runtime/gpu/gpu_weight_swap.h"
#include "runtime/worker/step_routing.h"
#include "runtime/worker/step_sampling.h"

namespace hart::sched {
namespace {

struct gpu_built final : built_weights {
  std::unique_ptr<gpu_built_weights> w;  // null once swapped in
  const gpu_engine* owner = nullptr;
};

class gpu_weight_target final : public weight_target {
 public:
  explicit gpu_weight_target(std::shared_ptr<gpu_engine> eng) : eng_(std::move(eng)) {}
  status_or<std::shared_ptr<built_weights>> build(const tensor_source& src) const override {
    HART_ASSIGN_OR_RETURN(auto w, eng_->build_weights(src));
    auto b = std::make_shared<gpu_built>();
    b->w = std::move(w);
    b->owner = eng_.get();
    return std::shared_ptr<built_weights>(std::move(b));
  }
  status swap(std::shared_ptr<built_weights> w, uint64_t version) override {
    auto* b = dynamic_cast<gpu_built*>(w.get());
    if (!b || b->owner != eng_.get())
      return invalid_argument("weight swap: the weights were built for another engine");
    if (!b->w) return failed_precondition("weight swap: these weights were already swapped in");
    return eng_->swap_weights(std::move(b->w), version);
  }
  status relabel(uint64_t version) override { return eng_->relabel_weights(version); }
  uint64_t version() const override { return eng_->weight_version(); }

 private:
  std::shared_ptr<gpu_engine> eng_;
};

}  // namespace

status_or<std::unique_ptr<gpu_executor>> gpu_executor::create(gpu_engine_params params,
                                                              const cache::cache_config& cache) {
  params.base.page_size = cache.page_size;
  params.full_pages = cache.n_full_pages;
  params.swa_pages = cache.n_swa_pages;
  HART_ASSIGN_OR_RETURN(std::unique_ptr<gpu_engine> eng, gpu_engine::load(params));
  return over(std::move(eng));
}

std::unique_ptr<gpu_executor> gpu_executor::over(std::shared_ptr<gpu_engine> eng) {
  std::unique_ptr<gpu_executor> ex(new gpu_executor());
  ex->eng_ = std::move(eng);
  return ex;
}

std::shared_ptr<weight_target> gpu_executor::weights() const {
  return std::make_shared<gpu_weight_target>(eng_);
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

}  // namespace hart::sched
