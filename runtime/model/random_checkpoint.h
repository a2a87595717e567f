// File: runtime/model/random_checkpoint.h
// A V4 checkpoint of random weights on disk, for tests and benchmarks at
// shapes no committed fixture has: `config.json` as given plus safetensors in
// the official tensor names. Two formats:
//  - bf16: linears BF16 (as a trainer writes them; the fp8 mode quantizes them
//    at load), the rest F32, hash-routing tables I32; one file.
//  - release: what DeepSeek publishes (V4-Flash, V4-Pro): the FP8 linears as
//    F8_E4M3 with F8_E8M0 scales per 128x128 tile, routed experts MXFP4 (I8
//    e2m1 pairs + F8_E8M0 per 32), embedding, head, norms, compressor and gate
//    weights BF16, mHC/sink/ape/bias F32; sharded with an index, and the
//    config gains `quantization_config` and `expert_dtype` as released.
// A config with MTP layers (num_nextn_predict_layers) gets its `mtp.<i>.*`
// blocks after the main layers, as the releases carry them.
// Values follow `hart bench`'s random model (runtime/gpu/bench_model.cpp):
// linears uniform with standard deviation in^-1/2, norms near 1, small mHC
// mixes, so activations keep their scale through the layers. The bytes depend
// only on (config, options): integer PRNG and exact float arithmetic, so any
// machine writes the same files (golden tests regenerate them).
//
//   nlohmann::json c = ...;  // an official or Hugging Face config
//   random_checkpoint_options o;
//   o.format = checkpoint_format::release;
//   HART_RETURN_IF_ERROR(random_checkpoint_write("/tmp/flash-3", c, o));
#pragma once

#include "runtime/core/status.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace hart {

enum class checkpoint_format { bf16, release };
/// "bf16" / "release"; false for anything else.
bool checkpoint_format_parse(const std::string& s, checkpoint_format* out);

struct random_checkpoint_options {
  uint64_t seed = 1;
  checkpoint_format format = checkpoint_format::bf16;
  /// release: a new shard starts once a shard holds this many bytes (0 = one file).
  int64_t shard_bytes = 0;
  /// Every value rounded to bf16 as drawn: the bf16 and release checkpoints of
  /// one seed then hold the same weights before the release format's
  /// quantization, as a trainer's checkpoint and its release conversion do.
  bool bf16_values = false;
};

/// `config` cut to its first `n` layers (num_hidden_layers and every per-layer list:
/// compress_ratios, layer_types, mlp_layer_types; num_hash_layers at most n). invalid_argument
/// when it has fewer.
status random_checkpoint_truncate_layers(nlohmann::json& config, int64_t n);

/// Creates `dir` (and its parents) and writes the checkpoint; the config's
/// errors are model_config_parse's. The release format needs every FP8
/// linear's dimensions to be multiples of 128 and the experts' of 32
/// (invalid_argument naming the tensor otherwise).
status random_checkpoint_write(const std::string& dir, const nlohmann::json& config,
                               const random_checkpoint_options& options);

}  // namespace hart
