#include "runtime/worker/engine_factory.h"

#include "runtime/core/log.h"
#include "runtime/worker/dummy_model.h"

#include <algorithm>
#ifdef HART_CUDA
#include "runtime/gpu/bench_model.h"
#include "runtime/worker/gpu_executor.h"
#endif

namespace hart::worker {

status_or<std::unique_ptr<engine>> load_cpu_engine(const engine_source& o) {
  engine_params p;
  p.model_dir = o.model_dir;
  p.n_threads = o.threads;
  p.deterministic = o.deterministic;
  p.verbose_load = true;
  if (!precision_parse(o.precision_name, &p.prec)) {
    return invalid_argument("unknown precision '%s' (exact or fp8)", o.precision_name.c_str());
  }
  return engine::load(p);
}

status_or<model_config> load_served_model(const engine_source& o, std::unique_ptr<engine>* cpu) {
  if (o.device == "cuda") {
    return o.load_format == "dummy" ? dummy_model_config(o.model_dir, o.num_layers)
                                    : model_config_load(o.model_dir);
  }
  HART_ASSIGN_OR_RETURN(*cpu, load_cpu_engine(o));
  return (*cpu)->config();
}

status no_cuda_build() {
  return failed_precondition(
      "--device cuda: this hart was built without CUDA (configure with -DHART_CUDA=ON where nvcc exists)");
}

status_or<std::unique_ptr<forward_engine>> load_forward_engine(const engine_source& o) {
  if (o.device == "cpu") {
    HART_ASSIGN_OR_RETURN(std::unique_ptr<engine> e, load_cpu_engine(o));
    return forward_engine_cpu(std::move(e));
  }
  if (o.device != "cuda") return invalid_argument("unknown device '%s' (cpu or cuda)", o.device.c_str());
#ifdef HART_CUDA
  HART_ASSIGN_OR_RETURN(std::unique_ptr<gpu_engine> e, load_gpu_engine(o, gpu_engine_params{}));
  return std::unique_ptr<forward_engine>(std::move(e));
#else
  return no_cuda_build();
#endif
}

status_or<std::unique_ptr<gpu_engine>> load_gpu_engine(const engine_source& o, gpu_engine_params p) {
#ifdef HART_CUDA
  p.base.model_dir = o.model_dir;
  p.base.deterministic = o.deterministic;
  if (o.enforce_eager) p.decode = gpu_engine_params::decode_launch::eager;
  if (!precision_parse(o.precision_name, &p.base.prec)) {
    return invalid_argument("unknown precision '%s' (exact or fp8)", o.precision_name.c_str());
  }
  if (o.load_format != "dummy") return gpu_engine::load(p);
  HART_ASSIGN_OR_RETURN(model_config cfg, dummy_model_config(o.model_dir, o.num_layers));
  // As device_weights_load keeps a release checkpoint's experts (gpu_engine::load).
  const bool mxfp4 = p.fp8_tensor_cores && p.base.prec == precision::fp8 && cfg.hidden_size % 128 == 0 &&
                     cfg.moe_inter_dim % 128 == 0;
  HART_ASSIGN_OR_RETURN(gpu::device_weights w, gpu::bench_weights_make(cfg, p.base.prec, 1, mxfp4));
  HART_LOG_INFO("dummy weights: random, made on the device, %lld layers, %.2f GiB", (long long)cfg.n_layers,
                double(w.bytes) / double(int64_t(1) << 30));
  return gpu_engine::load(p, cfg, std::move(w));
#else
  (void)o;
  (void)p;
  return no_cuda_build();
#endif
}

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

status_or<std::unique_ptr<sched::step_executor>> make_gpu_executor(const engine_source& o,
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
  if (weights) *weights = gpu_weight_target(shared);
  return std::unique_ptr<sched::step_executor>(gpu_executor(std::move(shared)));
#else
  (void)o;
  (void)cache;
  (void)sizes;
  (void)weights;
  return no_cuda_build();
#endif
}

}  // namespace hart::worker
