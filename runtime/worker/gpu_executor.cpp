#include "runtime/worker/gpu_executor.h"

#include "runtime/gpu/gpu_weight_swap.h"

namespace hart::worker {
namespace {

struct gpu_built final : built_weights {
  std::unique_ptr<gpu_built_weights> w;  // null once swapped in
  const gpu_engine* owner = nullptr;
};

class gpu_weights final : public weight_target {
 public:
  explicit gpu_weights(std::shared_ptr<gpu_engine> eng) : eng_(std::move(eng)) {}
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

status_or<std::unique_ptr<gpu_engine>> gpu_engine_for_cache(gpu_engine_params params,
                                                            const cache::cache_config& cache) {
  params.base.page_size = cache.page_size;
  params.full_pages = cache.n_full_pages;
  params.swa_pages = cache.n_swa_pages;
  return gpu_engine::load(params);
}

std::unique_ptr<engine_executor> gpu_executor(std::shared_ptr<gpu_engine> eng) {
  const gpu_engine* e = eng.get();
  return engine_executor::over(std::move(eng), [e](const sched::step_item& it) {
    return e->bind_pages(it.full_pages, it.swa_pages, it.n_computed);
  });
}

std::shared_ptr<weight_target> gpu_weight_target(std::shared_ptr<gpu_engine> eng) {
  return std::make_shared<gpu_weights>(std::move(eng));
}

}  // namespace hart::worker
