//===- KernelTimesTest.cpp - Repeated kernel runs to one time -------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "CostModel/KernelTimes.h"

#include <gtest/gtest.h>

using rondo::cost::leastSeconds;
using rondo::cost::typicalSeconds;

TEST(KernelTimesTest, NoRunsTakeNoTime) {
  EXPECT_EQ(leastSeconds({}), 0);
  EXPECT_EQ(typicalSeconds({}), 0);
}

// An op's weight is its least run.
TEST(KernelTimesTest, LeastIsTheFastestRun) {
  EXPECT_DOUBLE_EQ(leastSeconds({3e-3, 1e-3, 2e-3}), 1e-3);
}

// Below five runs nothing is trimmed: the mean.
TEST(KernelTimesTest, FewRunsAreAveraged) {
  EXPECT_DOUBLE_EQ(typicalSeconds({0.2, 0.1, 0.3}), 0.2);
}

// A function's time is what most runs take: moments at twice the usual
// speed (a virtual machine's core while its other core idles) do not set
// it, as they set the least run.
TEST(KernelTimesTest, RareFastMomentsDoNotSetTheTime) {
  std::vector<double> runs = {1, 2, 2, 2, 1, 2, 2, 2, 1, 2};
  EXPECT_DOUBLE_EQ(leastSeconds(runs), 1);
  // The middle 60%: one fast run and five usual ones.
  EXPECT_DOUBLE_EQ(typicalSeconds(runs), 11.0 / 6);
}

// Nor does a preempted run.
TEST(KernelTimesTest, APreemptedRunIsLeftOut) {
  std::vector<double> runs(9, 1e-2);
  runs.push_back(0.5);
  EXPECT_DOUBLE_EQ(typicalSeconds(runs), 1e-2);
}
