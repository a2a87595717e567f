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

status_or<pinned_staging> pinned_staging::create(size_t bytes) {
  pinned_staging p;
  void* base = nullptr;
  const cudaError_t e = cudaHostAlloc(&base, bytes, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return resource_exhausted("gpu engine: cudaHostAlloc of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
  }
  p.base_ = static_cast<char*>(base);
  p.bytes_ = bytes;
  return p;
}

pinned_staging::~pinned_staging() {
  if (base_) cudaFreeHost(base_);
}

pinned_staging& pinned_staging::operator=(pinned_staging&& o) noexcept {
  if (this != &o) {
    if (base_) cudaFreeHost(base_);
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    used_ = std::exchange(o.used_, 0);
  }
  return *this;
}

void* pinned_staging::take(size_t bytes) {
  const size_t b = (bytes + 15) / 16 * 16;
  if (used_ + b > bytes_) return nullptr;
  void* p = base_ + used_;
  used_ += b;
  return p;
}

}  // namespace hart::gpu
