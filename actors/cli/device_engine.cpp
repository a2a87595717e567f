#include "actors/cli/device_engine.h"

#ifdef HART_CUDA
#include "runtime/gpu/gpu_engine.h"
#endif

namespace hart::cli {

status_or<std::unique_ptr<forward_engine>> load_forward_engine(const common_options& o) {
  if (o.device == "cpu") {
    HART_ASSIGN_OR_RETURN(std::unique_ptr<engine> e, load_engine(o));
    return forward_engine_cpu(std::move(e));
  }
  if (o.device != "cuda") return invalid_argument("unknown device '%s' (cpu or cuda)", o.device.c_str());
#ifdef HART_CUDA
  gpu_engine_params p;
  p.base.model_dir = o.model_dir;
  p.base.deterministic = o.deterministic;
  if (o.enforce_eager) p.decode = gpu_engine_params::decode_launch::eager;
  if (!precision_parse(o.precision_name, &p.base.prec)) {
    return invalid_argument("unknown precision '%s' (exact or fp8)", o.precision_name.c_str());
  }
  HART_ASSIGN_OR_RETURN(std::unique_ptr<gpu_engine> e, gpu_engine::load(p));
  return std::unique_ptr<forward_engine>(std::move(e));
#else
  return failed_precondition("--device cuda: this hart was built without CUDA (configure with -DHART_CUDA=ON where nvcc exists)");
#endif
}

}  // namespace hart::cli
