// The byte order of MXFP4 groups in the grouped linear (linear.h, mxfp4_mma_order).
#include "kernels/linear/linear.h"

#include <cstdint>
#include <cstring>

namespace hart {

status mxfp4_mma_order(const uint8_t* packed, int64_t rows, int64_t cols, uint8_t* out) {
  if (!packed || !out || rows < 0 || cols <= 0 || cols % 128 != 0) {
    return invalid_argument(
        "mxfp4_mma_order: rows=%lld cols=%lld (cols a positive multiple of 128, non-null buffers)",
        (long long)rows, (long long)cols);
  }
  const int64_t n_blocks = rows * cols / 128;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* src = packed + b * 64;
    uint8_t block[64];
    for (int j = 0; j < 4; ++j) {
      for (int t = 0; t < 4; ++t) std::memcpy(block + t * 16 + j * 4, src + j * 16 + t * 4, 4);
    }
    std::memcpy(out + b * 64, block, 64);
  }
  return {};
}

}  // namespace hart
