#include "runtime/cache/cache_plan.h"

#include "runtime/core/status_testing.h"

#include <gtest/gtest.h>

namespace hart::cache {
namespace {

// Hand-computed for V4-Flash (2 SWA + 21 CSA + 20 HCA + 1 MTP), fp8, P = 256:
//   entry 584 B (448 + 2*64 + 8), indexer entry 132 B (128 + 4)
//   SWA KV  44 layers * 584                      = 25,696 B/token
//   C4 KV   21 * 584 / 4                         = 3,066 B/token
//   C128 KV 20 * 584 / 128                       = 91.25 B/token
//   indexer 21 * 132 / 4                         = 693 B/token
//   full page 21*64*(584+132) + 20*2*584         = 985,664 B (= 256 * 3,850.25)
//   CSA state 21 layers * 8 rows * 4*4*(512+128) = 1,720,320 B per SWA page
//   HCA state 20 layers * 128 rows * 4*2*512     = 10,485,760 B per SWA page
//   SWA page 256*25,696 + 1,720,320 + 10,485,760 = 18,784,256 B
//   1M context: 4,096 full pages + 3 SWA pages   = 4,093,632,512 B per sequence
//   80 GiB = 85,899,345,920 B -> 20 sequences; one sequence: 87,091 pages = 22,295,296 tokens
TEST(cache_plan, v4_flash_fp8_80gib_1m) {
  cache_plan_params p = cache_plan_params::v4_flash();
  p.memory_bytes = 80ll << 30;
  p.context_len = 1 << 20;
  auto plan = cache_plan_make(p);
  ASSERT_TRUE(plan.ok()) << plan.get_status().to_string();
  EXPECT_EQ(plan->swa_kv_bytes_per_token, 25696);
  EXPECT_DOUBLE_EQ(plan->c4_kv_bytes_per_token, 3066.0);
  EXPECT_DOUBLE_EQ(plan->c128_kv_bytes_per_token, 91.25);
  EXPECT_DOUBLE_EQ(plan->indexer_bytes_per_token, 693.0);
  EXPECT_DOUBLE_EQ(plan->full_bytes_per_token, 3850.25);
  EXPECT_EQ(plan->full_page_bytes, 985664);
  EXPECT_EQ(plan->csa_state_bytes_per_swa_page, 1720320);
  EXPECT_EQ(plan->hca_state_bytes_per_swa_page, 10485760);
  EXPECT_EQ(plan->swa_page_bytes, 18784256);
  EXPECT_EQ(plan->full_pages_per_seq, 4096);
  EXPECT_EQ(plan->swa_pages_per_seq, 3);
  EXPECT_EQ(plan->bytes_per_seq, 4093632512ll);
  EXPECT_EQ(plan->max_seqs, 20);
  EXPECT_EQ(plan->max_tokens_one_seq, 22295296);
  EXPECT_EQ(plan->n_swa_pages, 60);
  EXPECT_EQ(plan->n_full_pages, 86005);
}

// fp32 entries: 2048 B KV, 512 B indexer key; states unchanged.
TEST(cache_plan, v4_flash_fp32_pages) {
  cache_plan_params p = cache_plan_params::v4_flash();
  p.precision = kv_precision::fp32;
  p.memory_bytes = 80ll << 30;
  p.context_len = 8192;
  auto plan = cache_plan_make(p);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->full_page_bytes, 21 * 64 * (2048 + 512) + 20 * 2 * 2048);  // 3,522,560
  EXPECT_EQ(plan->swa_page_bytes, 256 * 44 * 2048 + 1720320 + 10485760);     // 35,274,752
  EXPECT_EQ(plan->bytes_per_seq, 32 * 3522560ll + 3 * 35274752ll);
}

TEST(cache_plan, rejects_bad_params_and_tiny_budgets) {
  cache_plan_params p = cache_plan_params::v4_flash();
  p.memory_bytes = 1 << 20;
  p.context_len = 1 << 20;
  auto plan = cache_plan_make(p);
  EXPECT_STATUS(plan, status_code::resource_exhausted, "out of KV memory");
  p.page_size = 200;
  EXPECT_EQ(cache_plan_make(p).get_status().code(), status_code::invalid_argument);
}

}  // namespace
}  // namespace hart::cache
