#include "runtime/weight_sync/crc32c.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace hart::weight_sync
