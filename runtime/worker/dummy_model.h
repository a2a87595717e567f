// File: runtime/worker/dummy_model.h
// `--load-format dummy` (vLLM's name): a model directory's config.json, optionally cut to its
// first layers, with random weights (runtime/model/random_checkpoint: the release format's FP8 +
// MXFP4 where the shapes allow it, else BF16) written to a temporary directory beside copies of
// the tokenizer files, so every engine loads it through its real loader. Real shapes, no
// download; the outputs are noise. The directory goes when the object does. With
// `--device cuda` nothing is written: the GPU engine makes the weights on the device in its
// serving formats (runtime/gpu/bench_model.h) for dummy_model_config's shapes.
//
//   HART_ASSIGN_OR_RETURN(auto dummy, dummy_model::create(o.model_dir, o.num_layers, 1));
//   o.model_dir = dummy->dir();
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/config.h"

#include <cstdint>
#include <memory>
#include <string>

namespace hart::worker {

/// `model_dir`'s config.json cut to its first `num_layers` layers (0 = all), as the dummy
/// model has it. Errors: as dummy_model::create's for the config.
status_or<model_config> dummy_model_config(const std::string& model_dir, int64_t num_layers);

class dummy_model {
 public:
  /// Errors: no readable config.json in `model_dir`, more layers asked for than it has, a
  /// config the writer refuses, a full disk.
  static status_or<std::unique_ptr<dummy_model>> create(const std::string& model_dir, int64_t num_layers,
                                                        uint64_t seed);
  ~dummy_model();
  dummy_model(const dummy_model&) = delete;
  dummy_model& operator=(const dummy_model&) = delete;

  const std::string& dir() const { return dir_; }

 private:
  explicit dummy_model(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace hart::worker
