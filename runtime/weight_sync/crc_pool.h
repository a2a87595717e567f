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

#include "runtime/core/piece_pool.h"

#include <cstddef>
#include <cstdint>

namespace hart::weight_sync {

/// Threads for a crc_pool when none are asked for (piece_pool_default_threads).
inline int crc_pool_default_threads() {
  return piece_pool_default_threads();
}

class crc_pool {
 public:
  /// `threads` in all, the caller's included; <= 1 runs everything on the caller.
  explicit crc_pool(int threads) : pool_(threads) {}

  uint32_t copy(uint32_t crc, void* dst, const void* src, size_t n);
  uint32_t extend(uint32_t crc, const void* src, size_t n);
  int threads() const { return pool_.threads(); }

 private:
  uint32_t run(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t n);

  piece_pool pool_;
};

}  // namespace hart::weight_sync
