// File: runtime/weight_sync/crc_pool.h
// CRC-32C (with or without a copy) of large buffers split over threads: each
// piece's CRC from zero on its own thread, combined in order (crc32c_combine),
// so the result is the one-thread value. The weight-sync server stages every
// received frame through it and the client checksums its tensors with it: one
// core's fused CRC + copy (~5 GB/s cold) was the server's bound (perf-notes W1).
//
//   crc_pool pool(4);                              // the caller + 3 workers
//   crc = pool.copy(crc, dst, src, n);             // == crc32c_copy(crc, dst, src, n)
//   crc = pool.extend(crc, src, n);                // == crc32c_extend(crc, src, n)
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace hart::weight_sync {

/// Threads for a crc_pool when none are asked for: a quarter of the cores,
/// 1 to 4 (the I/O and actor threads keep theirs).
int crc_pool_default_threads();

class crc_pool {
 public:
  /// `threads` in all, the caller's included; <= 1 runs everything on the caller.
  explicit crc_pool(int threads);
  ~crc_pool();
  crc_pool(const crc_pool&) = delete;
  crc_pool& operator=(const crc_pool&) = delete;

  uint32_t copy(uint32_t crc, void* dst, const void* src, size_t n);
  uint32_t extend(uint32_t crc, const void* src, size_t n);
  int threads() const { return int(workers_.size()) + 1; }

 private:
  struct piece {
    uint8_t* dst = nullptr;  // null: checksum only
    const uint8_t* src = nullptr;
    size_t n = 0;
    uint32_t crc = 0;
  };
  uint32_t run(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t n);
  void work(size_t index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  std::vector<piece> pieces_;  // [0] is the caller's
  uint64_t generation_ = 0;
  size_t pending_ = 0;
  bool stop_ = false;
};

}  // namespace hart::weight_sync
