// File: runtime/gpu/weight_requant.h — internal to runtime/gpu: the fp8
// weight re-quantization of a weight update, on the device, with the CUDA
// quant ops (kernels/quant, bit-exact with the CPU loader's). For one linear
// [out, in] (row-major [out][in]) of raw fp32 values it computes what a fresh
// fp8 load computes on the host (weights.cpp, then gpu_weights.cpp):
//   v = dequant(quant(raw))                the fp8 mode's weight values
//   codes, scales = quant(v)               e4m3 + 128×128 e8m0, for linear_fp8
//   exact = dequant(codes, scales) == v    bitwise; else the engine keeps v in
//                                          fp32 and QDQs the linear's inputs
//
//   weight_requant_scratch sc;   HART_RETURN_IF_ERROR(sc.reserve(max_numel));
//   HART_ASSIGN_OR_RETURN(bool exact, weight_requant_fp8(raw_dev, out, in, codes, scales, sc, stream));
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/core/status.h"
#include "runtime/gpu/device_memory.h"

namespace hart::gpu {

/// Device scratch of one re-quantization: the dequantized check copy and a mismatch counter.
class weight_requant_scratch {
 public:
  /// Grows to hold `numel` fp32 values (never shrinks).
  status reserve(int64_t numel);

  float* back() const { return static_cast<float*>(back_.get()); }
  uint32_t* count() const { return static_cast<uint32_t*>(count_.get()); }

 private:
  device_buffer back_, count_;
  int64_t numel_ = 0;
};

/// In place: w [out, in] raw fp32 on the device becomes v = QDQ(w). codes
/// [out, in] and scales [ceil(out/128), ceil(in/128)] receive quant(v). Returns
/// whether the codes reproduce v bitwise (waits for the stream to read the
/// check). `sc` must hold out·in values.
status_or<bool> weight_requant_fp8(float* w, int64_t out, int64_t in, uint8_t* codes, uint8_t* scales,
                                   const weight_requant_scratch& sc, cudaStream_t stream);

/// In place: w = QDQ(w) (weights that are FP8 values with unquantized inputs, wo_a).
/// codes and scales are scratch of the sizes above.
status weight_qdq_fp8(float* w, int64_t out, int64_t in, uint8_t* codes, uint8_t* scales, cudaStream_t stream);

/// *count (device) += number of i < n with bits(a[i]) != bits(b[i]).
status count_bit_mismatch_cuda(const float* a, const float* b, int64_t n, uint32_t* count, cudaStream_t stream);

}  // namespace hart::gpu
