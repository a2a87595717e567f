// gpu_engine's weight updates (gpu_weight_swap.h): the member functions
// declared in gpu_engine.h under "weight updates".
#include "runtime/gpu/gpu_weight_swap.h"

#include "runtime/gpu/gpu_engine_impl.h"
#include "runtime/model/engine.h"
#include "runtime/model/weights.h"

#include <cuda_runtime.h>

namespace hart {

status_or<std::unique_ptr<gpu_built_weights>> gpu_engine::build_weights(const tensor_source& src) const {
  const gpu::engine_state& s = *s_;
  HART_RETURN_IF_ERROR(gpu::cuda_status(cudaSetDevice(s.params.device), "gpu weight update: cudaSetDevice"));
  cudaStream_t stream = nullptr;
  HART_RETURN_IF_ERROR(gpu::cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                        "gpu weight update: stream"));
  // Streamed: names, shapes and dtypes checked as at load, one linear on the host at a time.
  auto built = gpu::device_weights_build(src, s.w, s.cfg, s.params.base.prec, stream);
  const cudaError_t e = cudaStreamDestroy(stream);
  if (!built.ok()) return built.get_status();
  HART_RETURN_IF_ERROR(gpu::cuda_status(e, "gpu weight update: stream"));
  auto out = std::make_unique<gpu_built_weights>();
  out->engine_id = s.id;
  out->w = std::move(built).value();
  return out;
}

status gpu_engine::swap_weights(std::unique_ptr<gpu_built_weights> w, uint64_t version) {
  gpu::engine_state& s = *s_;
  if (!w) return invalid_argument("swap_weights: no weights");
  if (w->engine_id != s.id) return invalid_argument("swap_weights: the weights were built by another engine");
  HART_RETURN_IF_ERROR(weight_version_check("swap_weights", version, s.w.version));
  // The arena's QDQ buffer and the linear context are sized for the serving set.
  if (w->w.max_linear_in > s.w.max_linear_in) {
    return invalid_argument("swap_weights: widest linear input %lld, the engine was sized for %lld",
                            (long long)w->w.max_linear_in, (long long)s.w.max_linear_in);
  }
  // The last forward's kernels may still read the old weights.
  HART_RETURN_IF_ERROR(gpu::cuda_status(cudaStreamSynchronize(s.stream), "swap_weights"));
  s.w = std::move(w->w);  // frees the old set
  s.graphs.clear();       // they captured the old set's addresses
  s.w.version = version;
  return {};
}

status gpu_engine::relabel_weights(uint64_t version) {
  HART_RETURN_IF_ERROR(weight_version_check("relabel_weights", version, s_->w.version));
  s_->w.version = version;
  return {};
}

uint64_t gpu_engine::weight_version() const {
  return s_->w.version;
}

}  // namespace hart
