//===- KernelTimes.h - What repeated kernel runs say ------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A calibrated host prices ops by running their kernels repeatedly
// (HostOpTiming.cpp, timeKernels). These turn the runs' times into one
// number. Kept free of MLIR so that the planner's tests check them.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_COSTMODEL_KERNELTIMES_H
#define RONDO_COSTMODEL_KERNELTIMES_H

#include <algorithm>
#include <cstddef>
#include <vector>

namespace rondo::cost {

/// The least run: one op's kernels at their best. An op's own runs take
/// microseconds within a few milliseconds, so the least is stable, and it
/// only weighs the op against the others of its function (the function's
/// typical time sets the scale). 0 for no runs.
inline double leastSeconds(const std::vector<double> &runs) {
  return runs.empty() ? 0 : *std::min_element(runs.begin(), runs.end());
}

/// What a run takes in a trainer's step: the mean of the middle 60% of the
/// runs (all of them below five). A 2-core virtual machine ran a fixed loop
/// at times twice as fast as usual; the least run caught such moments in
/// some compilations and not in others, so that three compilations in a
/// row put the demo's training function at 6.7 to 10.5 ms, and its steps
/// took up to 1.6x the predicted. The slowest runs (a preempted one) are
/// left out on the other side. 0 for no runs.
inline double typicalSeconds(std::vector<double> runs) {
  if (runs.empty())
    return 0;
  std::sort(runs.begin(), runs.end());
  size_t trim = runs.size() >= 5 ? runs.size() / 5 : 0;
  double sum = 0;
  for (size_t i = trim; i < runs.size() - trim; ++i)
    sum += runs[i];
  return sum / double(runs.size() - 2 * trim);
}

} // namespace rondo::cost

#endif // RONDO_COSTMODEL_KERNELTIMES_H
