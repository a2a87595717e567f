// The engine running on ShadowRadix pages: random request mixes with shared
// prefixes, chunked prefill, decode, finish, abort, preemption and eviction
// under memory pressure. After every operation the cache's invariant checker
// runs, and every request's logits equal, bit for bit, the same tokens run
// alone without a cache (deterministic mode).
#include "runtime/cache/shadow_radix.h"
#include "tests/golden/golden_fixture.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <random>

namespace hart::testing {
namespace {

// A request being served: its tokens so far and the logits it produced per position.
struct live_request {
  cache::request_id id = 0;
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t prompt_len = 0;
  int64_t target_len = 0;  // stop decoding here
  sequence_state seq;
  std::map<int64_t, std::vector<float>> logits;  // position → logits row
};

class cache_engine : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    g_ = golden_load(GetParam(), precision::exact, /*deterministic=*/true);
    const model_config& c = g_->eng->config();
    cfg_.page_size = 128;
    cfg_.window = c.window;
    cfg_.n_full_pages = 40;
    cfg_.n_swa_pages = 14;
    cache_ = std::make_unique<cache::shadow_radix>(cfg_);
    max_len_ = std::min<int64_t>(g_->seq, 560);
    auto store = g_->eng->make_store(cfg_.page_size);
    ASSERT_TRUE(store.ok()) << store.get_status().to_string();
    store_ = std::move(store).value();
    store_->ensure_full_pages(cfg_.n_full_pages);
    store_->ensure_swa_pages(cfg_.n_swa_pages);
  }

  // Logits of the base sequence run alone, whole, without a cache. Every request
  // is a prefix of it, and deterministic mode makes position p's logits depend
  // only on tokens [0, p], so one run is the oracle for all of them.
  const std::vector<float>& oracle() {
    if (oracle_.empty()) {
      sequence_state s = g_->eng->new_sequence();
      EXPECT_TRUE(g_->eng
                      ->prefill(s, {g_->input_ids[0].begin(), g_->input_ids[0].begin() + max_len_},
                                logits_request::all, &oracle_)
                      .ok());
    }
    return oracle_;
  }

  void bind(live_request& r) {
    const cache::request_pages& p = cache_->pages(r.id);
    engine::bind_pages(r.seq, store_.get(), p.full, p.swa, p.n_computed);
  }

  // Computes positions [n_computed, n_computed + n) of r; false if the cache is out of memory.
  bool step(live_request& r, int64_t n) {
    const int64_t from = cache_->pages(r.id).n_computed;
    const int64_t to = std::min<int64_t>(from + n, int64_t(r.tokens.size()));
    if (to <= from) return true;
    status s = cache_->reserve(r.id, to);
    if (!s.ok()) {
      EXPECT_EQ(s.code(), status_code::resource_exhausted) << s.to_string();
      return false;
    }
    bind(r);
    std::vector<float> out;
    status f =
        g_->eng->prefill(r.seq, {r.tokens.begin() + from, r.tokens.begin() + to}, logits_request::all, &out);
    EXPECT_TRUE(f.ok()) << f.to_string();
    for (int64_t p = from; p < to; ++p) {
      r.logits[p].assign(out.begin() + (p - from) * g_->vocab, out.begin() + (p - from + 1) * g_->vocab);
    }
    status a = cache_->advance(r.id, std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + to));
    EXPECT_TRUE(a.ok()) << a.to_string();
    return true;
  }

  // Every logits row r produced equals the oracle's at that position, bitwise.
  void verify(const live_request& r) {
    const std::vector<float>& want = oracle();
    for (const auto& [pos, row] : r.logits) {
      ASSERT_EQ(std::memcmp(row.data(), want.data() + pos * g_->vocab, g_->vocab * sizeof(float)), 0)
          << "position " << pos << " of a " << r.target_len << "-token request (prompt " << r.prompt_len
          << ")";
    }
  }

  void run_random_round(unsigned seed);

  void check_cache(const char* after) {
    status s = cache_->check();
    ASSERT_TRUE(s.ok()) << "after " << after << ": " << s.to_string();
  }

  std::unique_ptr<golden_set> g_;
  cache::cache_config cfg_;
  std::unique_ptr<cache::shadow_radix> cache_;
  std::unique_ptr<kv_store> store_;
  std::vector<float> oracle_;
  int64_t max_len_ = 0;
};

TEST_P(cache_engine, random_request_mixes_match_uncached_runs_bitwise) {
  // tiny-a is fast: several independent rounds; tiny-c (long, many hits): one.
  const int rounds = std::string(GetParam()) == "tiny-a" ? 8 : 1;
  std::random_device rd;
  for (int round = 0; round < rounds && !HasFatalFailure(); ++round) {
    cache_ = std::make_unique<cache::shadow_radix>(cfg_);
    run_random_round(rd());
  }
}

void cache_engine::run_random_round(unsigned seed) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const auto& base = g_->input_ids[0];
  // Requests are prefixes of the golden sequence (so prefixes are shared), continued by
  // teacher-forced "generated" tokens from the same sequence.
  std::vector<live_request> live;
  int64_t finished = 0, hits = 0;
  const int64_t max_len = max_len_;
  for (int op = 0; op < 240 && !HasFatalFailure(); ++op) {
    int kind = std::uniform_int_distribution<int>(0, 19)(rng);
    if (kind <= 3 || live.empty()) {  // admit
      live_request r;
      r.prompt_len = std::uniform_int_distribution<int64_t>(1, max_len - 40)(rng);
      r.target_len = r.prompt_len + std::uniform_int_distribution<int64_t>(0, 30)(rng);
      r.tokens.assign(base.begin(), base.begin() + r.target_len);
      auto id = cache_->admit(std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + r.prompt_len));
      ASSERT_TRUE(id.ok()) << id.get_status().to_string();
      r.id = *id;
      r.seq = g_->eng->new_sequence();
      hits += cache_->pages(r.id).n_cached > 0;
      live.push_back(std::move(r));
      check_cache("admit");
      continue;
    }
    const size_t i = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
    live_request& r = live[i];
    const int64_t done = cache_->pages(r.id).n_computed;
    if (done >= r.target_len && kind <= 15) kind = 16;  // mostly finish what is done
    if (kind <= 15) {                                   // a prefill chunk or a decode step
      const int64_t n = done < r.prompt_len ? std::uniform_int_distribution<int64_t>(1, 160)(rng) : 1;
      if (!step(r, n)) {  // out of KV memory: preempt this request (cache what it computed)
        ASSERT_TRUE(
            cache_->finish(r.id, std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + done)).ok());
        verify(r);
        live.erase(live.begin() + i);
      }
      check_cache("step");
    } else if (kind == 16 && done >= r.target_len) {  // finish
      ASSERT_TRUE(cache_->finish(r.id, r.tokens).ok());
      verify(r);
      ++finished;
      live.erase(live.begin() + i);
      check_cache("finish");
    } else if (kind == 17) {  // abort
      ASSERT_TRUE(cache_->abort(r.id).ok());
      verify(r);
      live.erase(live.begin() + i);
      check_cache("abort");
    } else {  // eviction pressure
      cache_->evict_full(std::uniform_int_distribution<int64_t>(1, 4)(rng));
      cache_->evict_swa(std::uniform_int_distribution<int64_t>(1, 2)(rng));
      check_cache("evict");
    }
  }
  for (live_request& r : live) {
    ASSERT_TRUE(cache_->abort(r.id).ok());
    verify(r);
  }
  live.clear();
  cache_->flush();
  check_cache("flush");
  const cache::cache_metrics m = cache_->metrics();
  EXPECT_EQ(m.full_pages_used, 0);
  EXPECT_EQ(m.swa_pages_used, 0);
  std::printf("%s: %lld finished, %lld prefix hits, hit rate %.2f\n", GetParam(), (long long)finished,
              (long long)hits, m.hit_rate());
}

TEST_P(cache_engine, prefix_edges_then_continuation_match_bitwise) {
  // A first request caches a prefix of each edge length; a second, longer one
  // hits it (page-aligned part only) and continues across the CSA/HCA block and
  // page edges; a third continues the second after it finished (multi-turn).
  const auto& base = g_->input_ids[0];
  for (int64_t len : {3, 4, 5, 127, 128, 129, 255, 256, 257}) {
    if (len + 75 > max_len_) continue;
    SCOPED_TRACE("prefix " + std::to_string(len));
    int64_t expect_hit = -1;
    for (int64_t prompt : {len, len + 40, len + 70}) {
      live_request r;
      r.prompt_len = prompt;
      r.target_len = prompt + 5;
      r.tokens.assign(base.begin(), base.begin() + r.target_len);
      auto id = cache_->admit(std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + prompt));
      ASSERT_TRUE(id.ok()) << id.get_status().to_string();
      r.id = *id;
      r.seq = g_->eng->new_sequence();
      const int64_t hit = cache_->pages(r.id).n_cached;
      if (expect_hit >= 0) {
        EXPECT_EQ(hit, expect_hit) << "prompt " << prompt;
      }
      ASSERT_TRUE(step(r, prompt));
      for (int i = 0; i < 5; ++i) ASSERT_TRUE(step(r, 1));
      ASSERT_TRUE(cache_->finish(r.id, r.tokens).ok());
      verify(r);
      check_cache("finish");
      // The next, longer prompt reuses every full page below it (the window before
      // a page edge is live right after finish).
      expect_hit = std::min<int64_t>(r.target_len / cfg_.page_size * cfg_.page_size,
                                     (prompt + 40 - 1) / cfg_.page_size * cfg_.page_size);
      if (prompt == len + 40)
        expect_hit = std::min<int64_t>(r.target_len, len + 70 - 1) / cfg_.page_size * cfg_.page_size;
    }
    cache_->flush();
    check_cache("flush");
  }
}

INSTANTIATE_TEST_SUITE_P(tiny, cache_engine, ::testing::Values("tiny-a", "tiny-c"));

}  // namespace
}  // namespace hart::testing
