#include "runtime/gpu/weight_requant.h"

#include "kernels/quant/quant.h"

namespace hart::gpu {
namespace {

constexpr int64_t k_fp8_block = 128;

}  // namespace

status weight_requant_scratch::reserve(int64_t numel) {
  if (numel <= numel_) return {};
  HART_ASSIGN_OR_RETURN(back_, device_buffer::create(size_t(numel) * sizeof(float)));
  if (!count_.get()) {
    HART_ASSIGN_OR_RETURN(count_, device_buffer::create(sizeof(uint32_t)));
  }
  numel_ = numel;
  return {};
}

status weight_qdq_fp8(float* w, int64_t out, int64_t in, uint8_t* codes, uint8_t* scales, cudaStream_t stream) {
  HART_RETURN_IF_ERROR(fp8_block_quantize_cuda(w, out, in, k_fp8_block, codes, scales, stream));
  return fp8_block_dequantize_cuda(codes, scales, out, in, k_fp8_block, w, stream);
}

status_or<bool> weight_requant_fp8(float* w, int64_t out, int64_t in, uint8_t* codes, uint8_t* scales,
                                   const weight_requant_scratch& sc, cudaStream_t stream) {
  HART_RETURN_IF_ERROR(weight_qdq_fp8(w, out, in, codes, scales, stream));
  // NOTE(weight_sync): quant(v) can differ from quant(raw) (a block whose amax
  // rounds down past a power of two gets half the scale), so the codes are
  // taken from v, as the fresh load does, not from the first pass.
  HART_RETURN_IF_ERROR(fp8_block_quantize_cuda(w, out, in, k_fp8_block, codes, scales, stream));
  HART_RETURN_IF_ERROR(fp8_block_dequantize_cuda(codes, scales, out, in, k_fp8_block, sc.back(), stream));
  HART_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(sc.count(), 0, sizeof(uint32_t), stream), "weight_requant_fp8: memset"));
  HART_RETURN_IF_ERROR(count_bit_mismatch_cuda(w, sc.back(), out * in, sc.count(), stream));
  uint32_t n_diff = 0;
  HART_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(&n_diff, sc.count(), sizeof n_diff, cudaMemcpyDeviceToHost, stream),
                                   "weight_requant_fp8: download"));
  HART_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "weight_requant_fp8"));
  return n_diff == 0;
}

}  // namespace hart::gpu
