// File: runtime/gpu/gpu_weights.h
// The model's parameters in device memory, uploaded once at load from the
// host model_weights (runtime/model/weights.h). `exact`: fp32 everywhere.
// `fp8`: every linear the reference runs in FP8 (fp8_input) is stored as e4m3
// codes with 128×128 e8m0 block scales for linear_fp8_cuda; routed experts
// whose values are MXFP4 stay MXFP4 for the tensor-core grouped linears (see
// device_weights_upload); other values that are not exactly such a tile keep
// fp32, with the inputs quantized on the device before an fp32 GEMM (same math).
// Other linears whose values are all bf16 (the checkpoint's bf16 tensors:
// head, compressors, router) are kept in bf16: the same values, half the bytes.
// A weight update (device_weights_build) uploads raw fp32 values and does the
// fp8 re-quantization on the device instead (weight_requant.h), with the same
// result bit for bit.
#pragma once

#include "kernels/linear/linear.h"
#include "runtime/core/status.h"
#include "runtime/gpu/device_memory.h"
#include "runtime/model/config.h"
#include "runtime/model/weights.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace hart::gpu {

struct device_linear {
  const float* f32 = nullptr;       // [in, out] row-major [out][in], when neither codes nor bf16
  const uint16_t* bf16 = nullptr;   // [in, out] bf16 bits: fp32 values that are all bf16 (not experts)
  const uint8_t* codes = nullptr;   // [in, out] e4m3 (fp8 mode)
  const uint8_t* scales = nullptr;  // [ceil(in/128), ceil(out/128)] e8m0
  int64_t in = 0, out = 0;
  const uint8_t* fp4 = nullptr;  // [in/2, out] e2m1 pairs (routed experts kept MXFP4: grouped linears only)
  const uint8_t* fp4_scales = nullptr;  // [in/32, out] e8m0
  bool qdq_input = false;               // fp32 weights, inputs e4m3-QDQ'd per 128 first
  bool raw_input = false;  // codes applied to unquantized inputs (wo_a: FP8 values, inputs as they are)
};

struct device_compressor {
  device_linear wkv, wgate;     // [D, coff*c]
  const float* ape = nullptr;   // [coff*c, m]
  const float* norm = nullptr;  // [c]
  int64_t rate = 0, dim = 0;
  bool overlap = false;
};

struct device_expert {
  device_linear w1, w3, w2;
};

struct device_layer {
  attention_kind kind = attention_kind::sliding;
  bool hash_moe = false;
  const float *hc_attn_fn = nullptr, *hc_attn_base = nullptr, *hc_attn_scale = nullptr;
  const float *hc_ffn_fn = nullptr, *hc_ffn_base = nullptr, *hc_ffn_scale = nullptr;
  const float *attn_norm = nullptr, *ffn_norm = nullptr;
  device_linear wq_a, wq_b, wkv, wo_b;
  device_linear wo_a;  // [H/G·hd, G·o_lora] (fp8 mode: FP8 values, unquantized inputs: raw_input codes)
  const float *q_norm = nullptr, *kv_norm = nullptr, *attn_sink = nullptr;
  device_compressor compressor;        // CSA / HCA
  device_compressor index_compressor;  // CSA
  device_linear index_wq_b, index_weights_proj;
  device_linear gate;  // router, fp32
  const float* gate_bias = nullptr;
  std::vector<device_expert> experts;
  device_expert shared;
  // Device tables of the routed experts for the grouped MoE linears
  // (device_layer_finish): [E] weights of w1, w3 and w2, and hash routing's
  // token → experts table [vocab][top_k] (hash layers only).
  const linear_group_weight *expert_w1 = nullptr, *expert_w3 = nullptr, *expert_w2 = nullptr;
  bool experts_fp8 = false;  // every routed expert's w1/w3/w2 in e4m3 codes (the tensor-core grouped path)
  bool experts_fp4 = false;  // every routed expert's w1/w3/w2 in MXFP4 (the tensor-core grouped path only)
  const int32_t* tid2eid = nullptr;
};

struct device_weights {
  const float* embed = nullptr;  // [D, vocab]
  device_linear head;
  const float* norm = nullptr;
  const float *hc_head_fn = nullptr, *hc_head_base = nullptr, *hc_head_scale = nullptr;
  const float *inv_freq_main = nullptr, *inv_freq_compress = nullptr;
  std::vector<device_layer> layers;
  int64_t max_linear_in = 0;  // widest linear input (sizes the FP8/QDQ input buffers)
  uint64_t version = 0;       // weight version: 0 = loaded from the checkpoint (gpu_weight_swap.h)
  size_t bytes = 0;           // device bytes held
  std::vector<device_buffer> buffers;
};

/// Builds a layer's device tables (expert_w1/w3/w2, tid2eid from the host
/// table) once its experts are on the device (all MXFP4 or none); the tables
/// join d->buffers.
status device_layer_finish(device_layer* layer, const std::vector<int32_t>& tid2eid, device_weights* d);

/// Uploads `w` (loaded for `cfg` in precision `prec`). `mxfp4_experts` (fp8
/// only; for an engine whose MoE runs on tensor cores): a layer whose routed
/// experts all hold MXFP4 values (the release checkpoints') keeps them as
/// e2m1 pairs + per-32 scales, an eighth of fp32's bytes and half of FP8's.
status_or<device_weights> device_weights_upload(const model_weights& w, const model_config& cfg,
                                                precision prec, bool mxfp4_experts = false);

struct weights_load_progress {
  int64_t layers_done = 0, layers_total = 0;
  int64_t bytes_done = 0, bytes_total = 0;  // of the source's tensors
  double seconds = 0;                       // since the load began
};

/// As device_weights_upload of model_weights_load(src, cfg, prec), streamed:
/// each linear goes to the device on its own and its host copy is dropped, so
/// host memory holds at most one linear (64 MiB of the embedding at a time)
/// beyond the source's mapped pages, whatever the model's size. What the
/// device keeps in the checkpoint's format is uploaded as stored, unconverted:
/// FP8 codes with e8m0 scales, bf16 linears and, with `mxfp4_experts`, routed
/// experts stored MXFP4 (pairs reordered for the kernel). Same checks and
/// errors as the host load (a layer's errors name it); on error every device
/// buffer taken so far is freed. `on_progress` follows the globals and each layer.
status_or<device_weights> device_weights_load(
    const tensor_source& src, const model_config& cfg, precision prec, bool mxfp4_experts,
    const std::function<void(const weights_load_progress&)>& on_progress = {});

/// A progress callback that logs one line at most every 2 s and the last:
/// "loading weights: layer 12/43, 40.1/149.0 GB, 2.1 GB/s, ETA 52 s".
std::function<void(const weights_load_progress&)> weights_load_reporter();

/// A second set of weights laid out like `like` (the serving set, same config
/// and precision) from `src`, streamed as device_weights_load streams: each
/// linear's raw values are read (exact precision, no host QDQ), uploaded and
/// dropped, so host memory holds one linear beyond `src`. In fp8 precision
/// every linear that `like` holds as FP8 (codes, or fp32 with QDQ'd inputs) and
/// every wo_a is re-quantized on the device, on `stream`; the result equals
/// device_weights_upload of an fp8 load of the same tensors bit for bit; routed
/// experts `like` keeps MXFP4 are quantized to MXFP4 (the codes a release
/// checkpoint of the raw values holds), as the CPU engine's update of such a
/// model quantizes them. `like` is only read (it may be serving meanwhile).
/// Errors as the host load's (a layer's name it); nothing stays allocated.
status_or<device_weights> device_weights_build(const tensor_source& src, const device_weights& like,
                                               const model_config& cfg, precision prec, cudaStream_t stream);

}  // namespace hart::gpu
