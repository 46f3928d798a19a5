//===- LongContext.cpp - The finest plan, longest sequence ----------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Long-context planning: the finest plan (one layer per stage, the least
// worker memory) and the longest sequence some plan holds in the budgets.
//
//===----------------------------------------------------------------------===//

#include "Planner/Planner.h"

#include <cstdint>

namespace rondo::planner {

Plan finestPlan(int numLayers) {
  Plan fine;
  fine.tail = {StageKind::Tail, numLayers - 1, numLayers};
  for (int l = 0; l + 1 < numLayers; ++l)
    fine.forward.push_back({StageKind::Forward, l, l + 1});
  for (int l = numLayers - 2; l >= 0; --l)
    fine.backward.push_back({StageKind::Backward, l, l + 1});
  return fine;
}

int64_t maxSequenceLength(const PlanProblem &problem,
                          double tokensPerMicrobatch, int64_t granularity,
                          int64_t limit) {
  if (problem.layers.empty() || tokensPerMicrobatch <= 0)
    return 0;
  if (problem.workerMemoryBytes <= 0 && problem.hostMemoryBytes <= 0)
    return limit;
  const Plan fine = finestPlan(int(problem.layers.size()));
  auto fits = [&](int64_t tokens) {
    PlanProblem scaled = problem;
    scaled.microbatches = 1;
    const double s = double(tokens) / tokensPerMicrobatch;
    for (LayerCost &l : scaled.layers) {
      l.inputBytes *= s;
      l.workspaceBytes *= s;
      l.transientBytes *= s;
      l.forwardSeconds *= s;
      l.backwardSeconds *= s;
    }
    if (!fitsBudgets(scaled, fine, nullptr))
      return false;
    return scaled.workerMemoryBytes <= 0 ||
           workerArenaBytes(scaled, fine) <= scaled.workerMemoryBytes;
  };
  if (!fits(granularity))
    return 0;
  if (fits(limit))
    return limit;
  int64_t lo = 1, hi = limit / granularity; // lo fits, hi does not
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (fits(mid * granularity) ? lo : hi) = mid;
  }
  return lo * granularity;
}

} // namespace rondo::planner
