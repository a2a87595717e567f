// File: tests/golden/golden_fixture.h
// Loads a vendored golden directory (tests/data/<name>): the engine in a given
// precision plus the reference tensors of golden.safetensors, and measures
// per-position relative error ‖a−b‖/‖b‖.
#pragma once

#include "runtime/model/engine.h"
#include "runtime/model/safetensors.h"

#include <memory>
#include <string>
#include <vector>

namespace hart::testing {

struct golden_set {
  std::string dir;
  std::unique_ptr<engine> eng;
  weight_store ref;
  int64_t batch = 0, seq = 0, vocab = 0;
  std::vector<std::vector<int32_t>> input_ids;  // [batch][seq]
  /// Positions per row whose error max_rel_error_row may ignore: indexer
  /// near-ties (score gaps ~1e-5 relative) can flip with fp32 rounding that
  /// differs between GEMM kernels. 0 for fixtures without near-ties.
  int64_t near_tie_allowance = 0;

  /// A fresh sequence whose indexer ties are resolved as the reference's single
  /// full forward over `seq` tokens resolves them (sequence_state::tie_reference_length).
  sequence_state reference_sequence() const {
    sequence_state s = eng->new_sequence();
    s.tie_reference_length = seq;
    return s;
  }

  /// Reference fp32 tensor by name (HART_CHECKs shape availability).
  std::vector<float> floats(const std::string& name) const;
  std::vector<int64_t> ints(const std::string& name) const;
  /// Logits row [V] of reference tensor `name` at (b, s).
  const float* logits_row(const std::vector<float>& all, int64_t b, int64_t s) const {
    return all.data() + (b * seq + s) * vocab;
  }
};

/// Whether the engine compared with fixture `name`'s reference must run
/// deterministic (engine_params::deterministic): true for tiny-c, whose
/// indexer near-ties the BLAS kernels of other CPUs and thread counts round
/// differently. golden_load applies it; so must a test loading its own engine.
bool golden_deterministic(const std::string& name);

/// `fp32_activations`: engine_params::fp32_activations (the GPU's fp8 numerics).
std::unique_ptr<golden_set> golden_load(const std::string& name, precision prec = precision::exact,
                                        bool deterministic = false, bool fp32_activations = false);

/// ‖a − b‖ / ‖b‖ over n values.
double rel_error(const float* a, const float* b, int64_t n);

/// Max over positions of the per-position relative error between `got`
/// ([V, seq] rows for batch row b) and the reference `want` tensor, after
/// setting aside the `near_tie_allowance` worst positions.
double max_rel_error_row(const golden_set& g, const std::vector<float>& got, const std::vector<float>& want,
                         int64_t b, int64_t* worst_pos = nullptr);

}  // namespace hart::testing
