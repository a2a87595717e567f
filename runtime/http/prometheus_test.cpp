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

TEST(prometheus, histograms_have_cumulative_buckets_sum_and_count) {
  protocol::stats_reply s;
  latency_histogram h;
  h.bounds = {0.01, 0.1};
  h.counts.assign(3, 0);
  for (double v : {0.004, 0.05, 0.07, 3.0}) h.add(v);
  s.histograms = {{"time_to_first_token_seconds", h}};
  EXPECT_EQ(prometheus_text(s),
            "# HELP hart_time_to_first_token_seconds arrival to first generated token, per sample\n"
            "# TYPE hart_time_to_first_token_seconds histogram\n"
            "hart_time_to_first_token_seconds_bucket{le=\"0.01\"} 1\n"
            "hart_time_to_first_token_seconds_bucket{le=\"0.1\"} 3\n"
            "hart_time_to_first_token_seconds_bucket{le=\"+Inf\"} 4\n"
            "hart_time_to_first_token_seconds_sum 3.1240000000000001\n"
            "hart_time_to_first_token_seconds_count 4\n");
}

}  // namespace
}  // namespace hart::http
