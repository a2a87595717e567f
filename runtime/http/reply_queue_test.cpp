#include "runtime/http/reply_queue.h"

#include <gtest/gtest.h>

#include <thread>

namespace hart::http {
namespace {

using namespace std::chrono_literals;

TEST(reply_queue, chunks_past_capacity_overflow_and_finals_keep_headroom) {
  reply_queue q(/*chunk_capacity=*/2, /*headroom=*/1);
  EXPECT_TRUE(q.push(protocol::chunk_event{}));
  EXPECT_TRUE(q.push(protocol::chunk_event{}));
  EXPECT_FALSE(q.overflowed());
  EXPECT_FALSE(q.push(protocol::chunk_event{}));  // dropped: the stream is now incomplete
  EXPECT_TRUE(q.overflowed());
  EXPECT_TRUE(q.push(protocol::final_event{}));  // the end still arrives
  EXPECT_FALSE(q.push(protocol::final_event{}));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(q.pop(0ms).has_value());
  EXPECT_FALSE(q.pop(0ms).has_value());
}

TEST(reply_queue, pop_waits_for_a_push_from_another_thread_in_order) {
  reply_queue q;
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    protocol::chunk_event c;
    c.seq = 1;
    q.push(c);
    c.seq = 2;
    q.push(c);
  });
  auto a = q.pop(5s), b = q.pop(5s);
  t.join();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(std::get<protocol::chunk_event>(*a).seq, 1u);
  EXPECT_EQ(std::get<protocol::chunk_event>(*b).seq, 2u);
  EXPECT_FALSE(q.pop(1ms).has_value());
}

}  // namespace
}  // namespace hart::http
