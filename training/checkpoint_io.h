// File: training/checkpoint_io.h
// A v4_model from and to safetensors checkpoint directories, through hart's
// reader and writer (runtime/model/safetensors.h). Loading accepts every
// spelling runtime/model/weight_names.h maps (official, Hugging Face, mixed)
// with F32 / BF16 / F16 / F64 weights; saving writes the canonical names in
// fp32 or bf16 plus config and tokenizer files, a directory `hart score
// --model` and hart::engine::load read.
//
//   HART_ASSIGN_OR_RETURN(auto model, training::v4_model_load("tests/data/tiny-c"));
//   HART_RETURN_IF_ERROR(training::v4_model_save(*model, "/tmp/out", torch::kBFloat16, "tests/data/tiny-c"));
#pragma once

#include "runtime/core/status.h"
#include "training/v4_model.h"

#include <memory>
#include <string>

namespace hart::training {

/// Reads `dir`/config.json and every weight; fp32 parameters.
status_or<std::shared_ptr<v4_model>> v4_model_load(const std::string& dir);

/// Overwrites every parameter and buffer of `model` from the checkpoint at
/// `dir`. A missing, mis-shaped or quantized (FP8 / FP4) tensor is an error
/// naming it; `model` may then be partly overwritten.
status v4_model_load_weights(v4_model& model, const std::string& dir);

/// Writes `dir`/model.safetensors (floating tensors in `dtype`: kFloat32 or
/// kBFloat16; tid2eid as I64) and copies config.json, generation_config.json,
/// tokenizer.json and tokenizer_config.json from `config_dir` where present.
/// Creates `dir`; refuses one holding a sharded index (it would shadow the file).
status v4_model_save(const v4_model& model, const std::string& dir, torch::Dtype dtype,
                     const std::string& config_dir);

}  // namespace hart::training
