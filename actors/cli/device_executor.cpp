#include "actors/cli/device_executor.h"

#include <algorithm>

#include "runtime/gpu/gpu_engine.h"  // gpu_engine_params only, in a build without CUDA
#ifdef HART_CUDA
#include "runtime/worker/gpu_executor.h"
#endif

namespace hart::cli {
namespace {

#ifndef HART_CUDA
status no_cuda_build() {
  return failed_precondition("--device cuda: this hart was built without CUDA (configure with -DHART_CUDA=ON where nvcc exists)");
}
#endif

}  // namespace

status device_usable(const std::string& device) {
  if (device == "cpu") return {};
  if (device != "cuda") return invalid_argument("unknown device '%s' (cpu or cuda)", device.c_str());
#ifdef HART_CUDA
  if (!gpu_device_available()) {
    return failed_precondition("--device cuda: no CUDA device is visible (use --device cpu, or run on the GPU machine)");
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
                                                                  const cache::cache_config& cache,
                                                                  int64_t max_context,
                                                                  std::shared_ptr<weight_target>* weights) {
#ifdef HART_CUDA
  gpu_engine_params p;
  p.base.model_dir = o.model_dir;
  p.base.deterministic = o.deterministic;
  if (o.enforce_eager) p.decode = gpu_engine_params::decode_launch::eager;
  if (!precision_parse(o.precision_name, &p.base.prec)) {
    return invalid_argument("unknown precision '%s' (exact or fp8)", o.precision_name.c_str());
  }
  p.max_context = max_context;
  HART_ASSIGN_OR_RETURN(std::unique_ptr<sched::gpu_executor> ex, sched::gpu_executor::create(p, cache));
  if (weights) *weights = ex->weights();
  return std::unique_ptr<sched::step_executor>(std::move(ex));
#else
  (void)weights;
  return no_cuda_build();
#endif
}

}  // namespace hart::cli
