#include "runtime/cache/memory_plan.h"

#include "runtime/core/status_testing.h"

#include <gtest/gtest.h>

namespace hart::cache {
namespace {

constexpr int64_t GiB = int64_t(1) << 30;

// A 140 GiB device at fraction 0.75 (exact in binary): budget 105 GiB. In
// use: weights 100 GiB, workspaces 2 GiB, 0.5 GiB of CUDA context, so the KV
// budget is 2.5 GiB = 2,684,354,560 B. V4-Flash's fp8 pages (cache_plan_test):
// full 985,664 B, SWA 18,784,256 B; P = 256, window 128 -> 3 SWA pages per sequence.
memory_plan_params flash_like() {
  memory_plan_params p;
  p.device_total = 140 * GiB;
  p.device_free = 140 * GiB - 100 * GiB - 2 * GiB - GiB / 2;
  p.fraction = 0.75;
  p.weights = 100 * GiB;
  p.workspaces = 2 * GiB;
  p.full_page_bytes = 985664;
  p.swa_page_bytes = 18784256;
  p.page_size = 256;
  p.window = 128;
  p.max_context = 131072;
  p.max_running = 8;
  p.max_batch_tokens = 1024;
  return p;
}

// SWA: 8 running x 3 + 1024 / 256 = 28 pages = 525,959,168 B. Full pages:
// (2,684,354,560 - 525,959,168) / 985,664 = 2189 (2,157,618,496 B). 131072
// tokens = 512 pages: 4 sequences; 2189 x 256 = 560,384 tokens.
TEST(memory_plan, sizes_the_pages_from_what_the_fraction_leaves) {
  auto plan = memory_plan_make(flash_like());
  ASSERT_TRUE(plan.ok()) << plan.get_status().to_string();
  EXPECT_EQ(plan->budget, 105 * GiB);
  EXPECT_EQ(plan->others, GiB / 2);
  EXPECT_EQ(plan->kv_budget, 2684354560ll);
  EXPECT_EQ(plan->swa_pages_per_seq, 3);
  EXPECT_EQ(plan->n_swa_pages, 28);
  EXPECT_EQ(plan->n_full_pages, 2189);
  EXPECT_EQ(plan->kv_bytes, 2157618496ll + 525959168ll);
  EXPECT_LE(plan->kv_bytes, plan->kv_budget);
  EXPECT_GT(plan->kv_bytes + plan->in.full_page_bytes, plan->kv_budget);  // no whole page left over
  EXPECT_EQ(plan->full_pages_per_seq, 512);
  EXPECT_EQ(plan->seqs_at_max_context, 4);
  EXPECT_EQ(plan->token_capacity, 560384);
  const std::string text = plan->describe();
  EXPECT_NE(text.find("weights              100.00 GiB"), std::string::npos) << text;
  EXPECT_NE(text.find("2189 full"), std::string::npos) << text;
  EXPECT_NE(text.find("4 sequences of --max-context 131072"), std::string::npos) << text;
}

TEST(memory_plan, refuses_a_context_that_does_not_fit_with_the_numbers) {
  memory_plan_params p = flash_like();
  p.max_context = 1 << 20;  // 4096 pages; 2189 fit
  auto plan = memory_plan_make(p);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.get_status().code(), status_code::resource_exhausted);
  const std::string& msg = plan.get_status().message();
  EXPECT_NE(msg.find("--max-context 1048576"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4096 full pages"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2189 full pages fit"), std::string::npos) << msg;
  EXPECT_NE(msg.find("weights 100.00 GiB"), std::string::npos) << msg;
}

// 64 running sequences' windows alone (196 SWA pages, 3.43 GiB) exceed the 2.5 GiB.
TEST(memory_plan, refuses_too_many_running_sequences) {
  memory_plan_params p = flash_like();
  p.max_running = 64;
  auto plan = memory_plan_make(p);
  ASSERT_STATUS(plan, status_code::resource_exhausted, "--max-running 64");
}

TEST(memory_plan, refuses_when_weights_and_workspaces_take_the_whole_budget) {
  memory_plan_params p = flash_like();
  p.weights = 103 * GiB;
  p.device_free = 140 * GiB - 103 * GiB - 2 * GiB - GiB / 2;  // 105.5 GiB in use > 105
  auto plan = memory_plan_make(p);
  ASSERT_STATUS(plan, status_code::resource_exhausted, "nothing is left for the KV cache");
}

TEST(memory_plan, takes_given_page_counts_when_they_fit) {
  memory_plan_params p = flash_like();
  p.n_full_pages = 600;
  p.n_swa_pages = 40;
  auto plan = memory_plan_make(p);
  ASSERT_TRUE(plan.ok()) << plan.get_status().to_string();
  EXPECT_EQ(plan->n_full_pages, 600);
  EXPECT_EQ(plan->n_swa_pages, 40);
  EXPECT_EQ(plan->kv_bytes, 600 * 985664ll + 40 * 18784256ll);

  p.n_full_pages = 3000;  // 2.75 GiB + the SWA pages
  plan = memory_plan_make(p);
  ASSERT_STATUS(plan, status_code::resource_exhausted, "3000 full pages");

  p = flash_like();
  p.n_swa_pages = 10;  // only SWA given: full pages from the rest
  plan = memory_plan_make(p);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->n_full_pages, (2684354560ll - 10 * 18784256ll) / 985664);
}

TEST(memory_plan, rejects_bad_params) {
  const auto code = [](const memory_plan_params& p) { return memory_plan_make(p).get_status().code(); };
  memory_plan_params p = flash_like();
  p.fraction = 0;
  EXPECT_EQ(code(p), status_code::invalid_argument);
  p.fraction = 1.5;
  EXPECT_EQ(code(p), status_code::invalid_argument);
  p = flash_like();
  p.device_free = p.device_total + 1;
  EXPECT_EQ(code(p), status_code::invalid_argument);
  p = flash_like();
  p.weights = 200 * GiB;  // more than is in use
  EXPECT_EQ(code(p), status_code::invalid_argument);
  p = flash_like();
  p.max_context = 0;
  EXPECT_EQ(code(p), status_code::invalid_argument);
  p = flash_like();
  p.full_page_bytes = 0;
  EXPECT_EQ(code(p), status_code::invalid_argument);
}

}  // namespace
}  // namespace hart::cache
