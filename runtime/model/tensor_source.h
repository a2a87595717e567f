// File: runtime/model/tensor_source.h
// Where model_weights_load reads tensors from: a checkpoint directory (mmap'd
// safetensors), or named tensors held in memory (a trainer's weight update,
// staged by the server). Names may be in any spelling weight_names.h accepts.
//
//   HART_ASSIGN_OR_RETURN(auto src, checkpoint_source_open("/models/tiny-a"));
//   memory_tensor_source m("weight update v3");
//   HART_RETURN_IF_ERROR(m.add("embed.weight", dtype::bf16, {V, D}, std::move(bytes)));
//   HART_ASSIGN_OR_RETURN(auto w, model_weights_load(m, cfg, precision::fp8));
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/safetensors.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hart {

/// A read-only set of named tensors. Entries stay valid while the source lives.
class tensor_source {
 public:
  virtual ~tensor_source() = default;
  /// Every tensor, in name order.
  virtual std::vector<const tensor_entry*> tensors() const = 0;
  /// What it is, for error messages ("/models/tiny-a", "weight update v3").
  virtual const std::string& describe() const = 0;
};

/// The safetensors checkpoint at `dir` (see weight_store::open).
status_or<std::unique_ptr<tensor_source>> checkpoint_source_open(const std::string& dir);

/// Tensors owned in memory. Only the dtypes a trainer sends are accepted:
/// BF16, F16, F32, and I32/I64 for integer tables (hash-routing tid2eid).
class memory_tensor_source : public tensor_source {
 public:
  explicit memory_tensor_source(std::string description) : description_(std::move(description)) {}

  /// Takes `bytes` (row-major, little-endian). invalid_argument for a
  /// duplicate name, an unsupported dtype, a negative dimension or a size
  /// that is not numel × dtype size; nothing is added then.
  status add(const std::string& name, dtype type, std::vector<int64_t> shape, std::vector<uint8_t> bytes);

  std::vector<const tensor_entry*> tensors() const override;
  const std::string& describe() const override { return description_; }
  size_t size() const { return entries_.size(); }
  size_t n_bytes() const { return n_bytes_; }

 private:
  struct owned {
    tensor_entry entry;
    std::vector<uint8_t> bytes;
  };
  std::string description_;
  std::map<std::string, std::unique_ptr<owned>> entries_;
  size_t n_bytes_ = 0;
};

/// True for the dtypes memory_tensor_source accepts.
bool memory_source_dtype_ok(dtype t);

}  // namespace hart
