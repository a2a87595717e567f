// File: rollout/checkpoint_tensors.h
// A checkpoint directory as the tensor_refs weight_sync_client::push takes:
// every tensor of the mmap'd safetensors files, in name order, bytes in place.
// For `hart push-weights` and the weight-sync example; a trainer passes its
// own parameters instead.
#pragma once

#include "rollout/weight_sync_client.h"
#include "runtime/model/tensor_source.h"

#include <memory>
#include <string>
#include <vector>

namespace hart {

struct checkpoint_tensors {
  std::unique_ptr<tensor_source> source;  ///< keeps the mapped bytes alive
  std::vector<tensor_ref> tensors;
};

status_or<checkpoint_tensors> checkpoint_tensors_open(const std::string& dir);

}  // namespace hart
