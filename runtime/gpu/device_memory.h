// File: runtime/gpu/device_memory.h
// Device allocations of the GPU engine, all made at load: device_buffer owns
// one cudaMalloc; device_arena hands out aligned slices of one buffer, sized
// once for the largest step, so a forward pass never allocates.
//
//   HART_ASSIGN_OR_RETURN(device_buffer b, device_buffer::create(bytes));
//   device_arena a(b.get(), b.bytes());
//   float* x = a.take<float>(n);   // null when the arena is exhausted
#pragma once

#include "runtime/core/piece_pool.h"
#include "runtime/core/status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

struct CUstream_st;
struct CUevent_st;

namespace hart::gpu {

class device_buffer {
 public:
  device_buffer() = default;
  /// resource_exhausted (with the size and the CUDA error) when it does not fit.
  static status_or<device_buffer> create(size_t bytes);
  ~device_buffer();
  device_buffer(device_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  /// Bytes held by every live device_buffer of the process (what a failed load must give back).
  static size_t live_bytes();

 private:
  void release();
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Bump allocation over a fixed region; slices are 256-byte aligned.
class device_arena {
 public:
  static constexpr size_t k_align = 256;
  device_arena() = default;
  device_arena(void* base, size_t bytes) : base_(static_cast<char*>(base)), bytes_(bytes) {}

  /// Bytes `take` would use for these element counts (for sizing the region).
  template <class T>
  static size_t bytes_for(int64_t n) {
    return (size_t(n) * sizeof(T) + k_align - 1) / k_align * k_align;
  }
  /// n elements, or null past the end (callers size the arena with bytes_for).
  template <class T>
  T* take(int64_t n) {
    const size_t b = bytes_for<T>(n < 1 ? 1 : n);
    if (used_ + b > bytes_) return nullptr;
    T* p = reinterpret_cast<T*>(base_ + used_);
    used_ += b;
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
  size_t used_ = 0;
};

/// Pinned host memory that step metadata is staged in before it is copied to
/// the device: a cudaMemcpyAsync from pageable memory may wait for the stream
/// (the driver stages it), one from pinned memory does not, so the host can
/// build layer l+1's metadata while the device runs layer l. Bump allocation;
/// the caller resets it once the stream has consumed every copy.
class pinned_staging {
 public:
  pinned_staging() = default;
  static status_or<pinned_staging> create(size_t bytes);
  ~pinned_staging();
  pinned_staging(pinned_staging&& o) noexcept
      : base_(std::exchange(o.base_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)),
        used_(std::exchange(o.used_, 0)) {}
  pinned_staging& operator=(pinned_staging&& o) noexcept;
  pinned_staging(const pinned_staging&) = delete;
  pinned_staging& operator=(const pinned_staging&) = delete;

  /// `bytes` of staging (16-byte aligned), or null when they do not fit.
  void* take(size_t bytes);
  void reset() { used_ = 0; }
  size_t capacity() const { return bytes_; }

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
  size_t used_ = 0;
};

/// Device → pageable host copies through two pinned chunks: the DMA of chunk
/// i+1 overlaps the host's copy of chunk i out of the pinned memory, that copy
/// split over `copy_threads` (one core's memcpy, ~10 GB/s, was the bound). A
/// pageable cudaMemcpy stages through the driver's buffers at a fraction of the
/// link's speed; the logits of a batch-32 step are 16.5 MB.
class pinned_readback {
 public:
  pinned_readback() = default;
  static status_or<pinned_readback> create(size_t chunk_bytes, int copy_threads);
  ~pinned_readback();
  pinned_readback(pinned_readback&& o) noexcept { *this = std::move(o); }
  pinned_readback& operator=(pinned_readback&& o) noexcept;
  pinned_readback(const pinned_readback&) = delete;
  pinned_readback& operator=(const pinned_readback&) = delete;

  /// Copies `bytes` from device `src` to host `dst` after the stream's earlier
  /// work, and returns when they are in `dst`.
  status copy(void* dst, const void* src, size_t bytes, CUstream_st* stream);

 private:
  void release();
  char* base_ = nullptr;  // two chunks of chunk_ bytes
  size_t chunk_ = 0;
  CUevent_st* done_[2] = {nullptr, nullptr};
  std::unique_ptr<piece_pool> copiers_;
};

/// cudaError_t → status naming `what`.
status cuda_status(int cuda_error, const char* what);

}  // namespace hart::gpu
