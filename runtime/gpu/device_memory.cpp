#include "runtime/gpu/device_memory.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace hart::gpu {

status cuda_status(int e, const char* what) {
  if (e == cudaSuccess) return {};
  return internal_error("%s: %s", what, cudaGetErrorString(cudaError_t(e)));
}

namespace {
std::atomic<size_t> g_live_bytes{0};
}  // namespace

size_t device_buffer::live_bytes() {
  return g_live_bytes.load();
}

void device_buffer::release() {
  if (!ptr_) return;
  cudaFree(ptr_);
  g_live_bytes -= bytes_;
  ptr_ = nullptr;
  bytes_ = 0;
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
  g_live_bytes += bytes;
  return b;
}

device_buffer::~device_buffer() {
  release();
}

device_buffer& device_buffer::operator=(device_buffer&& o) noexcept {
  if (this != &o) {
    release();
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
    return resource_exhausted("gpu engine: cudaHostAlloc of %zu bytes failed: %s", bytes,
                              cudaGetErrorString(e));
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

status_or<pinned_readback> pinned_readback::create(size_t chunk_bytes, int copy_threads) {
  pinned_readback r;
  r.copiers_ = std::make_unique<piece_pool>(copy_threads);
  void* base = nullptr;
  cudaError_t e = cudaHostAlloc(&base, 2 * chunk_bytes, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return resource_exhausted("gpu engine: cudaHostAlloc of %zu bytes failed: %s", 2 * chunk_bytes,
                              cudaGetErrorString(e));
  }
  r.base_ = static_cast<char*>(base);
  r.chunk_ = chunk_bytes;
  for (CUevent_st*& ev : r.done_) {
    e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) return cuda_status(e, "gpu engine: readback event");
  }
  return r;
}

void pinned_readback::release() {
  for (CUevent_st*& ev : done_) {
    if (ev) cudaEventDestroy(ev);
    ev = nullptr;
  }
  if (base_) cudaFreeHost(base_);
  base_ = nullptr;
}

pinned_readback::~pinned_readback() {
  release();
}

pinned_readback& pinned_readback::operator=(pinned_readback&& o) noexcept {
  if (this != &o) {
    release();
    base_ = std::exchange(o.base_, nullptr);
    chunk_ = std::exchange(o.chunk_, 0);
    for (int i = 0; i < 2; ++i) done_[i] = std::exchange(o.done_[i], nullptr);
    copiers_ = std::move(o.copiers_);
  }
  return *this;
}

status pinned_readback::copy(void* dst, const void* src, size_t bytes, CUstream_st* stream) {
  if (!base_) return failed_precondition("gpu engine: readback used before create");
  char* out = static_cast<char*>(dst);
  const char* in = static_cast<const char*>(src);
  const size_t n_chunks = (bytes + chunk_ - 1) / chunk_;
  auto chunk_len = [&](size_t i) { return std::min(chunk_, bytes - i * chunk_); };
  // Chunk i's DMA is queued before the host drains chunk i-1 (its buffer was drained at i-2's turn).
  for (size_t i = 0; i <= n_chunks; ++i) {
    if (i < n_chunks) {
      char* buf = base_ + (i % 2) * chunk_;
      HART_RETURN_IF_ERROR(
          cuda_status(cudaMemcpyAsync(buf, in + i * chunk_, chunk_len(i), cudaMemcpyDeviceToHost, stream),
                      "gpu engine: readback"));
      HART_RETURN_IF_ERROR(cuda_status(cudaEventRecord(done_[i % 2], stream), "gpu engine: readback"));
    }
    if (i > 0) {
      const size_t j = i - 1, len = chunk_len(j);
      HART_RETURN_IF_ERROR(cuda_status(cudaEventSynchronize(done_[j % 2]), "gpu engine: readback"));
      char* to = out + j * chunk_;
      const char* from = base_ + (j % 2) * chunk_;
      // Pieces of >= 1 MiB: below that a thread hand-off (~10 us) is not small against the copy.
      const size_t k = std::clamp<size_t>(len >> 20, 1, size_t(copiers_->threads())),
                   piece = (len + k - 1) / k;
      copiers_->run(k, [&](size_t p) {
        const size_t at = std::min(len, p * piece);
        std::memcpy(to + at, from + at, std::min(piece, len - at));
      });
    }
  }
  return {};
}

}  // namespace hart::gpu
