// cuda_ipc.h in a build without CUDA: chunks in CUDA memory are refused.
#include "runtime/weight_sync/cuda_ipc.h"

namespace hart::weight_sync {

status_or<cuda_ipc_ref> cuda_ipc_export(const void*) {
  return unimplemented(
      "weight sync from CUDA memory: this build has no CUDA (configure with -DHART_CUDA=ON)");
}

status cuda_ipc_reader::read(const std::vector<uint8_t>&, uint64_t, void*, size_t) {
  return unimplemented("weight sync: chunks in CUDA memory need a server built with CUDA");
}

void cuda_ipc_reader::close() {
  opened_.clear();
}

}  // namespace hart::weight_sync
