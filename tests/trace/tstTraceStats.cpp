/// \file tstTraceStats.cpp
/// \brief `trace info` statistics on a trace whose answers are known by hand.
#include "canopy_TraceStats.hpp"

#include <gtest/gtest.h>

namespace canopy::test
{
TEST(TraceStats, percentilesInterpolateBetweenRanks)
{
  std::vector<int64_t> v;
  for (int64_t i = 100; i >= 1; --i)
    v.push_back(i);
  Distribution const d = summarize(v);
  EXPECT_EQ(d.count, 100);
  EXPECT_DOUBLE_EQ(d.mean, 50.5);
  EXPECT_EQ(d.min, 1);
  // Positions q (n - 1) = 9.9, 49.5, 89.1 of 1..100: the project's one quantile definition.
  EXPECT_DOUBLE_EQ(d.p10, 10.9);
  EXPECT_DOUBLE_EQ(d.p50, 50.5);
  EXPECT_DOUBLE_EQ(d.p90, 90.1);
  EXPECT_EQ(d.max, 100);
  EXPECT_EQ(summarize({}).count, 0);
}

TEST(TraceStats, handTraceGivesKnownNumbers)
{
  TraceContent t;
  t.num_slots = 100;
  // Step 0: prefixes [5 6 7 10 11] (2 runs) and [20] (1 run); step 1: [5 6 7 10 11 12 13 40] (3 runs).
  t.steps.push_back(TraceStep{{TraceRequest{1, {{5, 6, 7, 10, 11}, {-1, 0, 1}, {12, 13, 14}}, 3},
                               TraceRequest{2, {{20}, {-1, 0}, {21, 22}}, 1}}});
  t.steps.push_back(TraceStep{{TraceRequest{1, {{5, 6, 7, 10, 11, 12, 13, 40}, {-1, 0, 0, 2}, {50, 51, 52, 53}}, 2}}});
  TraceColumns const c = toColumns(t);
  validateTraceColumns(c);
  TraceStats const s = computeTraceStats(c);
  EXPECT_EQ(s.steps, 2);
  EXPECT_EQ(s.rows, 3);
  EXPECT_EQ(s.distinct_requests, 2);
  EXPECT_EQ(s.prefix_tokens, 14);
  EXPECT_EQ(s.prefix_runs, 6);
  EXPECT_DOUBLE_EQ(s.mean_run_length, 14.0 / 6.0);
  EXPECT_EQ(s.batch.max, 2);
  EXPECT_EQ(s.batch.min, 1);
  EXPECT_EQ(s.tree.max, 4);
  EXPECT_EQ(s.depth.max, 2);
  EXPECT_EQ(s.depth.min, 1);
  // Trees {-1 0 1}, {-1 0}, {-1 0 0 2}: root fan-out 1, 1, 2; widest level 1, 1, 2; 6 child links
  // from 5 internal nodes.
  EXPECT_EQ(s.root_children.min, 1);
  EXPECT_EQ(s.root_children.max, 2);
  EXPECT_DOUBLE_EQ(s.root_children.mean, 4.0 / 3.0);
  EXPECT_EQ(s.widest.max, 2);
  EXPECT_EQ(s.widest.min, 1);
  EXPECT_DOUBLE_EQ(s.mean_branching, 6.0 / 5.0);
  EXPECT_EQ(s.step_tokens.max, 8);
  EXPECT_EQ(s.max_slot, 53);
  ASSERT_EQ(s.accepted_histogram.size(), 4u);
  EXPECT_EQ(s.accepted_histogram[1], 1);
  EXPECT_EQ(s.accepted_histogram[2], 1);
  EXPECT_EQ(s.accepted_histogram[3], 1);
  EXPECT_DOUBLE_EQ(s.mean_accepted, 2.0);
  TraceInfo info;
  std::string const text = formatTraceStats(info, s);
  EXPECT_NE(text.find("mean run length 2.33"), std::string::npos) << text;
  EXPECT_NE(text.find("mean accepted length 2.000"), std::string::npos) << text;
  EXPECT_NE(text.find("branching: 1.20 children per internal tree node"), std::string::npos) << text;
}
} // namespace canopy::test
