// gpu_engine's entry points for `hart bench` (actors/cli/cmd_bench.cpp).
#include "runtime/gpu/bench_fill.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/gpu/gpu_engine_impl.h"

namespace hart {

status gpu_engine::kv_fill_random(uint64_t seed) const {
  const int64_t n = int64_t(s_->pool.bytes() / sizeof(float));
  HART_RETURN_IF_ERROR(gpu::bench_fill_f32(s_->pool.base(), n, seed, -1.0f, 1.0f, s_->stream));
  return gpu::cuda_status(cudaStreamSynchronize(s_->stream), "gpu engine: kv_fill_random");
}

}  // namespace hart
