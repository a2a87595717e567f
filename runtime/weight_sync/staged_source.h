// File: runtime/weight_sync/staged_source.h
// The host memory an update is staged in, and the tensor_source the engine
// builds from. A staged_buffer is one tensor's bytes: allocated without
// zeroing, 2 MiB-aligned, backed by transparent huge pages and populated in
// one call when large (instead of one page fault per 4 KiB during the copy),
// so the staging can keep it and refill it in place for the next update.
// staged_tensor_source shares the buffers (shared_ptr): they stay valid while
// either the staging or the source holds them.
//
//   HART_ASSIGN_OR_RETURN(auto buf, staged_buffer::create(n_bytes));
//   staged_tensor_source src("weight update 3");
//   src.add({name, dtype::bf16, shape, buf->data(), n_bytes, src.describe()}, buf);
#pragma once

#include "runtime/core/status.h"
#include "runtime/model/tensor_source.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hart::weight_sync {

class staged_buffer {
 public:
  /// resource_exhausted when the memory is not there.
  static status_or<std::shared_ptr<staged_buffer>> create(size_t n_bytes);
  ~staged_buffer();
  staged_buffer(const staged_buffer&) = delete;
  staged_buffer& operator=(const staged_buffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t n_bytes() const { return n_bytes_; }

 private:
  staged_buffer(uint8_t* data, size_t n_bytes) : data_(data), n_bytes_(n_bytes) {}
  uint8_t* data_;
  size_t n_bytes_;
};

/// The tensors of one staged update, in name order; entries point into the buffers it holds.
class staged_tensor_source : public tensor_source {
 public:
  explicit staged_tensor_source(std::string description) : description_(std::move(description)) {}

  /// `e.data` must lie in `keep`. Names are unique (the staging's map).
  void add(tensor_entry e, std::shared_ptr<const staged_buffer> keep);

  std::vector<const tensor_entry*> tensors() const override;
  const std::string& describe() const override { return description_; }
  size_t size() const { return entries_.size(); }

 private:
  struct held {
    tensor_entry entry;
    std::shared_ptr<const staged_buffer> keep;
  };
  std::string description_;
  std::vector<std::unique_ptr<held>> entries_;  // added in name order
};

}  // namespace hart::weight_sync
