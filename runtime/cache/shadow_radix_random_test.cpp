// Model-based random testing of shadow_radix: random operation sequences with
// check() after every operation and engine_sim verifying that every readable
// position of every live request holds that request's own prefix content.
#include "runtime/cache/cache_test_util.h"
#include "runtime/cache/shadow_radix.h"
#include "runtime/core/status_testing.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

namespace hart::cache {
namespace {

using testing::engine_sim;

constexpr int64_t k_max_len = 1400;  // tokens per sequence

struct random_run {
  explicit random_run(uint64_t seed) : rng(seed) {}

  int64_t uniform(int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  std::vector<int32_t> fresh(int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(uniform(0, 999));
    return t;
  }

  std::mt19937_64 rng;
};

// Prompt = a base prompt's prefix of an edge-ish length + a fresh tail, or a
// multi-turn continuation of an earlier transcript.
std::vector<int32_t> make_prompt(random_run& rr, const std::vector<std::vector<int32_t>>& bases,
                                 const std::vector<std::vector<int32_t>>& transcripts) {
  static const int64_t k_prefix[] = {0, 3, 4, 5, 127, 128, 129, 255, 256, 257, 384, 511, 600, 900};
  std::vector<int32_t> p;
  if (!transcripts.empty() && rr.uniform(0, 3) == 0) {
    p = transcripts[rr.uniform(0, static_cast<int64_t>(transcripts.size()) - 1)];
  } else {
    const auto& b = bases[rr.uniform(0, static_cast<int64_t>(bases.size()) - 1)];
    const int64_t n = k_prefix[rr.uniform(0, 13)];
    p.assign(b.begin(), b.begin() + n);
  }
  const auto tail = rr.fresh(rr.uniform(1, 200));
  p.insert(p.end(), tail.begin(), tail.end());
  if (static_cast<int64_t>(p.size()) > k_max_len) p.resize(k_max_len);
  return p;
}

struct run_stats {
  int64_t n_hits = 0, n_evicted_full = 0, n_tombstoned_swa = 0, n_oom = 0;
};

void run_sequence(uint64_t seed, int n_ops, run_stats* stats) {
  random_run rr(seed);
  cache_config cfg;
  cfg.page_size = rr.uniform(0, 3) == 0 ? 256 : 128;
  const int64_t windows[] = {128, 128, 64, 200, 300};
  cfg.window = windows[rr.uniform(0, 4)];
  cfg.n_full_pages = rr.uniform(3, 24);
  cfg.n_swa_pages = cfg.min_swa_pages() + rr.uniform(0, 10);
  cfg.enable_prefix_cache = rr.uniform(0, 9) != 0;
  SCOPED_TRACE("seed=" + std::to_string(seed) + " P=" + std::to_string(cfg.page_size) +
               " window=" + std::to_string(cfg.window) + " full=" + std::to_string(cfg.n_full_pages) +
               " swa=" + std::to_string(cfg.n_swa_pages));
  shadow_radix c(cfg);
  engine_sim e(c);
  std::vector<std::vector<int32_t>> bases;
  for (int i = 0; i < 3; ++i) bases.push_back(rr.fresh(k_max_len));
  std::vector<std::vector<int32_t>> transcripts;
  std::vector<int64_t> prompt_len;  // by request id

  auto pick = [&]() -> request_id {
    auto it = e.live().begin();
    std::advance(it, rr.uniform(0, static_cast<int64_t>(e.live().size()) - 1));
    return it->first;
  };
  auto admit = [&](const std::vector<int32_t>& prompt) {
    auto r = e.admit(prompt);
    ASSERT_TRUE(r.ok()) << r.get_status().to_string();
    if (static_cast<int64_t>(prompt_len.size()) <= *r) prompt_len.resize(*r + 1);
    prompt_len[*r] = static_cast<int64_t>(prompt.size());
    stats->n_hits += c.pages(*r).n_cached > 0;
  };
  auto out_of_memory = [&](const status& s, request_id r) {
    // Nothing changed: the request can still be aborted or preempted.
    ++stats->n_oom;
    ASSERT_STATUS(s, status_code::resource_exhausted, "out of KV memory");
    const status chk = c.check();
    ASSERT_TRUE(chk.ok()) << chk.to_string();
    ASSERT_TRUE(e.abort(r).ok());
  };

  for (int op = 0; op < n_ops; ++op) {
    SCOPED_TRACE("op " + std::to_string(op));
    const int64_t kind = e.live().empty() ? 0 : rr.uniform(0, 11);
    if (kind == 0 || (kind == 1 && e.live().size() < 4)) {
      admit(make_prompt(rr, bases, transcripts));
    } else if (kind <= 4) {  // a prefill chunk, or a decode step when prefilled
      const request_id r = pick();
      const int64_t n = c.pages(r).n_computed;
      int64_t target;
      if (n < prompt_len[r]) {
        target = std::min(prompt_len[r], n + rr.uniform(1, 400));
      } else if (n < k_max_len) {
        e.seq(r).push_back(static_cast<int32_t>(rr.uniform(0, 999)));
        target = n + 1;
      } else {
        continue;
      }
      const status s = e.compute(r, target);
      if (!s.ok()) out_of_memory(s, r);
    } else if (kind == 5) {  // a burst of decode steps
      const request_id r = pick();
      if (c.pages(r).n_computed < prompt_len[r]) continue;
      for (int i = rr.uniform(1, 40); i > 0 && c.pages(r).n_computed < k_max_len; --i) {
        e.seq(r).push_back(static_cast<int32_t>(rr.uniform(0, 999)));
        const status s = e.compute(r, c.pages(r).n_computed + 1);
        if (!s.ok()) {
          out_of_memory(s, r);
          break;
        }
      }
    } else if (kind == 6) {  // finish; keep the transcript for a later turn
      const request_id r = pick();
      const int64_t n = c.pages(r).n_computed;
      if (n > 0) transcripts.emplace_back(e.seq(r).begin(), e.seq(r).begin() + n);
      ASSERT_TRUE(e.finish(r).ok());
    } else if (kind == 7) {
      ASSERT_TRUE(e.abort(pick()).ok());
    } else if (kind == 8) {  // preempt: finish, then re-admit the same tokens
      const request_id r = pick();
      const std::vector<int32_t> all = e.seq(r);
      const int64_t plen = std::max(prompt_len[r], c.pages(r).n_computed);
      ASSERT_TRUE(e.finish(r).ok());
      admit(std::vector<int32_t>(all.begin(), all.begin() + std::max<int64_t>(plen, 1)));
    } else if (kind == 9) {
      c.evict_full(rr.uniform(1, 6));
    } else if (kind == 10) {
      c.evict_swa(rr.uniform(1, 6));
    } else if (rr.uniform(0, 4) == 0) {
      c.flush();
    }
    const status chk = c.check();
    ASSERT_TRUE(chk.ok()) << chk.to_string();
    e.verify_all();
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Everything ends; the flushed cache returns to its baseline.
  while (!e.live().empty()) {
    const request_id r = e.live().begin()->first;
    ASSERT_TRUE((rr.uniform(0, 1) ? e.finish(r) : e.abort(r)).ok());
    const status chk = c.check();
    ASSERT_TRUE(chk.ok()) << chk.to_string();
  }
  stats->n_evicted_full += c.metrics().evicted_full_pages;
  stats->n_tombstoned_swa += c.metrics().tombstoned_swa_pages;
  c.flush();
  const status chk = c.check();
  ASSERT_TRUE(chk.ok()) << chk.to_string();
  const cache_metrics m = c.metrics();
  EXPECT_EQ(m.full_pages_used, 0);
  EXPECT_EQ(m.swa_pages_used, 0);
  EXPECT_EQ(m.tree_full_tokens, 0);
}

TEST(shadow_radix_random, model_based_sequences) {
  const uint64_t base_seed = 20260501;
  const int n_sequences = 3000;
  std::printf("shadow_radix_random: base seed %llu, %d sequences (seed = base + i)\n",
              static_cast<unsigned long long>(base_seed), n_sequences);
  run_stats st;
  for (int i = 0; i < n_sequences; ++i) {
    run_sequence(base_seed + static_cast<uint64_t>(i), 80, &st);
    if (HasFatalFailure() || HasFailure()) return;
  }
  std::printf(
      "shadow_radix_random: %lld cache hits, %lld full pages evicted, %lld SWA pages "
      "tombstoned, %lld out-of-memory reserves\n",
      static_cast<long long>(st.n_hits), static_cast<long long>(st.n_evicted_full),
      static_cast<long long>(st.n_tombstoned_swa), static_cast<long long>(st.n_oom));
  EXPECT_GT(st.n_hits, 1000);
  EXPECT_GT(st.n_evicted_full, 1000);
  EXPECT_GT(st.n_oom, 100);
}

}  // namespace
}  // namespace hart::cache
