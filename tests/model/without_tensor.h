// File: tests/model/without_tensor.h — a tensor_source that is another one's
// tensors but one: the checkpoint a loader must refuse by the missing name.
// Shared by the CPU reader's and the GPU streamed load's error tests.
#pragma once

#include "runtime/model/safetensors.h"
#include "runtime/model/tensor_source.h"

#include <string>
#include <utility>
#include <vector>

namespace hart::testing {

class without_tensor : public tensor_source {
 public:
  without_tensor(const tensor_source& base, std::string drop) : base_(base), drop_(std::move(drop)) {}
  std::vector<const tensor_entry*> tensors() const override {
    std::vector<const tensor_entry*> v;
    for (const tensor_entry* e : base_.tensors()) {
      if (e->name != drop_) v.push_back(e);
    }
    return v;
  }
  const std::string& describe() const override { return base_.describe(); }

 private:
  const tensor_source& base_;
  std::string drop_;
};

}  // namespace hart::testing
