// File: runtime/weight_sync/crc32c.h
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, init and final xor
// 0xFFFFFFFF): the weight-sync checksum, the same value Python's `crc32c` and
// `google-crc32c` packages give. SSE4.2 instructions where the CPU has them.
//
//   uint32_t c = crc32c_extend(0, a, n_a);
//   c = crc32c_extend(c, b, n_b);          // == crc32c of a followed by b
//   c = crc32c_copy(c, dst, src, n);       // memcpy(dst, src, n) + crc32c_extend(c, src, n), one read of src
//   crc32c_combine(crc32c_extend(0, a, n_a), crc32c_extend(0, b, n_b), n_b)  // == crc32c of a followed by b
#pragma once

#include <cstddef>
#include <cstdint>

namespace hart::weight_sync {

/// The CRC-32C of (the bytes `crc` stands for) followed by data[0, n). crc = 0 starts.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
/// Copies src[0, n) to dst (not overlapping) and returns crc32c_extend(crc, src, n).
uint32_t crc32c_copy(uint32_t crc, void* dst, const void* src, size_t n);
/// The CRC-32C of a followed by b from crc_a = crc32c_extend(0, a) and
/// crc_b = crc32c_extend(0, b) (b's length len_b): pieces checksummed apart
/// (on several threads) combine to the whole's value. O(log len_b).
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

}  // namespace hart::weight_sync
