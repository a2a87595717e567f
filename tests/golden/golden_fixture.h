// File: tests/golden/golden_fixture.h
// Loads a vendored golden directory (tests/data/<name>): the engine in a given
// precision plus the reference tensors of golden.safetensors, and measures
// per-position relative error ‖a−b‖/‖b‖.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/model/engine.h"
#include "runtime/model/safetensors.h"

namespace hart::testing {

struct golden_set {
  std::string dir;
  std::unique_ptr<engine> eng;
  weight_store ref;
  int64_t batch = 0, seq = 0, vocab = 0;
  std::vector<std::vector<int32_t>> input_ids;  // [batch][seq]

  /// Reference fp32 tensor by name (HART_CHECKs shape availability).
  std::vector<float> floats(const std::string& name) const;
  std::vector<int64_t> ints(const std::string& name) const;
  /// Logits row [V] of reference tensor `name` at (b, s).
  const float* logits_row(const std::vector<float>& all, int64_t b, int64_t s) const {
    return all.data() + (b * seq + s) * vocab;
  }
};

std::unique_ptr<golden_set> golden_load(const std::string& name, precision prec = precision::exact);

/// ‖a − b‖ / ‖b‖ over n values.
double rel_error(const float* a, const float* b, int64_t n);

/// Max over positions of the per-position relative error between `got`
/// ([V, seq] rows for batch row b) and the reference `want` tensor.
double max_rel_error_row(const golden_set& g, const std::vector<float>& got, const std::vector<float>& want,
                         int64_t b, int64_t* worst_pos = nullptr);

}  // namespace hart::testing
