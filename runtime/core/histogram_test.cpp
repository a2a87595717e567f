#include "runtime/core/histogram.h"

#include <gtest/gtest.h>

namespace hart {
namespace {

TEST(latency_histogram, buckets_are_upper_bounds_and_cumulate) {
  latency_histogram h;
  h.bounds = {0.01, 0.1, 1};
  h.counts.assign(4, 0);
  for (double s : {0.005, 0.01, 0.05, 0.5, 7.0}) h.add(s);
  EXPECT_EQ(h.counts, (std::vector<uint64_t>{2, 1, 1, 1}));  // 0.01 falls in its own bound's bucket
  EXPECT_EQ(h.cumulative(0), 2u);
  EXPECT_EQ(h.cumulative(2), 4u);
  EXPECT_EQ(h.cumulative(3), 5u);
  EXPECT_EQ(h.count, 5u);
  EXPECT_DOUBLE_EQ(h.sum, 7.565);
  EXPECT_TRUE(h.validate().ok());
}

TEST(latency_histogram, validate_refuses_what_prometheus_could_not_show) {
  latency_histogram h;
  h.add(0.2);
  ASSERT_TRUE(h.validate().ok());
  latency_histogram bad = h;
  bad.counts.pop_back();
  EXPECT_FALSE(bad.validate().ok());
  bad = h;
  std::swap(bad.bounds[0], bad.bounds[1]);
  EXPECT_FALSE(bad.validate().ok());
  bad = h;
  bad.count = 2;
  EXPECT_NE(bad.validate().message().find("add up"), std::string::npos);
}

}  // namespace
}  // namespace hart
