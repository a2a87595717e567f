#include "runtime/model/kv_page_layout.h"

#include <gtest/gtest.h>

namespace hart {
namespace {

// Hand-computed for V4-Flash (2 SWA + 21 CSA + 20 HCA main layers), P = 256,
// head_dim 512, index_head_dim 128; sections rounded up to rows of 512 floats.
// FP8 entries (146 floats each):
//   SWA page: window 256 x 146 = 37,376 per layer (73 rows) x 43
//             + CSA rings 8 x 2048 + indexer ring 2·4·4·128 = 16,384 + 4,096 per CSA layer
//             + HCA ring 128 x 1024 = 131,072 per HCA layer        = 4,658,688 floats
//   full page: CSA 64 entries x 146 = 9,344 -> 9,728 (19 rows) + 64 x 128 keys = 8,192
//              HCA 2 x 146 = 292 -> 512                            = 386,560 floats
TEST(kv_page_layout, v4_flash_fp8_entries) {
  auto cfg = model_config_load(std::string(HART_TEST_DATA) + "/../../configs/deepseek-v4-flash");
  ASSERT_TRUE(cfg.ok()) << cfg.get_status().to_string();
  auto l = kv_page_layout_make(*cfg, 256, true);
  ASSERT_TRUE(l.ok()) << l.get_status().to_string();
  EXPECT_EQ(l->slot_floats, 146);
  EXPECT_EQ(l->swa_floats, 43 * 37376 + 21 * (16384 + 4096) + 20 * 131072);
  EXPECT_EQ(l->full_floats, 21 * (9728 + 8192) + 20 * 512);
  EXPECT_EQ(l->full_page_bytes(), 1546240);
  EXPECT_EQ(l->swa_page_bytes(), 18634752);
  // Sections follow one another: layer 2 (the first CSA) after two SWA windows.
  ASSERT_EQ(cfg->layer_kinds[2], attention_kind::csa);
  EXPECT_EQ(l->layers[2].window_off, 2 * 37376);
  EXPECT_EQ(l->layers[2].ring_off, 3 * 37376);
  EXPECT_EQ(l->layers[2].index_ring_off, 3 * 37376 + 16384);
  EXPECT_EQ(l->layers[2].entry_off, 0);
  EXPECT_EQ(l->layers[2].index_off, 9728);
}

// fp32 rows: window 256 x 512 per layer; CSA entries 64 x 512, HCA 2 x 512.
TEST(kv_page_layout, fp32_rows_and_refusals) {
  auto cfg = model_config_load(std::string(HART_TEST_DATA) + "/../../configs/deepseek-v4-flash");
  ASSERT_TRUE(cfg.ok());
  auto l = kv_page_layout_make(*cfg, 256, false);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->slot_floats, 512);
  EXPECT_EQ(l->full_floats, 21 * (64 * 512 + 8192) + 20 * 1024);
  EXPECT_EQ(l->swa_floats, 43 * 256 * 512 + 21 * (16384 + 4096) + 20 * 131072);

  auto tiny = model_config_load(std::string(HART_TEST_DATA) + "/tiny-a");
  ASSERT_TRUE(tiny.ok());
  ASSERT_NE(tiny->head_dim, 512);
  EXPECT_EQ(kv_page_layout_make(*tiny, 256, true).get_status().code(), status_code::invalid_argument);
  EXPECT_TRUE(kv_page_layout_make(*tiny, 256, false).ok());
}

}  // namespace
}  // namespace hart
