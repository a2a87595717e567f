// What nccl_group answers where it cannot form a group (CI: no GPU, with or
// without NCCL in the build): typed errors, never a wait. A group that forms is
// checked on two GPUs (tests/serve/serve_device_test.cpp).
#include "runtime/weight_sync/nccl_group.h"

#include "runtime/core/status_testing.h"
#include "runtime/weight_sync/sync_messages.h"

#include <gtest/gtest.h>

namespace hart::weight_sync {
namespace {

using namespace std::chrono_literals;

TEST(nccl_group, without_nccl_or_a_device_join_is_refused_with_a_typed_error) {
  const status can = nccl_group::usable(0);
  if (can.ok()) GTEST_SKIP() << "NCCL and a CUDA device are here: a join would start forming a group";
  EXPECT_TRUE(can.code() == status_code::unimplemented || can.code() == status_code::unavailable)
      << can.to_string();
  nccl_group g;
  const status s = g.join(std::vector<uint8_t>(k_nccl_id_bytes, 0x5a), 1, 2, 0, 100ms);
  EXPECT_EQ(s.code(), can.code()) << s.to_string();
  EXPECT_FALSE(g.joined(std::vector<uint8_t>(k_nccl_id_bytes, 0x5a), 0));
  EXPECT_FALSE(nccl_group::device_of(&s).ok()) << "host memory";
}

TEST(nccl_group, a_malformed_id_is_invalid_argument_where_nccl_is_built) {
  nccl_group g;
  const status s = g.join(std::vector<uint8_t>(12, 1), 1, 2, 0, 100ms);
  if (s.code() == status_code::unimplemented) GTEST_SKIP() << "no NCCL in this build: " << s.to_string();
  EXPECT_STATUS(s, status_code::invalid_argument, "12 bytes");
}

TEST(nccl_group, a_group_not_joined_neither_receives_nor_broadcasts) {
  nccl_group g;
  char byte = 0;
  for (const status& s : {g.receive(&byte, 1), g.broadcast(&byte, 1), g.drain()}) {
    EXPECT_TRUE(s.code() == status_code::failed_precondition || s.code() == status_code::unimplemented)
        << s.to_string();
  }
}

}  // namespace
}  // namespace hart::weight_sync
