#include "runtime/http/prometheus.h"

#include <gtest/gtest.h>

#include <cmath>

namespace hart::http {
namespace {

TEST(prometheus, counters_get_total_and_every_metric_its_type) {
  protocol::stats_reply s;
  s.entries = {{"queue_depth", 3}, {"generated_tokens", 120}, {"cache_hit_rate", 0.25}, {"odd", NAN}};
  EXPECT_EQ(prometheus_text(s),
            "# HELP hart_queue_depth hart scheduler stat queue_depth\n"
            "# TYPE hart_queue_depth gauge\n"
            "hart_queue_depth 3\n"
            "# HELP hart_generated_tokens_total hart scheduler stat generated_tokens\n"
            "# TYPE hart_generated_tokens_total counter\n"
            "hart_generated_tokens_total 120\n"
            "# HELP hart_cache_hit_rate hart scheduler stat cache_hit_rate\n"
            "# TYPE hart_cache_hit_rate gauge\n"
            "hart_cache_hit_rate 0.25\n"
            "# HELP hart_odd hart scheduler stat odd\n"
            "# TYPE hart_odd gauge\n"
            "hart_odd NaN\n");
}

}  // namespace
}  // namespace hart::http
