// nccl_group.h in a build without NCCL (HART_NCCL off): updates by NCCL are refused.
#include "runtime/weight_sync/nccl_group.h"

namespace hart::weight_sync {

namespace {

status no_nccl() {
  return unimplemented(
      "weight sync by NCCL: this build has no NCCL (configure with -DHART_CUDA=ON where libnccl is "
      "found, or -DHART_NCCL_ROOT=DIR)");
}

}  // namespace

struct nccl_group::state {};

status nccl_group::usable(int) {
  return no_nccl();
}
status_or<std::vector<uint8_t>> nccl_group::new_id() {
  return no_nccl();
}
status_or<int> nccl_group::device_of(const void*) {
  return no_nccl();
}

nccl_group::nccl_group() = default;
nccl_group::~nccl_group() = default;

status nccl_group::join(const std::vector<uint8_t>&, int, int, int, std::chrono::milliseconds) {
  return no_nccl();
}
bool nccl_group::joined(const std::vector<uint8_t>&, int) const {
  return false;
}
status nccl_group::broadcast(const void*, size_t, const std::function<status()>&) {
  return no_nccl();
}
status nccl_group::drain(const std::function<status()>&) {
  return no_nccl();
}
status nccl_group::receive(void*, size_t) {
  return no_nccl();
}
void nccl_group::close() {}

}  // namespace hart::weight_sync
