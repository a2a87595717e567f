#include "runtime/weight_sync/staging.h"

#include "runtime/core/status_testing.h"
#include "runtime/weight_sync/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>

namespace hart::weight_sync {
namespace {

// Two tensors, the second split in two chunks; one bucket.
struct update {
  std::vector<uint8_t> a = std::vector<uint8_t>(8, 1), b = std::vector<uint8_t>(12, 2);
  uint32_t crc() const { return crc32c_extend(crc32c_extend(0, a.data(), 8), b.data(), 12); }
  void send(update_staging& st, uint64_t v) const {
    ASSERT_TRUE(st.begin_bucket(v, 0).ok());
    ASSERT_TRUE(st.add(v, {"a", dtype::f32, {2}, 0, 8}, a.data()).ok());
    ASSERT_TRUE(st.add(v, {"b", dtype::bf16, {2, 3}, 0, 4}, b.data()).ok());
    ASSERT_TRUE(st.add(v, {"b", dtype::bf16, {2, 3}, 4, 8}, b.data() + 4).ok());
  }
};

TEST(update_staging, a_complete_update_becomes_a_tensor_source) {
  update u;
  update_staging st;
  ASSERT_TRUE(st.begin({5, 2, 20}, 4).ok());
  u.send(st, 5);
  auto src = st.finish({5, u.crc()});
  ASSERT_TRUE(src.ok()) << src.get_status().to_string();
  EXPECT_FALSE(st.active());
  ASSERT_EQ((*src)->tensors().size(), 2u);
  const tensor_entry* b = (*src)->tensors()[1];
  EXPECT_EQ(b->name, "b");
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(b->data, u.b.data(), 12), 0);
}

TEST(update_staging, a_broken_update_is_discarded_with_a_typed_error) {
  update u;
  update_staging st;
  EXPECT_EQ(st.begin({4, 2, 20}, 4).code(), status_code::failed_precondition) << "version must rise";
  EXPECT_FALSE(st.active());

  ASSERT_TRUE(st.begin({5, 2, 20}, 4).ok());
  u.send(st, 5);
  auto bad = st.finish({5, u.crc() ^ 1});
  EXPECT_EQ(bad.get_status().code(), status_code::data_loss);
  EXPECT_FALSE(st.active()) << "staging freed";
  EXPECT_EQ(st.bytes_received(), 0u);

  ASSERT_TRUE(st.begin({5, 2, 20}, 4).ok());
  ASSERT_TRUE(st.begin_bucket(5, 0).ok());
  ASSERT_TRUE(st.add(5, {"a", dtype::f32, {2}, 0, 8}, u.a.data()).ok());
  EXPECT_EQ(st.finish({5, crc32c_extend(0, u.a.data(), 8)}).get_status().code(),
            status_code::invalid_argument)
      << "a missing tensor";

  ASSERT_TRUE(st.begin({5, 2, 20}, 4).ok());
  EXPECT_EQ(st.add(5, {"a", dtype::f32, {2}, 0, 8}, u.a.data()).code(), status_code::failed_precondition)
      << "a chunk outside a bucket";
  ASSERT_TRUE(st.begin_bucket(5, 0).ok());
  ASSERT_TRUE(st.add(5, {"b", dtype::bf16, {2, 3}, 4, 8}, u.b.data() + 4).ok())
      << "chunks may come in any order";
  EXPECT_EQ(st.add(5, {"b", dtype::bf16, {2, 3}, 2, 4}, u.b.data()).code(), status_code::invalid_argument)
      << "overlapping chunks";
  EXPECT_FALSE(st.active());
  EXPECT_EQ(st.add(5, {"a", dtype::f32, {2}, 0, 8}, u.a.data()).code(), status_code::failed_precondition)
      << "chunks of a dropped update";

  ASSERT_TRUE(st.begin({5, 2, 20}, 4).ok());
  ASSERT_TRUE(st.begin_bucket(5, 0).ok());
  ASSERT_TRUE(st.add(5, {"b", dtype::bf16, {2, 3}, 0, 4}, u.b.data()).ok());
  EXPECT_FALSE(st.add(5, {"b", dtype::f16, {2, 3}, 4, 8}, u.b.data()).ok()) << "dtype changed mid-tensor";

  ASSERT_TRUE(st.begin({5, 1, 8}, 4).ok());
  ASSERT_TRUE(st.begin_bucket(5, 0).ok());
  EXPECT_FALSE(st.add(5, {"b", dtype::bf16, {2, 3}, 0, 4}, u.b.data()).ok()) << "bigger than announced";

  ASSERT_TRUE(st.begin({5, 2, 20}, 4).ok());
  ASSERT_TRUE(st.begin_bucket(5, 0).ok());
  EXPECT_EQ(st.begin_bucket(5, 0).code(), status_code::invalid_argument) << "a bucket seq twice";
  EXPECT_FALSE(st.active());

  ASSERT_TRUE(st.begin({5, 2, 20}, 4).ok());
  ASSERT_TRUE(st.begin_bucket(5, 1).ok());
  ASSERT_TRUE(st.add(5, {"a", dtype::f32, {2}, 0, 8}, u.a.data()).ok());
  ASSERT_TRUE(st.add(5, {"b", dtype::bf16, {2, 3}, 0, 12}, u.b.data()).ok());
  EXPECT_EQ(st.finish({5, u.crc()}).get_status().code(), status_code::invalid_argument)
      << "bucket 0 never came";

  ASSERT_TRUE(st.begin({5, 2, 20}, 4).ok());
  u.send(st, 5);
  EXPECT_EQ(st.finish({5, u.crc(), 2}).get_status().code(), status_code::invalid_argument)
      << "end announced a bucket that never came";
}

// Buckets over several connections arrive in any order, a tensor's chunks
// with them: the CRC is each bucket's, combined in seq order.
TEST(update_staging, buckets_and_chunks_in_any_order) {
  update u;
  update_staging st;
  ASSERT_TRUE(st.begin({5, 2, 20}, 4).ok());
  ASSERT_TRUE(st.begin_bucket(5, 2).ok());
  ASSERT_TRUE(st.add(5, {"b", dtype::bf16, {2, 3}, 4, 8}, u.b.data() + 4).ok());
  ASSERT_TRUE(st.begin_bucket(5, 0).ok());
  ASSERT_TRUE(st.add(5, {"a", dtype::f32, {2}, 0, 8}, u.a.data()).ok());
  ASSERT_TRUE(st.begin_bucket(5, 1).ok());
  ASSERT_TRUE(st.add(5, {"b", dtype::bf16, {2, 3}, 0, 4}, u.b.data()).ok());
  EXPECT_EQ(st.buckets_received(), 3u);
  auto src = st.finish({5, u.crc(), 3});  // = the CRC of a, b[0..4), b[4..12) in seq order
  ASSERT_TRUE(src.ok()) << src.get_status().to_string();
  EXPECT_EQ(std::memcmp((*src)->tensors()[1]->data, u.b.data(), 12), 0);
}

TEST(update_staging, a_new_begin_replaces_a_staged_update) {
  update u;
  update_staging st;
  ASSERT_TRUE(st.begin({5, 2, 20}, 0).ok());
  ASSERT_TRUE(st.begin_bucket(5, 0).ok());
  ASSERT_TRUE(st.add(5, {"a", dtype::f32, {2}, 0, 8}, u.a.data()).ok());  // the sender dies here
  ASSERT_TRUE(st.begin({6, 2, 20}, 0).ok());
  EXPECT_EQ(st.version(), 6u);
  EXPECT_EQ(st.bytes_received(), 0u);
  u.send(st, 6);
  EXPECT_TRUE(st.finish({6, u.crc()}).ok());
}

TEST(update_staging, the_next_update_is_received_into_the_kept_buffers_once_the_source_is_dropped) {
  update u;
  update_staging st;
  ASSERT_TRUE(st.begin({5, 2, 20}, 4).ok());
  u.send(st, 5);
  auto first = st.finish({5, u.crc()});
  ASSERT_TRUE(first.ok());
  const uint8_t* a5 = (*first)->tensors()[0]->data;
  EXPECT_EQ(st.staged_bytes(), 20u) << "kept for the next update";

  // The engine still reads update 5: update 6 must not write into its bytes.
  update v;
  v.a.assign(8, 7);
  ASSERT_TRUE(st.begin({6, 2, 20}, 5).ok());
  v.send(st, 6);
  auto second = st.finish({6, v.crc()});
  ASSERT_TRUE(second.ok());
  EXPECT_NE((*second)->tensors()[0]->data, a5);
  EXPECT_EQ(std::memcmp((*first)->tensors()[0]->data, u.a.data(), 8), 0) << "update 5 intact";
  const uint8_t* a6 = (*second)->tensors()[0]->data;
  first->reset();
  second->reset();

  ASSERT_TRUE(st.begin({7, 2, 20}, 6).ok());
  u.send(st, 7);
  auto third = st.finish({7, u.crc()});
  ASSERT_TRUE(third.ok());
  EXPECT_EQ((*third)->tensors()[0]->data, a6) << "same name and size: refilled in place";
  EXPECT_EQ(std::memcmp((*third)->tensors()[0]->data, u.a.data(), 8), 0);

  third->reset();
  ASSERT_TRUE(st.begin({8, 1, 8}, 7).ok());
  ASSERT_TRUE(st.begin_bucket(8, 0).ok());
  ASSERT_TRUE(st.add(8, {"a", dtype::f32, {2}, 0, 8}, u.a.data()).ok());
  ASSERT_TRUE(st.finish({8, crc32c_extend(0, u.a.data(), 8)}).ok());
  EXPECT_EQ(st.staged_bytes(), 8u) << "b's buffer, unused by update 8, is freed";

  st.discard();
  EXPECT_EQ(st.staged_bytes(), 0u) << "discard frees the kept buffers";
  ASSERT_TRUE(st.begin({9, 2, 20}, 8).ok());
  u.send(st, 9);
  EXPECT_EQ(st.finish({9, u.crc() ^ 1}).get_status().code(), status_code::data_loss);
  EXPECT_EQ(st.staged_bytes(), 0u) << "a failed update frees its staging";
}

// A chunk in CUDA memory whose allocation does not open here (a made-up
// handle; or a build without CUDA) discards the update, staging freed.
TEST(update_staging, a_chunk_in_cuda_memory_that_does_not_open_discards_the_update) {
  update_staging st;
  cuda_ipc_reader ipc;
  ASSERT_TRUE(st.begin({5, 1, 8}, 4).ok());
  ASSERT_TRUE(st.begin_bucket(5, 0).ok());
  chunk_desc c{"a", dtype::f32, {2}, 0, 8};
  c.ipc_handle.assign(k_ipc_handle_bytes, 0x5a);
  const status s = st.add_from_cuda(5, c, ipc);
  EXPECT_TRUE(s.code() == status_code::unavailable || s.code() == status_code::unimplemented)
      << s.to_string();
  EXPECT_FALSE(st.active());
  EXPECT_EQ(st.staged_bytes(), 0u);
}

// A chunk by NCCL in an update that opened no group discards the update, staging freed.
TEST(update_staging, a_chunk_by_nccl_without_a_group_discards_the_update) {
  update_staging st;
  ASSERT_TRUE(st.begin({5, 1, 8}, 4).ok());
  ASSERT_TRUE(st.begin_bucket(5, 0).ok());
  chunk_desc c{"a", dtype::f32, {2}, 0, 8};
  c.nccl = true;
  const status s = st.add_by_nccl(5, c, nullptr);
  EXPECT_STATUS(s, status_code::failed_precondition, "opened no NCCL group");
  EXPECT_FALSE(st.active());
  EXPECT_EQ(st.staged_bytes(), 0u);
  // With a group that never formed (not joined): the same, the group's error.
  nccl_group g;
  ASSERT_TRUE(st.begin({6, 1, 8}, 4).ok());
  ASSERT_TRUE(st.begin_bucket(6, 0).ok());
  const status t = st.add_by_nccl(6, c, &g);
  EXPECT_FALSE(t.ok());
  EXPECT_FALSE(st.active());
}

}  // namespace
}  // namespace hart::weight_sync
