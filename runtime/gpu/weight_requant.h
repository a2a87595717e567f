// File: runtime/gpu/weight_requant.h — internal to runtime/gpu: the fp8 (and
// MXFP4, for routed experts served so) weight re-quantization of a weight
// update, on the device, bit-exact with
// the CPU loader's quant ops (kernels/quant). For one linear [out, in]
// (row-major [out][in]) of raw fp32 values it computes what a fresh fp8 load
// computes on the host (weights.cpp, then gpu_weights.cpp):
//   v = dequant(quant(raw))                the fp8 mode's weight values
//   codes, scales = quant(v)               e4m3 + 128×128 e8m0, for linear_fp8
//   exact = dequant(codes, scales) == v    bitwise; else the engine keeps v in
//                                          fp32 and QDQs the linear's inputs
// in one fused kernel per call (one CTA per 128×128 tile, weight_requant.cu).
//
//   weight_requant_scratch sc;   HART_RETURN_IF_ERROR(sc.reserve());
//   HART_ASSIGN_OR_RETURN(bool exact, weight_requant_fp8(raw_dev, out, in, codes, scales, sc, stream));
#pragma once

#include "runtime/core/status.h"
#include "runtime/gpu/device_memory.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace hart::gpu {

/// The device counters of the re-quantizations: [0] values the codes do not
/// reproduce (per weight_requant_fp8 call), [1] non-finite raw values (since
/// reserve(): weight_qdq_fp8 adds to it without waiting; check reads both).
class weight_requant_scratch {
 public:
  /// Allocates and zeroes the counters once.
  status reserve();
  uint32_t* count() const { return static_cast<uint32_t*>(count_.get()); }
  /// Waits for `stream`, then reads both counters once: invalid_argument when
  /// a re-quantization since reserve() met a non-finite value (as the host
  /// quantizer refuses them), else internal_error when weight_requant_fp8_async
  /// calls met values their codes do not reproduce (counter [0], never reset by
  /// them; weight_requant_fp8 resets it per call).
  status check(cudaStream_t stream) const;

 private:
  device_buffer count_;
};

/// codes [out, in] and scales [ceil(out/128), ceil(in/128)] receive quant(v)
/// for v = QDQ(w), w [out, in] raw fp32 on the device. Returns whether the
/// codes reproduce v bitwise (waits for the stream to read the check; `sc`
/// reserved): if so w is left raw (v = dequant(codes)); if not, w becomes v in
/// place, the values the engine then keeps. invalid_argument when w holds
/// non-finite values.
status_or<bool> weight_requant_fp8(float* w, int64_t out, int64_t in, uint8_t* codes, uint8_t* scales,
                                   const weight_requant_scratch& sc, cudaStream_t stream);

/// The kernel of weight_requant_fp8 without the wait (w left raw): counts
/// (device, two values) += the values whose codes do not reproduce v, the
/// non-finite ones.
status weight_requant_fp8_async(float* w, int64_t out, int64_t in, uint8_t* codes, uint8_t* scales,
                                uint32_t* counts, cudaStream_t stream);

/// MXFP4 of raw fp32 weights w [out, in] on the device (routed experts of a
/// model served MXFP4): pairs [out, in/2] in mxfp4_mma_order (the grouped
/// linear's layout) and e8m0 scales [out, in/32], bit-exact with the host's
/// mxfp4_quantize then mxfp4_mma_order (what a release checkpoint of the same
/// values loads as). in a multiple of 128, w 16-byte aligned. No wait: counts[1]
/// (device, when set) += the non-finite values (the host refuses them).
status weight_requant_mxfp4_async(const float* w, int64_t out, int64_t in, uint8_t* pairs, uint8_t* scales,
                                  uint32_t* counts, cudaStream_t stream);

/// In place: w = QDQ(w) (weights that are FP8 values with unquantized inputs,
/// wo_a). counts[1] (device, when set) += its non-finite values.
status weight_qdq_fp8(float* w, int64_t out, int64_t in, uint32_t* counts, cudaStream_t stream);

}  // namespace hart::gpu
