// File: tests/random_checkpoint.h — a V4 checkpoint of random weights on disk,
// for tests at shapes no committed fixture has (V4-Flash's attention width):
// `config.json` as given plus one `model.safetensors` in the official names,
// linears BF16 (as a trainer writes them; the fp8 mode quantizes them at load,
// on the CPU and the GPU alike), the rest F32, hash-routing tables I32. Values
// follow `hart bench`'s random model (runtime/gpu/bench_model.cpp): linears
// uniform with standard deviation in^-1/2, norms near 1, small mHC mixes, so
// activations keep their scale through the layers.
//
//   nlohmann::json c = ...;  // an official or Hugging Face config
//   HART_RETURN_IF_ERROR(random_checkpoint_write("/tmp/flash-3", c, 7));
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/status.h"

namespace hart::testing {

/// Creates `dir` (and its parents) and writes the checkpoint; the config's
/// errors are model_config_parse's.
status random_checkpoint_write(const std::string& dir, const nlohmann::json& config, uint64_t seed);

}  // namespace hart::testing
