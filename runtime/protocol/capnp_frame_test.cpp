// The frame reader and writer every wire shares: the caller's limits and name,
// alignment, trailing bytes, and exceptions turned into statuses.
#include "runtime/protocol/capnp_frame.h"

#include "runtime/core/status_testing.h"
#include "runtime/protocol/codec_test.capnp.h"

#include <gtest/gtest.h>
#include <kj/exception.h>

#include <cstring>
#include <new>

namespace hart::protocol {
namespace {

constexpr capnp_frame_limits test_limits{"test frame", 4096, 1 << 20, 16};

// A chain of `depth` Nest structs, written through capnp_frame_write.
std::vector<uint8_t> chain(int depth) {
  auto f = capnp_frame_write("test encode", 64, [&](capnp::MessageBuilder& mb) {
    auto n = mb.initRoot<wire_test::Nest>();
    for (int i = 0; i < depth; ++i) n = n.initChild();
    return status{};
  });
  EXPECT_TRUE(f.ok()) << f.get_status().to_string();
  return f.ok() ? *f : std::vector<uint8_t>{};
}

// The depth of the chain in a frame, read under `limits`.
status_or<int> depth_of(const void* data, size_t size, const capnp_frame_limits& limits = test_limits) {
  return capnp_frame_decode<wire_test::Nest>(data, size, limits,
                                             [](wire_test::Nest::Reader n) -> status_or<int> {
                                               int depth = 0;
                                               for (; n.hasChild(); n = n.getChild()) ++depth;
                                               return depth;
                                             });
}

TEST(capnp_frame, a_written_frame_reads_back_aligned_or_not) {
  const std::vector<uint8_t> f = chain(5);
  ASSERT_EQ(f.size() % 8, 0u);
  auto d = depth_of(f.data(), f.size());
  ASSERT_TRUE(d.ok()) << d.get_status().to_string();
  EXPECT_EQ(*d, 5);
  std::vector<uint8_t> buf(f.size() + 5);
  std::memcpy(buf.data() + 5, f.data(), f.size());
  d = depth_of(buf.data() + 5, f.size());
  ASSERT_TRUE(d.ok()) << d.get_status().to_string();
  EXPECT_EQ(*d, 5);
}

TEST(capnp_frame, the_callers_limits_and_name_bound_the_frame) {
  const std::vector<uint8_t> f = chain(5);
  EXPECT_STATUS(depth_of(nullptr, 0), status_code::invalid_argument, "test frame: empty frame");
  EXPECT_STATUS(depth_of(f.data(), f.size() - 1), status_code::invalid_argument,
                "test frame: " + std::to_string(f.size() - 1) + " bytes is not a multiple of 8");
  capnp_frame_limits small = test_limits;
  small.max_bytes = f.size() - 8;
  EXPECT_STATUS(depth_of(f.data(), f.size(), small), status_code::invalid_argument,
                "test frame: " + std::to_string(f.size()) + " bytes, limit " + std::to_string(f.size() - 8));
  std::vector<uint8_t> trailing = f;
  trailing.resize(f.size() + 24);
  EXPECT_STATUS(depth_of(trailing.data(), trailing.size()), status_code::invalid_argument,
                "test frame: 24 trailing bytes after the message");
  EXPECT_STATUS(depth_of(f.data(), f.size() - 8), status_code::invalid_argument,
                "test frame: malformed Cap'n Proto message");

  // Nesting: 20 deep reads under a limit of 32, not under 8.
  const std::vector<uint8_t> deep = chain(20);
  capnp_frame_limits shallow = test_limits;
  shallow.nesting_limit = 8;
  EXPECT_STATUS(depth_of(deep.data(), deep.size(), shallow), status_code::invalid_argument,
                "too deeply-nested");
  capnp_frame_limits nested = test_limits;
  nested.nesting_limit = 32;
  EXPECT_TRUE(depth_of(deep.data(), deep.size(), nested).ok());
}

TEST(capnp_frame, exceptions_in_the_callbacks_become_statuses) {
  const std::vector<uint8_t> f = chain(1);
  auto read_throwing = [&](auto thrower) {
    return capnp_frame_read(f.data(), f.size(), test_limits, [&](capnp::MessageReader&) -> status {
      thrower();
      return {};
    });
  };
  EXPECT_STATUS(read_throwing([] { KJ_FAIL_REQUIRE("a bad pointer"); }), status_code::invalid_argument,
                "test frame: malformed Cap'n Proto message");
  EXPECT_STATUS(read_throwing([] { throw std::bad_alloc(); }), status_code::resource_exhausted,
                "test frame: out of memory while decoding");
  EXPECT_STATUS(capnp_frame_read(f.data(), f.size(), test_limits,
                                 [](capnp::MessageReader&) { return not_found("the reader's own"); }),
                status_code::not_found, "the reader's own");

  auto write_throwing = [](auto thrower) {
    return capnp_frame_write("test encode", 64, [&](capnp::MessageBuilder&) -> status {
      thrower();
      return {};
    });
  };
  EXPECT_STATUS(write_throwing([] { KJ_FAIL_REQUIRE("a list too long"); }), status_code::invalid_argument,
                "test encode: ");
  EXPECT_STATUS(write_throwing([] { throw std::bad_alloc(); }), status_code::resource_exhausted,
                "test encode: out of memory");
  EXPECT_STATUS(
      capnp_frame_write("test encode", 64, [](capnp::MessageBuilder&) { return invalid_argument("no"); }),
      status_code::invalid_argument, "no");
}

}  // namespace
}  // namespace hart::protocol
