// The GPU executor on cache-managed pages (skips without a device): a request
// that reuses another's first page (a prefix-cache hit at 128 tokens) gets
// the logits the GPU engine computes for the whole prompt alone, a step plan
// samples the greedy token of those logits, and bad page tables are refused
// without touching the pool.
#include "runtime/worker/gpu_executor.h"

#include "kernels/testing/cuda_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace hart::worker {
namespace {

std::vector<int32_t> prompt(int64_t n) {
  std::vector<int32_t> p;
  for (int64_t k = 0; k < n; ++k) p.push_back(int32_t((k * 37 + 11) % 500 + 6));
  return p;
}

gpu_engine_params params() {
  gpu_engine_params p;
  p.base.model_dir = std::string(HART_TEST_DATA) + "/tiny-a";
  p.max_context = 1024;
  return p;
}

cache::cache_config pages() {
  cache::cache_config c;
  c.page_size = 128;
  c.n_full_pages = 8;
  c.n_swa_pages = 8;
  return c;
}

// max |a - b| / max |b| over one row of `vocab` logits.
double rel_err(const float* a, const float* b, int64_t vocab) {
  double d = 0, m = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    d = std::max(d, std::fabs(double(a[v]) - b[v]));
    m = std::max(m, std::fabs(double(b[v])));
  }
  return d / m;
}

TEST(gpu_executor, prefix_hit_on_cache_pages_gives_the_whole_prompt_logits) {
  HART_SKIP_WITHOUT_CUDA();
  auto loaded = gpu_engine_for_cache(params(), pages());
  ASSERT_TRUE(loaded.ok()) << loaded.get_status().to_string();
  std::shared_ptr<gpu_engine> shared = std::move(*loaded);
  const gpu_engine& eng = *shared;
  const std::unique_ptr<engine_executor> ex = gpu_executor(shared);
  const int64_t V = eng.config().vocab_size, n = 200;
  const std::vector<int32_t> toks = prompt(n);

  auto ref = gpu_engine::load(params());  // its own sequences, on its own pool
  ASSERT_TRUE(ref.ok()) << ref.get_status().to_string();
  sequence_state r = (*ref)->new_sequence();
  std::vector<float> want;
  ASSERT_TRUE((*ref)->forward({{&r, toks, logits_request::all}}, &want).ok());

  // Request A computes pages 0 and 1; request B shares A's first page (128 cached positions).
  sequence_state a = eng.bind_pages({0, 1}, {0, 1}, 0);
  std::vector<float> got;
  ASSERT_TRUE(eng.forward({{&a, toks, logits_request::none}}, &got).ok());
  sequence_state b = eng.bind_pages({0, 2}, {0, 2}, 128);
  const std::vector<int32_t> rest(toks.begin() + 128, toks.end());
  ASSERT_TRUE(eng.forward({{&b, rest, logits_request::all}}, &got).ok());
  ASSERT_EQ(int64_t(got.size()), (n - 128) * V);
  for (int64_t j = 0; j < n - 128; ++j) {
    EXPECT_LE(rel_err(got.data() + j * V, want.data() + (128 + j) * V, V), 2e-5) << "position " << 128 + j;
  }

  // The same hit as a step plan: the greedy token of the last position's logits.
  sched::step_plan plan;
  plan.step = 7;
  sched::step_item it;
  it.seq_id = 1;
  it.tokens = rest;
  it.full_pages = {0, 3};
  it.swa_pages = {0, 3};
  it.n_computed = 128;
  it.sample_last = true;
  it.logprobs = true;
  plan.items.push_back(it);
  auto res = ex->execute(plan);
  ASSERT_TRUE(res.ok()) << res.get_status().to_string();
  ASSERT_TRUE(res->error.ok()) << res->error.to_string();
  ASSERT_EQ(res->sampled.size(), 1u);
  const float* last = want.data() + (n - 1) * V;
  EXPECT_EQ(res->sampled[0].token, int32_t(std::max_element(last, last + V) - last));
  EXPECT_EQ(res->step, 7u);
}

TEST(gpu_executor, bad_page_tables_are_refused) {
  HART_SKIP_WITHOUT_CUDA();
  auto loaded = gpu_engine_for_cache(params(), pages());
  ASSERT_TRUE(loaded.ok()) << loaded.get_status().to_string();
  const gpu_engine& eng = **loaded;
  const std::vector<int32_t> toks = prompt(72);
  std::vector<float> logits;

  sequence_state short_table = eng.bind_pages({0}, {0}, 100);  // positions up to 172 need 2 pages
  status st = eng.forward({{&short_table, toks, logits_request::last}}, &logits);
  EXPECT_EQ(st.code(), status_code::failed_precondition) << st.to_string();
  EXPECT_EQ(short_table.n_tokens, 100);

  sequence_state outside = eng.bind_pages({0, 99}, {0, 1}, 100);  // the pool has 8 full pages
  st = eng.forward({{&outside, toks, logits_request::last}}, &logits);
  EXPECT_EQ(st.code(), status_code::invalid_argument) << st.to_string();

  sequence_state dead = eng.bind_pages({0, 1}, {-1, 1}, 100);  // the window still reads page 0
  st = eng.forward({{&dead, toks, logits_request::last}}, &logits);
  EXPECT_EQ(st.code(), status_code::failed_precondition) << st.to_string();

  sequence_state ok = eng.bind_pages({0}, {0}, 0);
  ASSERT_TRUE(eng.forward({{&ok, toks, logits_request::last}}, &logits).ok());
  sequence_state own = eng.new_sequence();  // would take page ids the cache hands out
  st = eng.forward({{&own, toks, logits_request::last}}, &logits);
  EXPECT_EQ(st.code(), status_code::failed_precondition) << st.to_string();
}

}  // namespace
}  // namespace hart::worker
