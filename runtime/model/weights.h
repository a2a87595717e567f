// File: runtime/model/weights.h
// The V4 parameters as the CPU engine uses them: fp32 row-major matrices
// ([out][in] for linears). FP8 (e4m3 + 128×128 e8m0 block scales) and MXFP4
// checkpoint tensors are dequantized exactly on load. In `fp8` precision,
// the linears the reference runs in FP8 are quantized to e4m3 with 128×128
// power-of-two block scales (if the checkpoint is not FP8 already) and carry
// `fp8_input = true`: their inputs are quantized per token, per 128 channels.
// model_weights_reader reads the same model piece by piece, its linears'
// values left in the source until asked for (the GPU engine streams them to
// the device without ever holding the whole model on the host).
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/config.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hart {

enum class precision { exact, fp8 };
const char* precision_name(precision p);
bool precision_parse(const std::string& s, precision* out);

struct tensor_entry;

/// Where a linear's values are in its source: rows [row0, row0 + out) of the
/// 2-D view of `values` (row0 > 0: one expert of a stacked [E, rows, in]
/// tensor), with `scales` for FP8 (per 128×128) and MXFP4 (per 32) codes.
/// A quantization round trip applied to a linear's values as they are read
/// (fp8 precision, values not already in the format the engine runs them in).
enum class weight_qdq : uint8_t {
  none,
  fp8,    // e4m3 with power-of-two scales per 128x128 tile
  mxfp4,  // e2m1 with power-of-two scales per 32 (routed experts of a model served MXFP4)
};

struct stored_linear {
  const tensor_entry* values = nullptr;
  const tensor_entry* scales = nullptr;
  int64_t row0 = 0;
  weight_qdq qdq = weight_qdq::none;

  /// As stored, the values are: e4m3 codes with e8m0 scales per 128×128 (whole tensor);
  /// e2m1 pairs [out, in/2] with e8m0 scales [out, in/32] (whole tensor); bf16 rows.
  bool fp8_e8m0() const;
  bool mxfp4() const;
  bool bf16() const;
};

struct linear_weight {
  std::vector<float> w;  // [in, out] row-major [out][in]; empty while `stored` is not read (lazy)
  int64_t out = 0;
  int64_t in = 0;
  bool fp8_input = false;      // quantize inputs per 128 channels before the GEMM (fp8 mode)
  bool row_invariant = false;  // batch-invariant GEMM (engine_params::deterministic)
  bool bf16_output = false;    // round outputs to bf16, as the official inference's bf16 activations
  int64_t k_block = 0;         // > 0: summed by linear_blocked (the official GEMMs: 128 FP8, 32 MXFP4)
  stored_linear stored;        // set only by a lazy model_weights_reader; its source must outlive it
};

struct compressor_weights {
  linear_weight wkv;        // [D, coff*c]
  linear_weight wgate;      // [D, coff*c]
  std::vector<float> ape;   // [coff*c, m] position bias
  std::vector<float> norm;  // [c]
  int64_t rate = 0;         // m
  int64_t dim = 0;          // c
  bool overlap = false;     // CSA: coff = 2
};

struct indexer_weights {
  linear_weight wq_b;          // [q_lora, n_heads*head_dim]
  linear_weight weights_proj;  // [D, n_heads]
  compressor_weights compressor;
};

struct expert_weights {
  linear_weight w1, w3;  // [D, I]
  linear_weight w2;      // [I, D]
};

struct layer_weights {
  attention_kind kind = attention_kind::sliding;
  bool hash_moe = false;
  // mHC
  std::vector<float> hc_attn_fn, hc_attn_base, hc_attn_scale;
  std::vector<float> hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  std::vector<float> attn_norm, ffn_norm;
  // attention
  linear_weight wq_a, wq_b, wkv, wo_a, wo_b;
  std::vector<float> q_norm, kv_norm, attn_sink;
  compressor_weights compressor;  // CSA / HCA only
  indexer_weights indexer;        // CSA only
  // MoE
  linear_weight gate;            // [D, E] router, fp32
  std::vector<float> gate_bias;  // [E] or empty (hash layers)
  std::vector<int32_t> tid2eid;  // [top_k, vocab] (hash layers)
  std::vector<expert_weights> experts;
  bool mxfp4_experts = false;  // every routed expert holds MXFP4 values (stored so, or QDQ'd to them)
  expert_weights shared;
};

/// One MTP block (v4-model.md §7): a sliding-window layer fed
/// e_proj(enorm(embedding)) + h_proj(hnorm(main streams)), with its own final
/// norm and mHC head; the embedding and the LM head are the model's.
struct mtp_weights {
  layer_weights block;              // attention kind sliding, score routing
  linear_weight e_proj, h_proj;     // [D, D]
  std::vector<float> enorm, hnorm;  // [D]
  std::vector<float> norm;          // [D] before the shared head
  std::vector<float> hc_head_fn, hc_head_base, hc_head_scale;
};

struct model_weights {
  linear_weight embed;  // [D, vocab] (rows gathered, never multiplied)
  linear_weight head;   // [D, vocab]
  std::vector<float> norm;
  std::vector<float> hc_head_fn, hc_head_base, hc_head_scale;
  std::vector<layer_weights> layers;
  /// config n_mtp_layers blocks when the source holds `mtp.0.*` tensors, else none
  /// (Hugging Face checkpoints drop them): drafting needs them, serving does not.
  std::vector<mtp_weights> mtp;
  std::vector<float> inv_freq_main;      // [rope_dim/2]
  std::vector<float> inv_freq_compress;  // [rope_dim/2]
  int64_t n_params = 0;
};

struct load_progress {
  int64_t layers_done = 0;
  int64_t layers_total = 0;
};

class tensor_source;

/// Reads the model from `src` piece by piece: what model_weights_load holds,
/// with the same checks (a missing, mis-shaped or wrong-dtype tensor is an
/// error naming it, raised when its piece is read). `lazy`: linears come with
/// `w` empty and `stored` set, their values read by read_rows when wanted
/// (everything else is read at once: vectors, mHC and RoPE tables, hash
/// routing tables). The source must outlive the reader and lazy pieces.
class model_weights_reader {
 public:
  struct options {
    bool row_invariant = false;     // linear_weight::row_invariant on every linear
    bool bf16_activations = false;  // linear_weight::bf16_output / k_block as the official inference sums
    bool lazy = false;
    /// The model is served with MXFP4 routed experts (a weight update for it):
    /// in fp8 precision, routed experts not stored MXFP4 are read through MXFP4
    /// QDQ (the release checkpoints' per-32 scale rule) instead of FP8's, so
    /// that they hold what a release checkpoint of the same values holds.
    bool mxfp4_experts = false;
  };
  static status_or<std::unique_ptr<model_weights_reader>> open(const tensor_source& src,
                                                               const model_config& cfg, precision prec,
                                                               options opts);
  ~model_weights_reader();

  /// Everything outside the layers (embed, head, final norm, mHC head, RoPE tables); `layers` empty.
  status_or<model_weights> globals();
  /// Layer `il`, routed experts included. Errors name the layer.
  status_or<layer_weights> layer(int64_t il);
  /// Whether the source holds tensors of MTP block `i` (`mtp.<i>.*`).
  bool has_mtp(int64_t i) const;
  /// MTP block `i` (< config n_mtp_layers); errors name the block and the tensor.
  status_or<mtp_weights> mtp(int64_t i);
  /// Rows [row0, row0 + rows) of `w` ([out, in], from this reader) as the
  /// eager load holds them (FP8 and MXFP4 codes decoded, stored.qdq applied) into `out` [rows, in]. row0 a
  /// multiple of 128 (a row block of the FP8 tiles); data_loss for a NaN scale code.
  status read_rows(const linear_weight& w, int64_t row0, int64_t rows, float* out) const;
  /// The whole of a lazy `w` into w->w (stored kept).
  status read(linear_weight* w) const;
  /// Parameters counted by the pieces read so far.
  int64_t n_params() const;
  /// Bytes of the source's tensors under layer `il` ("layers.il."), and of all it holds (progress).
  int64_t layer_bytes(int64_t il) const;
  int64_t total_bytes() const;

 private:
  struct impl;
  explicit model_weights_reader(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

/// Loads every tensor the config needs from `src`, checking names, shapes and
/// dtypes; a missing, mis-shaped or wrong-dtype tensor is an error that names
/// it. The same rules hold for a checkpoint and for a staged weight update.
/// `on_progress` (optional) is called after each layer. Reads `src` only, so
/// it may run beside a forward pass of an engine with other weights.
/// `opts` as the reader's (`bf16_activations` marks the linears whose outputs
/// the official inference rounds to bf16: linear_weight::bf16_output,
/// docs/precision.md); `lazy` is ignored: every value is read.
status_or<model_weights> model_weights_load(const tensor_source& src, const model_config& cfg, precision prec,
                                            void (*on_progress)(const load_progress&) = nullptr,
                                            model_weights_reader::options opts = {});
/// The checkpoint directory `dir` as the source.
status_or<model_weights> model_weights_load(const std::string& dir, const model_config& cfg, precision prec,
                                            void (*on_progress)(const load_progress&) = nullptr,
                                            model_weights_reader::options opts = {});

/// RoPE inverse frequencies [rope_dim/2] for one rope config (default or YaRN,
/// exactly as the Hugging Face reference computes them, in fp32).
std::vector<float> rope_inv_freq(const rope_config& r, int64_t head_dim);

}  // namespace hart
