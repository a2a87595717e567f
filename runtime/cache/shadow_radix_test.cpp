#include "runtime/cache/shadow_radix.h"

#include "runtime/cache/cache_test_util.h"
#include "runtime/core/status_testing.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>

namespace hart::cache {
namespace {

using testing::engine_sim;

std::vector<int32_t> tokens(int64_t n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}
std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
std::vector<int32_t> head(const std::vector<int32_t>& a, int64_t n) {
  return std::vector<int32_t>(a.begin(), a.begin() + n);
}

#define EXPECT_CHECK_OK(c)                  \
  do {                                      \
    const status s_ = (c).check();          \
    EXPECT_TRUE(s_.ok()) << s_.to_string(); \
  } while (0)

cache_config config(int64_t page_size, int64_t n_full, int64_t n_swa, int64_t window = 128) {
  cache_config c;
  c.page_size = page_size;
  c.n_full_pages = n_full;
  c.n_swa_pages = n_swa;
  c.window = window;
  return c;
}

// Runs a whole request (prefill in one chunk) and finishes it.
void run_and_finish(engine_sim& e, const std::vector<int32_t>& prompt) {
  auto r = e.admit(prompt);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(e.compute(*r, static_cast<int64_t>(prompt.size())).ok());
  e.verify(*r);
  ASSERT_TRUE(e.finish(*r).ok());
}

TEST(shadow_radix, config_validation_names_the_problem) {
  EXPECT_TRUE(config(256, 4, 3).validate().ok());
  EXPECT_EQ(config(200, 4, 3).validate().code(), status_code::invalid_argument);
  EXPECT_EQ(config(256, 0, 3).validate().code(), status_code::invalid_argument);
  const status s = config(256, 4, 1).validate();
  EXPECT_STATUS(s, status_code::invalid_argument, "n_swa_pages=1 < 3");
  EXPECT_EQ(config(128, 4, 4, 200).min_swa_pages(), 4);
}

// Prefixes ending at the edge lengths: what a second request reuses.
TEST(shadow_radix, edge_prefix_lengths) {
  const int64_t lens[] = {3, 4, 5, 127, 128, 129, 255, 256, 257};
  for (int64_t P : {128, 256}) {
    for (int64_t L : lens) {
      SCOPED_TRACE("P=" + std::to_string(P) + " L=" + std::to_string(L));
      shadow_radix c(config(P, 16, 8));
      engine_sim e(c);
      const auto base = tokens(600, 0);
      run_and_finish(e, base);
      // A different continuation after L shared tokens.
      auto r = e.admit(concat(head(base, L), tokens(50, 100000)));
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(c.pages(*r).n_cached, L / P * P);
      e.verify(*r);
      EXPECT_CHECK_OK(c);
      ASSERT_TRUE(e.abort(*r).ok());
      // Exactly the shared prefix as the prompt: the last token is recomputed.
      r = e.admit(head(base, L));
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(c.pages(*r).n_cached, (L - 1) / P * P);
      ASSERT_TRUE(e.compute(*r, L).ok());
      e.verify(*r);
      ASSERT_TRUE(e.finish(*r).ok());
      EXPECT_CHECK_OK(c);
    }
  }
}

// A running request path-locks its whole chain but window-locks only its
// last pages, so SWA eviction tombstones the inner pages [0, 512).
TEST(shadow_radix, hit_after_a_tombstoned_window_is_refused) {
  shadow_radix c(config(128, 16, 12));
  engine_sim e(c);
  const auto base = tokens(1000, 0);
  auto a = e.admit(base);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(e.compute(*a, 1000).ok());
  EXPECT_EQ(c.metrics().tree_swa_tokens, 7 * 128);
  EXPECT_EQ(c.evict_swa(4), 4);  // oldest pages of the unlocked part: 0-3
  EXPECT_EQ(c.metrics().tree_swa_tokens, 3 * 128);
  EXPECT_CHECK_OK(c);
  // A hit at 512 would need live SWA for [384, 512): refused entirely.
  auto r = e.admit(concat(head(base, 600), tokens(10, 5000)));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(c.pages(*r).n_cached, 0);
  ASSERT_TRUE(e.abort(*r).ok());
  // Page 4 is live, so a hit at 640 is fine.
  r = e.admit(concat(head(base, 700), tokens(10, 5000)));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(c.pages(*r).n_cached, 640);
  EXPECT_EQ(c.pages(*r).swa[3], no_page);
  e.verify(*r);
  EXPECT_CHECK_OK(c);
  ASSERT_TRUE(e.abort(*r).ok());
  ASSERT_TRUE(e.abort(*a).ok());
  EXPECT_CHECK_OK(c);
}

TEST(shadow_radix, window_larger_than_a_page_needs_two_live_pages) {
  shadow_radix c(config(128, 16, 12, 200));
  engine_sim e(c);
  const auto base = tokens(1000, 0);
  auto a = e.admit(base);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(e.compute(*a, 1000).ok());
  EXPECT_EQ(c.evict_swa(4), 4);
  auto r = e.admit(concat(head(base, 700), tokens(10, 5000)));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(c.pages(*r).n_cached, 0);  // only 128 live tokens before 640
  ASSERT_TRUE(e.abort(*r).ok());
  r = e.admit(concat(head(base, 800), tokens(10, 5000)));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(c.pages(*r).n_cached, 768);
  e.verify(*r);
  ASSERT_TRUE(e.abort(*r).ok());
  ASSERT_TRUE(e.abort(*a).ok());
  EXPECT_CHECK_OK(c);
}

TEST(shadow_radix, capacity_of_one_page) {
  shadow_radix c(config(256, 1, 3));
  engine_sim e(c);
  auto r = e.admit(tokens(300, 0));
  ASSERT_TRUE(r.ok());
  const status s = c.reserve(*r, 300);
  EXPECT_STATUS(s, status_code::resource_exhausted, "out of KV memory");
  EXPECT_CHECK_OK(c);
  ASSERT_TRUE(e.abort(*r).ok());
  // What fits works, repeatedly (the cached page is evicted for the next one).
  for (int i = 0; i < 3; ++i) {
    run_and_finish(e, tokens(256, 1000 * i));
    EXPECT_CHECK_OK(c);
  }
  EXPECT_EQ(c.metrics().full_pages_used, 1);
  c.flush();
  EXPECT_EQ(c.metrics().full_pages_used, 0);
}

TEST(shadow_radix, exhaustion_changes_nothing_and_a_smaller_request_still_works) {
  shadow_radix c(config(128, 4, 6));
  engine_sim e(c);
  auto a = e.admit(tokens(300, 0));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(e.compute(*a, 300).ok());  // 3 pages, 2 in the tree (locked)
  auto b = e.admit(tokens(300, 5000));
  ASSERT_TRUE(b.ok());
  const request_pages before = c.pages(*b);
  const cache_metrics m0 = c.metrics();
  EXPECT_EQ(c.reserve(*b, 300).code(), status_code::resource_exhausted);
  EXPECT_EQ(c.pages(*b).full, before.full);
  EXPECT_EQ(c.pages(*b).n_reserved, before.n_reserved);
  EXPECT_EQ(c.metrics().full_pages_used, m0.full_pages_used);
  EXPECT_EQ(c.metrics().tree_full_tokens, m0.tree_full_tokens);
  EXPECT_CHECK_OK(c);
  ASSERT_TRUE(e.compute(*b, 100).ok());  // one page fits
  e.verify(*a);
  e.verify(*b);
  ASSERT_TRUE(e.finish(*a).ok());
  // a's cached pages are evictable now: b grows by evicting them.
  ASSERT_TRUE(e.compute(*b, 300).ok());
  EXPECT_GT(c.metrics().evicted_full_pages, 0);
  e.verify(*b);
  ASSERT_TRUE(e.finish(*b).ok());
  EXPECT_CHECK_OK(c);
}

TEST(shadow_radix, chunked_prefill_inserts_as_it_goes) {
  shadow_radix c(config(256, 16, 8));
  engine_sim e(c);
  const auto base = tokens(1000, 0);
  auto a = e.admit(base);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(e.compute(*a, 600).ok());
  EXPECT_EQ(c.metrics().tree_full_tokens, 512);
  auto b = e.admit(concat(head(base, 700), tokens(5, 9000)));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(c.pages(*b).n_cached, 512);
  EXPECT_EQ(c.pages(*b).full[1], c.pages(*a).full[1]);
  EXPECT_CHECK_OK(c);
  ASSERT_TRUE(e.compute(*a, 1000).ok());
  ASSERT_TRUE(e.compute(*b, 705).ok());
  e.verify(*a);
  e.verify(*b);
  EXPECT_CHECK_OK(c);
  ASSERT_TRUE(e.finish(*a).ok());
  ASSERT_TRUE(e.finish(*b).ok());
  EXPECT_CHECK_OK(c);
  const cache_metrics m = c.metrics();
  EXPECT_EQ(m.cached_tokens, 512);
  EXPECT_EQ(m.prompt_tokens, 1705);
  EXPECT_NEAR(m.hit_rate(), 512.0 / 1705.0, 1e-12);
}

// Two requests computing the same prompt side by side: the second one's
// pages are duplicates; the tree keeps the first copy and the second request
// keeps reading its own pages, freed when it ends.
TEST(shadow_radix, concurrent_duplicate_prefill) {
  shadow_radix c(config(128, 16, 12));
  engine_sim e(c);
  const auto base = tokens(400, 0);
  auto a = e.admit(base), b = e.admit(base);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(e.compute(*a, 400).ok());
  ASSERT_TRUE(e.compute(*b, 400).ok());
  EXPECT_NE(c.pages(*a).full[0], c.pages(*b).full[0]);
  EXPECT_EQ(c.metrics().tree_full_tokens, 384);
  EXPECT_CHECK_OK(c);
  ASSERT_TRUE(e.finish(*b).ok());
  EXPECT_CHECK_OK(c);
  ASSERT_TRUE(e.finish(*a).ok());
  EXPECT_EQ(c.metrics().full_pages_used, 3);
  c.flush();
  EXPECT_EQ(c.metrics().full_pages_used, 0);
  EXPECT_EQ(c.metrics().swa_pages_used, 0);
  EXPECT_CHECK_OK(c);
}

// Decode past several windows under SWA pressure, then continue the
// conversation: the node inserted last keeps its window (the margin page).
TEST(shadow_radix, multi_turn_continuation_after_long_decode) {
  shadow_radix c(config(256, 16, 6));
  engine_sim e(c);
  auto a = e.admit(tokens(300, 0));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(e.compute(*a, 300).ok());
  for (int64_t n = 301; n <= 1100; ++n) {
    e.seq(*a).push_back(static_cast<int32_t>(7 * n));
    ASSERT_TRUE(e.compute(*a, n).ok());
    if (n % 100 == 0) {
      c.evict_swa(100);  // everything outside a's window lock
      EXPECT_CHECK_OK(c);
      e.verify(*a);
    }
  }
  // Held SWA pages: window + margin + current page at most.
  int live = 0;
  for (page_id p : c.pages(*a).swa) live += p != no_page;
  EXPECT_LE(live, c.config().min_swa_pages());
  auto transcript = e.seq(*a);
  ASSERT_TRUE(e.finish(*a).ok());
  auto b = e.admit(concat(transcript, tokens(20, 50000)));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(c.pages(*b).n_cached, 1024);
  e.verify(*b);
  EXPECT_CHECK_OK(c);
  ASSERT_TRUE(e.abort(*b).ok());
}

TEST(shadow_radix, preempt_then_readmit_reuses_its_own_pages) {
  shadow_radix c(config(128, 16, 12));
  engine_sim e(c);
  const auto base = tokens(700, 0);
  auto a = e.admit(base);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(e.compute(*a, 450).ok());
  ASSERT_TRUE(e.finish(*a).ok());  // preempted mid-prefill
  auto a2 = e.admit(base);
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(c.pages(*a2).n_cached, 384);
  ASSERT_TRUE(e.compute(*a2, 700).ok());
  e.verify(*a2);
  ASSERT_TRUE(e.finish(*a2).ok());
  EXPECT_CHECK_OK(c);
}

TEST(shadow_radix, disabled_prefix_cache_shares_nothing) {
  cache_config cfg = config(128, 8, 8);
  cfg.enable_prefix_cache = false;
  shadow_radix c(cfg);
  engine_sim e(c);
  run_and_finish(e, tokens(400, 0));
  EXPECT_EQ(c.metrics().full_pages_used, 0);
  auto r = e.admit(tokens(400, 0));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(c.pages(*r).n_cached, 0);
  ASSERT_TRUE(e.compute(*r, 400).ok());
  EXPECT_CHECK_OK(c);
  ASSERT_TRUE(e.finish(*r).ok());
}

TEST(shadow_radix, user_errors_are_statuses) {
  shadow_radix c(config(128, 8, 8));
  EXPECT_EQ(c.admit({}).get_status().code(), status_code::invalid_argument);
  EXPECT_EQ(c.reserve(42, 10).code(), status_code::not_found);
  EXPECT_EQ(c.abort(42).code(), status_code::not_found);
  auto r = c.admit(tokens(10, 0));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(c.advance(*r, tokens(10, 0)).code(), status_code::failed_precondition);
  ASSERT_TRUE(c.reserve(*r, 10).ok());
  EXPECT_EQ(c.advance(*r, tokens(10, 1)).code(), status_code::invalid_argument);
  ASSERT_TRUE(c.advance(*r, tokens(5, 0)).ok());
  EXPECT_EQ(c.advance(*r, tokens(4, 0)).code(), status_code::invalid_argument);
  ASSERT_TRUE(c.abort(*r).ok());
  EXPECT_CHECK_OK(c);
}

}  // namespace
}  // namespace hart::cache

namespace hart::cache {
namespace {

// docs/shadowradix.md section 8, step by step.
TEST(shadow_radix, worked_example_from_the_doc) {
  shadow_radix c(config(256, 16, 8));
  engine_sim e(c);
  const auto S = tokens(600, 0);
  auto a = e.admit(concat(S, tokens(100, 10000)));
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(e.compute(*a, 700).ok());
  EXPECT_EQ(c.pages(*a).swa[0], no_page);
  EXPECT_EQ(c.metrics().tree_swa_tokens, 512);
  auto b = e.admit(concat(S, tokens(50, 20000)));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(c.pages(*b).n_cached, 512);
  EXPECT_NE(c.pages(*b).swa[0], no_page);
  ASSERT_TRUE(e.compute(*b, 650).ok());
  EXPECT_EQ(c.pages(*b).swa[0], no_page);
  for (int64_t n = 701; n <= 800; ++n) {
    e.seq(*a).push_back(static_cast<int32_t>(n));
    ASSERT_TRUE(e.compute(*a, n).ok());
  }
  EXPECT_EQ(c.metrics().tree_full_tokens, 768);
  EXPECT_CHECK_OK(c);
  ASSERT_TRUE(e.finish(*b).ok());
  EXPECT_EQ(c.evict_swa(1), 1);
  EXPECT_EQ(c.metrics().tree_swa_tokens, 512);
  auto cc = e.admit(concat(S, tokens(100, 30000)));
  ASSERT_TRUE(cc.ok());
  EXPECT_EQ(c.pages(*cc).n_cached, 512);
  EXPECT_EQ(c.pages(*cc).swa[0], no_page);
  auto d = e.admit(concat(head(S, 300), tokens(10, 40000)));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(c.pages(*d).n_cached, 0);
  EXPECT_CHECK_OK(c);
  ASSERT_TRUE(e.abort(*cc).ok());
  ASSERT_TRUE(e.abort(*d).ok());
  ASSERT_TRUE(e.finish(*a).ok());
  EXPECT_EQ(c.metrics().full_pages_used, 3);
  EXPECT_EQ(c.metrics().swa_pages_used, 2);
  c.flush();
  EXPECT_EQ(c.metrics().full_pages_used, 0);
  EXPECT_EQ(c.metrics().swa_pages_used, 0);
  EXPECT_CHECK_OK(c);
}

}  // namespace
}  // namespace hart::cache
