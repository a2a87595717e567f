#include "runtime/cache/radix_tree.h"

#include <gtest/gtest.h>

#include <numeric>

namespace hart::cache {
namespace {

constexpr int64_t P = 128;

// A request's page tables for `n_pages` pages, allocated fresh.
struct pages_of {
  pages_of(page_allocator& f, page_allocator& s, int64_t n_pages) : fa(f), sa(s) {
    for (int64_t i = 0; i < n_pages; ++i) {
      full.push_back(f.alloc());
      swa.push_back(s.alloc());
    }
  }
  ~pages_of() {
    for (page_id p : full) fa.unref(p, page_release::transient);
    for (page_id p : swa) {
      if (p != no_page) sa.unref(p, page_release::transient);
    }
  }
  page_allocator& fa;
  page_allocator& sa;
  std::vector<page_id> full, swa;
};

std::vector<int32_t> seq(int64_t n, int32_t first, int64_t diverge_at = -1) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  if (diverge_at >= 0) t[diverge_at] = -7;
  return t;
}

int count_nodes(const radix_tree& t) {
  int n = 0;
  t.for_each([&](const radix_node&) { ++n; });
  return n;
}

TEST(radix_tree, insert_match_and_split_at_page_boundaries) {
  page_allocator f(16), s(16);
  radix_tree t(P, 128, f, s);
  const auto a = seq(3 * P, 0);
  {
    pages_of pa(f, s, 3);
    radix_node* end = t.insert(t.root(), a, pa.full, pa.swa, 3);
    EXPECT_EQ(end->end(P), 3 * P);
    EXPECT_EQ(count_nodes(t), 1);
    EXPECT_EQ(f.refcount(pa.full[0]), 2);  // request + tree
  }
  EXPECT_EQ(f.n_used(), 3);  // the tree keeps its pages
  // b shares a's first page and a half: it diverges inside page 1.
  const auto b = seq(3 * P, 0, P + 5);
  tree_match m = t.match(b, 3 * P);
  EXPECT_EQ(m.n_tokens, P);
  EXPECT_EQ(count_nodes(t), 2);  // split after page 0
  EXPECT_EQ(m.node->n_pages(), 1);
  {
    pages_of pb(f, s, 3);
    radix_node* end = t.insert(m.node, b, pb.full, pb.swa, 3);
    EXPECT_EQ(end->start, P);
    EXPECT_EQ(end->n_pages(), 2);
  }
  EXPECT_EQ(count_nodes(t), 3);
  EXPECT_EQ(t.root()->children.size(), 1u);
  EXPECT_EQ(t.root()->children.begin()->second->children.size(), 2u);
  // Matches are page-granular and bounded by the limit.
  EXPECT_EQ(t.match(a, 3 * P).n_tokens, 3 * P);
  EXPECT_EQ(t.match(a, 3 * P - 1).n_tokens, 2 * P);
  EXPECT_EQ(t.match(seq(P - 1, 0), P - 1).n_tokens, 0);
  EXPECT_EQ(t.match(seq(3 * P, 1), 3 * P).n_tokens, 0);
}

TEST(radix_tree, reinsert_of_existing_pages_keeps_the_trees_copy) {
  page_allocator f(8), s(8);
  radix_tree t(P, 128, f, s);
  const auto a = seq(2 * P, 0);
  pages_of p1(f, s, 2);
  t.insert(t.root(), a, p1.full, p1.swa, 2);
  pages_of p2(f, s, 2);
  radix_node* end = t.insert(t.root(), a, p2.full, p2.swa, 2);
  EXPECT_EQ(end->full, p1.full);
  EXPECT_EQ(f.refcount(p2.full[0]), 1);  // the duplicate stays the request's alone
  EXPECT_EQ(count_nodes(t), 1);
}

TEST(radix_tree, locks_pin_path_and_window_and_split_at_the_window_start) {
  page_allocator f(16), s(16);
  radix_tree t(P, 128, f, s);
  const auto a = seq(6 * P, 0);
  radix_node* end;
  {
    pages_of pa(f, s, 6);
    end = t.insert(t.root(), a, pa.full, pa.swa, 6);
  }
  // Window lock covers [6P - 128 - P, 6P) -> pages 4 and 5.
  const int64_t start = t.window_lock_start(6 * P);
  EXPECT_EQ(start, 4 * P);
  t.lock(end, start);
  EXPECT_EQ(count_nodes(t), 2);
  EXPECT_EQ(end->start, 4 * P);
  EXPECT_EQ(end->swa_lock_ref, 1);
  EXPECT_EQ(end->parent->full_lock_ref, 1);
  EXPECT_EQ(end->parent->swa_lock_ref, 0);
  EXPECT_EQ(t.n_evictable_full(), 0);
  EXPECT_EQ(t.n_evictable_swa(), 4);
  // SWA eviction tombstones the oldest pages of the locked path's inner part.
  EXPECT_EQ(t.evict_swa(1), 1);
  EXPECT_EQ(t.evict_full(10), 0);
  t.unlock(end, start);
  EXPECT_EQ(end->full_lock_ref, 0);
  // Everything unlocked: full eviction empties the tree.
  EXPECT_EQ(t.evict_full(100), 6);
  EXPECT_EQ(count_nodes(t), 0);
  EXPECT_EQ(f.n_used(), 0);
  EXPECT_EQ(s.n_used(), 0);
}

TEST(radix_tree, full_eviction_is_lru_over_leaves_and_exact) {
  page_allocator f(16), s(16);
  radix_tree t(P, 128, f, s);
  const auto a = seq(3 * P, 0), b = seq(3 * P, 1000);
  {
    pages_of pa(f, s, 3);
    t.insert(t.root(), a, pa.full, pa.swa, 3);
  }
  {
    pages_of pb(f, s, 3);
    t.insert(t.root(), b, pb.full, pb.swa, 3);
  }
  t.match(a, 3 * P);              // a is now the most recent
  EXPECT_EQ(t.evict_full(2), 2);  // b's last two pages
  EXPECT_EQ(t.match(b, 3 * P).n_tokens, P);
  EXPECT_EQ(t.match(a, 3 * P).n_tokens, 3 * P);
}

TEST(radix_tree, deleting_a_leaf_removes_its_tombstoned_ancestors) {
  page_allocator f(16), s(16);
  radix_tree t(P, 128, f, s);
  const auto a = seq(4 * P, 0), b = seq(4 * P, 0, 2 * P);
  {
    pages_of pa(f, s, 4);
    t.insert(t.root(), a, pa.full, pa.swa, 4);
    pages_of pb(f, s, 4);
    t.insert(t.root(), b, pb.full, pb.swa, 4);
  }
  ASSERT_EQ(count_nodes(t), 3);  // [0,2P) -> {a tail, b tail}
  // Tombstone everything: inner node tombstoned, leaves deleted, and the
  // inner node goes with its last child.
  EXPECT_EQ(t.evict_swa(100), 6);  // 2 inner + 2 + 2 leaf pages
  EXPECT_EQ(count_nodes(t), 0);
  EXPECT_EQ(f.n_used(), 0);
}

TEST(radix_tree, match_refuses_a_boundary_after_a_tombstoned_window) {
  page_allocator f(16), s(16);
  radix_tree t(P, 128, f, s);
  const auto a = seq(5 * P, 0);
  {
    pages_of pa(f, s, 5);
    for (int j = 0; j < 4; ++j) {  // pages 0-3 left the window before insertion...
      s.unref(pa.swa[j], page_release::transient);
      pa.swa[j] = no_page;
    }
    t.insert(t.root(), a, pa.full, pa.swa, 5);
  }
  // ...so boundaries 1..4 have no live window; 5P has page 4 live (128 >= window).
  EXPECT_EQ(t.match(a, 4 * P).n_tokens, 0);
  EXPECT_EQ(t.match(a, 5 * P).n_tokens, 5 * P);
}

}  // namespace
}  // namespace hart::cache
