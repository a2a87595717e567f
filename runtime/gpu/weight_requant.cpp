#include "runtime/gpu/weight_requant.h"

namespace hart::gpu {

status weight_requant_scratch::reserve() {
  if (count_.get()) return {};
  HART_ASSIGN_OR_RETURN(count_, device_buffer::create(2 * sizeof(uint32_t)));
  return cuda_status(cudaMemset(count_.get(), 0, 2 * sizeof(uint32_t)), "weight_requant: counters");
}

status weight_requant_scratch::check(cudaStream_t stream) const {
  if (!count()) return {};
  uint32_t n[2] = {0, 0};
  HART_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(n, count(), sizeof n, cudaMemcpyDeviceToHost, stream),
                                   "weight_requant: download"));
  HART_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "weight_requant"));
  if (n[1]) return invalid_argument("weight update: %u weight values are not finite (NaN or infinity)", n[1]);
  if (n[0])
    return internal_error("weight update: %u re-quantized values are not reproduced by their FP8 codes",
                          n[0]);
  return {};
}

status_or<bool> weight_requant_fp8(float* w, int64_t out, int64_t in, uint8_t* codes, uint8_t* scales,
                                   const weight_requant_scratch& sc, cudaStream_t stream) {
  if (!sc.count()) return failed_precondition("weight_requant_fp8: the scratch is not reserved");
  HART_RETURN_IF_ERROR(
      cuda_status(cudaMemsetAsync(sc.count(), 0, sizeof(uint32_t), stream), "weight_requant_fp8: memset"));
  // NOTE(weight_sync): quant(v) can differ from quant(raw) (a tile whose amax
  // rounds down past a power of two gets half the scale), so the codes are
  // taken from v, as the fresh load does, not from the first pass.
  HART_RETURN_IF_ERROR(weight_requant_fp8_async(w, out, in, codes, scales, sc.count(), stream));
  uint32_t n[2] = {0, 0};
  HART_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(n, sc.count(), sizeof n, cudaMemcpyDeviceToHost, stream),
                                   "weight_requant_fp8: download"));
  HART_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "weight_requant_fp8"));
  if (n[1]) {
    return invalid_argument(
        "weight_requant_fp8: the [%lld, %lld] weight holds non-finite values (NaN or infinity)",
        (long long)out, (long long)in);
  }
  if (n[0] == 0) return true;
  // The codes do not reproduce v: the engine keeps v itself (w is still raw).
  HART_RETURN_IF_ERROR(weight_qdq_fp8(w, out, in, nullptr, stream));
  HART_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "weight_requant_fp8"));
  return false;
}

}  // namespace hart::gpu
