#include "cli/device_executor.h"

#include "cli/device_engine.h"

#include <algorithm>
#ifdef HART_CUDA
#include "runtime/worker/gpu_executor.h"
#endif

namespace hart::cli {

status device_usable(const std::string& device) {
  if (device == "cpu") return {};
  if (device != "cuda") return invalid_argument("unknown device '%s' (cpu or cuda)", device.c_str());
#ifdef HART_CUDA
  if (!gpu_device_available()) {
    return failed_precondition(
        "--device cuda: no CUDA device is visible (use --device cpu, or run on the GPU machine)");
  }
  return {};
#else
  return no_cuda_build();
#endif
}

int64_t gpu_max_context(const model_config& cfg, int64_t requested) {
  if (requested > 0) return requested;
  const int64_t dflt = gpu_engine_params{}.max_context;
  return cfg.max_position > 0 ? std::min(dflt, cfg.max_position) : dflt;
}

status_or<std::unique_ptr<sched::step_executor>> make_gpu_executor(const common_options& o,
                                                                   cache::cache_config* cache,
                                                                   const gpu_serving_sizes& sizes,
                                                                   std::shared_ptr<weight_target>* weights) {
#ifdef HART_CUDA
  gpu_engine_params p;
  p.max_context = sizes.max_context;
  if (sizes.max_batch_tokens > 0) p.max_batch_tokens = sizes.max_batch_tokens;
  p.base.page_size = cache->page_size;
  p.full_pages = cache->n_full_pages;
  p.swa_pages = cache->n_swa_pages;
  p.memory_fraction = sizes.memory_fraction;
  p.max_running = sizes.max_running;
  HART_ASSIGN_OR_RETURN(std::unique_ptr<gpu_engine> eng, load_gpu_engine(o, p));
  cache->n_full_pages = eng->full_pages();
  cache->n_swa_pages = eng->swa_pages();
  std::shared_ptr<gpu_engine> shared = std::move(eng);
  if (weights) *weights = worker::gpu_weight_target(shared);
  return std::unique_ptr<sched::step_executor>(worker::gpu_executor(std::move(shared)));
#else
  (void)o;
  (void)cache;
  (void)sizes;
  (void)weights;
  return no_cuda_build();
#endif
}

}  // namespace hart::cli
