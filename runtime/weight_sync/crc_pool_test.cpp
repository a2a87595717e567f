// crc_pool against the one-thread functions: the same CRC and the same copied
// bytes for sizes below, at and above the piece threshold (1 MiB per piece),
// odd sizes and start addresses, with 1, 2, 3 and 5 threads, over many calls
// on one pool (its workers are reused).
#include "runtime/weight_sync/crc_pool.h"

#include "runtime/weight_sync/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace hart::weight_sync {
namespace {

TEST(crc_pool, equals_one_thread_for_every_split) {
  std::vector<uint8_t> src((size_t(5) << 20) + 4099);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& v : src) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = uint8_t(x);
  }
  for (const int threads : {1, 2, 3, 5}) {
    crc_pool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (const size_t start : {size_t(0), size_t(3)}) {
      for (const size_t n : {size_t(0), size_t(100), size_t(1) << 20, (size_t(2) << 20) - 1, size_t(2) << 20,
                             (size_t(3) << 20) + 17, src.size() - start}) {
        SCOPED_TRACE(std::to_string(threads) + " threads, start " + std::to_string(start) + ", " +
                     std::to_string(n) + " bytes");
        const uint32_t seed = 0x1234567u;
        ASSERT_EQ(pool.extend(seed, src.data() + start, n), crc32c_extend(seed, src.data() + start, n));
        std::vector<uint8_t> dst(n + 2, 0x5A);
        ASSERT_EQ(pool.copy(seed, dst.data() + 1, src.data() + start, n),
                  crc32c_extend(seed, src.data() + start, n));
        EXPECT_EQ(std::memcmp(dst.data() + 1, src.data() + start, n), 0);
        EXPECT_EQ(dst[0], 0x5A);
        EXPECT_EQ(dst[n + 1], 0x5A) << "nothing written past the end";
      }
    }
  }
}

}  // namespace
}  // namespace hart::weight_sync
