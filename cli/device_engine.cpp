#include "cli/device_engine.h"

#include "cli/dummy_model.h"
#include "runtime/core/log.h"
#ifdef HART_CUDA
#include "runtime/gpu/bench_model.h"
#endif

namespace hart::cli {

status no_cuda_build() {
  return failed_precondition(
      "--device cuda: this hart was built without CUDA (configure with -DHART_CUDA=ON where nvcc exists)");
}

status_or<std::unique_ptr<forward_engine>> load_forward_engine(const common_options& o) {
  if (o.device == "cpu") {
    HART_ASSIGN_OR_RETURN(std::unique_ptr<engine> e, load_engine(o));
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

status_or<std::unique_ptr<gpu_engine>> load_gpu_engine(const common_options& o, gpu_engine_params p) {
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

}  // namespace hart::cli
