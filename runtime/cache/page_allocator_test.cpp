#include "runtime/cache/page_allocator.h"

#include <gtest/gtest.h>

namespace hart::cache {
namespace {

TEST(page_allocator, hands_out_in_order_and_counts) {
  page_allocator a(4);
  EXPECT_EQ(a.capacity(), 4);
  EXPECT_EQ(a.alloc(), 0);
  EXPECT_EQ(a.alloc(), 1);
  EXPECT_EQ(a.n_used(), 2);
  EXPECT_EQ(a.n_free(), 2);
  EXPECT_TRUE(a.check("t").ok());
}

// vLLM PR #43447: transient pages are reused before pages that held cached
// content, so churn never recycles cached bytes first.
TEST(page_allocator, cached_pages_queue_behind_transient_ones) {
  page_allocator a(4);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(a.alloc(), i);
  EXPECT_TRUE(a.unref(0, page_release::cached));
  EXPECT_TRUE(a.unref(1, page_release::transient));
  EXPECT_TRUE(a.unref(2, page_release::cached));
  EXPECT_TRUE(a.unref(3, page_release::transient));
  // Free list: transient 3, transient 1, cached 0, cached 2.
  EXPECT_EQ(a.alloc(), 3);
  EXPECT_EQ(a.alloc(), 1);
  EXPECT_EQ(a.alloc(), 0);
  EXPECT_EQ(a.alloc(), 2);
  EXPECT_EQ(a.alloc(), no_page);
  EXPECT_TRUE(a.check("t").ok());
}

TEST(page_allocator, shared_page_frees_with_its_last_holder) {
  page_allocator a(2);
  const page_id p = a.alloc();
  a.ref(p);
  EXPECT_EQ(a.refcount(p), 2);
  EXPECT_FALSE(a.unref(p, page_release::transient));
  EXPECT_EQ(a.n_free(), 1);
  EXPECT_TRUE(a.unref(p, page_release::transient));
  EXPECT_EQ(a.n_free(), 2);
  EXPECT_EQ(a.free_list().front(), p);
  EXPECT_TRUE(a.check("t").ok());
}

TEST(page_allocator, double_free_aborts) {
  page_allocator a(1);
  const page_id p = a.alloc();
  EXPECT_TRUE(a.unref(p, page_release::transient));
  EXPECT_DEATH(a.unref(p, page_release::transient), "unref of free page");
}

}  // namespace
}  // namespace hart::cache
