// routing_trace: slicing a forward call's trace rows, writing parts at their
// positions (a recomputation rewrites them), truncating.
#include "runtime/sched/routing_trace.h"

#include <gtest/gtest.h>

namespace hart::sched {
namespace {

TEST(routing_trace, slice_write_and_truncate) {
  // A call of 5 tokens: layer 0 top-2 experts, CSA layer 1 top-3 picks (position-major).
  const std::map<int64_t, std::vector<int32_t>> experts = {{0, {0, 1, 2, 3, 4, 5, 6, 7, 0, 2}}};
  const std::map<int64_t, std::vector<int32_t>> picks = {
      {1, {0, -1, -1, 1, 0, -1, 2, 1, 0, 3, 2, 1, 0, 1, 2}}};
  const routing_trace part = routing_trace::slice(experts, picks, 5, 1, 3);  // tokens 1..3
  EXPECT_EQ(part.positions, 3);
  ASSERT_EQ(part.experts.size(), 1u);
  EXPECT_EQ(part.experts[0].k, 2);
  EXPECT_EQ(part.experts[0].ids, (std::vector<int32_t>{2, 3, 4, 5, 6, 7}));
  ASSERT_EQ(part.picks.size(), 1u);
  EXPECT_EQ(part.picks[0].layer, 1);
  EXPECT_EQ(part.picks[0].ids, (std::vector<int32_t>{1, 0, -1, 2, 1, 0, 3, 2, 1}));

  routing_trace t;
  t.write(part, 4);  // positions 4..6; 0..3 not written yet
  EXPECT_EQ(t.positions, 7);
  EXPECT_EQ(t.experts[0].ids, (std::vector<int32_t>{-1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 4, 5, 6, 7}));
  t.write(routing_trace::slice(experts, picks, 5, 0, 2), 0);
  EXPECT_EQ(t.positions, 7);
  EXPECT_EQ(std::vector<int32_t>(t.experts[0].ids.begin(), t.experts[0].ids.begin() + 4),
            (std::vector<int32_t>{0, 1, 2, 3}));
  t.write(routing_trace::slice(experts, picks, 5, 4, 1), 4);  // a recomputation of position 4
  EXPECT_EQ(t.experts[0].ids[8], 0);
  EXPECT_EQ(t.experts[0].ids[9], 2);
  t.truncate(5);
  EXPECT_EQ(t.positions, 5);
  EXPECT_EQ(t.experts[0].ids.size(), 10u);
  EXPECT_EQ(t.picks[0].ids.size(), 15u);
  t.truncate(9);  // never grows
  EXPECT_EQ(t.positions, 5);
}

}  // namespace
}  // namespace hart::sched
