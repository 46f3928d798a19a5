//===- PlannerInternal.h - Helpers shared inside compiler/Planner ----*- C++
//-*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// What the cost model, the memory model and the searches share but the
// planner's users do not need: the layer-table accessors, the objective's
// job floor and the tie-break order of the exact search and the brute force.
// Private to compiler/Planner; the public API is rondo/Planner/Planner.h.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_LIB_PLANNER_PLANNERINTERNAL_H
#define RONDO_LIB_PLANNER_PLANNERINTERNAL_H

#include "Planner/Planner.h"

#include <algorithm>
#include <limits>

namespace rondo::planner::detail {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// The activation entering layer `x`; nothing enters "layer L".
inline double inputOf(const PlanProblem &problem, int x) {
  return x >= 0 && x < int(problem.layers.size()) ? problem.layers[x].inputBytes
                                                  : 0.0;
}

/// The checkpoint a backward stage starting at `first` keeps on the host for
/// all microbatches (layer 0's input is the token data: free).
inline double checkpointBytes(const PlanProblem &problem, int first) {
  return first > 0 ? problem.microbatches * inputOf(problem, first) : 0.0;
}

/// Host bytes every plan needs: the fixed part and the staging buffers.
double hostBaseBytes(const PlanProblem &problem);

/// The fewest stage-jobs the objective counts: max(N, minJobs).
inline int jobFloor(const PlanProblem &problem) {
  return std::max({problem.workers, problem.minJobs, 1});
}

/// planObjective from a plan's job count and slowest job. The exact search
/// scores plans from cached stage costs with it, so its objectives and
/// bounds compare exactly with planObjective's (ties are kept).
inline double objectiveOf(const PlanProblem &problem, int jobs,
                          double slowest) {
  return double(std::max(jobs, jobFloor(problem))) * slowest /
         std::max(problem.workers, 1);
}

/// Whether the searches have anything to partition.
inline bool problemIsUsable(const PlanProblem &problem) {
  return !problem.layers.empty() && problem.workers >= 1 &&
         problem.microbatches >= 1;
}

/// Tie-break order shared by the exact search and the brute force: smaller
/// objective, then fewer jobs, then smaller sum of job times.
struct Score {
  double objective = kInf;
  int jobs = 0;
  double sumJobSeconds = 0;
  bool betterThan(const Score &o) const {
    if (objective != o.objective)
      return objective < o.objective;
    if (jobs != o.jobs)
      return jobs < o.jobs;
    return sumJobSeconds < o.sumJobSeconds;
  }
};

} // namespace rondo::planner::detail

#endif // RONDO_LIB_PLANNER_PLANNERINTERNAL_H
