#include "runtime/weight_sync/crc_pool.h"

#include "runtime/weight_sync/crc32c.h"

#include <algorithm>
#include <vector>

namespace hart::weight_sync {
namespace {

// Below this a piece's thread hand-off (~10 µs) is no longer small against its
// CRC (~100 µs per MiB at 10 GB/s); pieces start on 4 KiB boundaries.
constexpr size_t k_min_piece = size_t(1) << 20;
constexpr size_t k_piece_align = 4096;

}  // namespace

uint32_t crc_pool::run(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t n) {
  const size_t k = std::min(size_t(pool_.threads()), n / k_min_piece);
  if (k <= 1) return dst ? crc32c_copy(crc, dst, src, n) : crc32c_extend(crc, src, n);
  // k pieces of ~n/k bytes, 4 KiB-aligned cuts, each piece's CRC from zero.
  const size_t step = (n / k + k_piece_align - 1) / k_piece_align * k_piece_align;
  std::vector<uint32_t> crcs(k);
  auto len = [&](size_t i) { return i + 1 == k ? n - i * step : step; };
  pool_.run(k, [&](size_t i) {
    const size_t at = i * step;
    crcs[i] = dst ? crc32c_copy(0, dst + at, src + at, len(i)) : crc32c_extend(0, src + at, len(i));
  });
  for (size_t i = 0; i < k; ++i) crc = crc32c_combine(crc, crcs[i], len(i));
  return crc;
}

uint32_t crc_pool::copy(uint32_t crc, void* dst, const void* src, size_t n) {
  return run(crc, static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
}

uint32_t crc_pool::extend(uint32_t crc, const void* src, size_t n) {
  return run(crc, nullptr, static_cast<const uint8_t*>(src), n);
}

}  // namespace hart::weight_sync
