#include "runtime/weight_sync/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace hart::weight_sync {
namespace {

TEST(crc32c, matches_the_standard_check_value) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c_extend(0, s.data(), s.size()), 0xE3069283u);  // RFC 3720 / iSCSI check value
  EXPECT_EQ(crc32c_extend(0, nullptr, 0), 0u);
}

TEST(crc32c, extending_piece_by_piece_equals_the_whole) {
  std::vector<uint8_t> b(10007);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 131 + 7);
  const uint32_t whole = crc32c_extend(0, b.data(), b.size());
  for (size_t cut : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(4093), b.size()}) {
    EXPECT_EQ(crc32c_extend(crc32c_extend(0, b.data(), cut), b.data() + cut, b.size() - cut), whole) << cut;
  }
  b[5000] ^= 1;
  EXPECT_NE(crc32c_extend(0, b.data(), b.size()), whole);
}

// Bit-at-a-time CRC-32C: the definition, independent of the tables and instructions.
uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

// Lengths around the interleaved blocks (3 x 8192 and 3 x 256 bytes) and the
// 8-byte tail, at odd start addresses.
TEST(crc32c, interleaved_chains_equal_the_definition_at_every_block_boundary) {
  std::vector<uint8_t> b(3 * 3 * 8192 + 3 * 256 + 64);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& v : b) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = uint8_t(x);
  }
  for (size_t start : {size_t(0), size_t(1), size_t(5)}) {
    for (size_t n :
         {size_t(0), size_t(7), size_t(767), size_t(768), size_t(769), size_t(24575), size_t(24576),
          size_t(24577), size_t(24576 + 768 + 9), size_t(2 * 24576 + 3 * 256), b.size() - start}) {
      ASSERT_EQ(crc32c_extend(0, b.data() + start, n), crc32c_bitwise(b.data() + start, n))
          << start << " " << n;
      std::vector<uint8_t> copy(n + 2, 0xA5);
      ASSERT_EQ(crc32c_copy(0, copy.data() + 1, b.data() + start, n), crc32c_bitwise(b.data() + start, n))
          << "copy " << n;
      EXPECT_EQ(std::memcmp(copy.data() + 1, b.data() + start, n), 0) << "copy " << n;
      EXPECT_EQ(copy[0], 0xA5);
      EXPECT_EQ(copy[n + 1], 0xA5) << "nothing written past the end";
    }
  }
}

// Pieces checksummed from zero and combined give the whole's value, for
// empty, short and long second pieces (the length's bits all exercised).
TEST(crc32c, combining_pieces_equals_the_whole) {
  std::vector<uint8_t> b(300000);
  uint64_t x = 0x2545F4914F6CDD1Dull;
  for (auto& v : b) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = uint8_t(x);
  }
  const uint32_t whole = crc32c_extend(0, b.data(), b.size());
  for (size_t cut : {size_t(0), size_t(1), size_t(3), size_t(4096), size_t(131071), b.size() - 1, b.size()}) {
    const uint32_t a = crc32c_extend(0, b.data(), cut), c = crc32c_extend(0, b.data() + cut, b.size() - cut);
    EXPECT_EQ(crc32c_combine(a, c, b.size() - cut), whole) << cut;
  }
  // Three pieces, combined left to right.
  const uint32_t p0 = crc32c_extend(0, b.data(), 1000), p1 = crc32c_extend(0, b.data() + 1000, 77777),
                 p2 = crc32c_extend(0, b.data() + 78777, b.size() - 78777);
  EXPECT_EQ(crc32c_combine(crc32c_combine(p0, p1, 77777), p2, b.size() - 78777), whole);
}

}  // namespace
}  // namespace hart::weight_sync
