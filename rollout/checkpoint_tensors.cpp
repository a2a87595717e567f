#include "rollout/checkpoint_tensors.h"

namespace hart {

status_or<checkpoint_tensors> checkpoint_tensors_open(const std::string& dir) {
  checkpoint_tensors c;
  HART_ASSIGN_OR_RETURN(c.source, checkpoint_source_open(dir));
  for (const tensor_entry* e : c.source->tensors()) {
    c.tensors.push_back({e->name, e->type, e->shape, e->data, e->n_bytes});
  }
  return c;
}

}  // namespace hart
