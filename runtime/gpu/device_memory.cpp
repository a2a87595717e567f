#include "runtime/gpu/device_memory.h"

#include <cuda_runtime.h>

namespace hart::gpu {

status cuda_status(int e, const char* what) {
  if (e == cudaSuccess) return {};
  return internal_error("%s: %s", what, cudaGetErrorString(cudaError_t(e)));
}

status_or<device_buffer> device_buffer::create(size_t bytes) {
  device_buffer b;
  if (bytes == 0) return b;
  const cudaError_t e = cudaMalloc(&b.ptr_, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return resource_exhausted("gpu engine: cudaMalloc of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
  }
  b.bytes_ = bytes;
  return b;
}

device_buffer::~device_buffer() {
  if (ptr_) cudaFree(ptr_);
}

device_buffer& device_buffer::operator=(device_buffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

}  // namespace hart::gpu
